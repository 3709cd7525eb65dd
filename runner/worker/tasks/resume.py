"""Resumed work first: a running chunk's message waits in its job type's resume queue.

A message whose lease runs out becomes visible where it is. Left in the job queue, a
dead worker's chunk would come back behind every fresh chunk received meanwhile (in a
queue of thousands, at the end of the job). So when a chunk is claimed, its message
moves: a copy is sent to ``<queue>-resume``, hidden for one lease, the claim names the
copy, the lease follows the copy, and the original is deleted. Workers poll the resume
queue before the job queue (:func:`queues_to_poll`), so the chunk's next attempt, or
its retry after a backoff, or a chunk handed back by a graceful stop, is the next
message any worker of the type receives.

A job type of several queues (``queues = N``) has one resume queue all the same: it
carries running chunks only, a fraction of the traffic. Its workers ask it before the
type's queues in their turns (:mod:`runner.worker.receiving.receive_order`), and a chunk
poisoned from it goes to its own queue's poison queue
(:attr:`~runner.worker.tasks.delivery.Delivery.home_queue`).

The cost is a queue send and a delete per attempt (the copy's delete at the end is the
one the original would have had), and one receive of the resume queue per receive of
the job queue. Chunks that take under :data:`MOVE_MIN_CHUNK_SECONDS` on average on this
worker do not move: for them that would double the queue requests per chunk, and a
dead worker's chunk behind the fresh ones delays the job's end by about its own short
time only. A job class sets ``resume_first = False`` never to move.

Every step may fail, even applied with its answer lost; none loses the chunk or runs it
twice at once:

- the copy's send fails: the chunk runs from the original, as without this module (an
  applied send's copy comes back after a lease and is found a duplicate: the record
  names the original);
- the claim is lost to another worker, or the chunk need not run: the copy is deleted
  (or, if that fails, found a duplicate when it comes back);
- the original's delete fails: it comes back after its lease and is found a
  duplicate (the record names the copy), deleted unrun.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from checkpoint import retries
from checkpoint.errors import StorageError
from checkpoint.storage import NEVER_EXPIRES, QueueMessage
from jobs.job import ChunkedJob
from runner.worker.receiving.prefetch import ChunkTimes
from runner.worker.tasks.delivery import Delivery
from runner.worker.tasks.task_kinds import KINDS

log = logging.getLogger(__name__)

#: Chunks of a type that take less than this on average here (seconds) stay in the job
#: queue: for them the move would double the queue requests per chunk, and a dead
#: worker's chunk found behind the fresh ones delays the job's end by about its own
#: short time only. Until a chunk of the type has ended here, chunks move.
MOVE_MIN_CHUNK_SECONDS = 1.0
#: How often a worker looks into the resume queue of a job type that does not move its
#: messages there (``resume_first = False``): only messages left from when it did, or
#: from workers running an older version of the class, can be there.
IDLE_RESUME_POLL_SECONDS = 60.0
#: How often a worker whose chunks of a type are quick (they do not move) looks into the
#: type's resume queue: only other workers' moves can be there (their first chunks, or
#: chunks slow there), so a second (the longest idle poll by default) is soon enough,
#: and asking it at every receive cost a receive per receive of the job queue.
QUICK_RESUME_POLL_SECONDS = 1.0


def moves_here(cls: type[ChunkedJob], chunk_times: ChunkTimes) -> bool:
    """Whether this worker moves claimed chunks of ``cls`` to its resume queue now:
    unless the class opts out or its chunks take under :data:`MOVE_MIN_CHUNK_SECONDS`
    on average here (until one has ended, they move)."""
    if not cls.resume_first:
        return False
    took = chunk_times.seconds(cls.job_type())
    return took is None or took >= MOVE_MIN_CHUNK_SECONDS


def queues_to_poll(
    cls: type[ChunkedJob],
    now: float,
    resume_polled_at: float | None,
    job_queues: Sequence[str] | None = None,
    moves: bool = True,
) -> list[str]:
    """The queues of ``cls`` to receive from, in order, at ``now`` (monotonic): its
    resume queue first, then its job queues: ``job_queues`` in the order given (a
    worker's fair rotation, :mod:`runner.worker.receiving.polling`), else its ``chunk_queues()``.
    The resume queue is asked every time while this worker ``moves`` chunks there
    (:func:`moves_here`); else once per :data:`QUICK_RESUME_POLL_SECONDS`, or per
    :data:`IDLE_RESUME_POLL_SECONDS` for a class that does not use it."""
    queues = list(cls.chunk_queues() if job_queues is None else job_queues)
    if resume_polled_at is None or (cls.resume_first and moves):
        return [cls.resume_queue(), *queues]
    every = QUICK_RESUME_POLL_SECONDS if cls.resume_first else IDLE_RESUME_POLL_SECONDS
    if now - resume_polled_at >= every:
        return [cls.resume_queue(), *queues]
    return queues


@dataclass(frozen=True)
class Moved:
    """A chunk message's copy in the resume queue, and when its send started
    (monotonic): its hidden time runs from then."""

    copy: QueueMessage
    sent_at: float


def copy_to_resume(delivery: Delivery) -> Moved | None:
    """A copy of the delivery's chunk message, sent hidden for one lease to its resume
    queue; None if it needs none (not a chunk, in the resume queue already, a class that
    opts out) or the send failed (the chunk then runs from the message it came in)."""
    cls, lease = delivery.job_class, delivery.lease
    if not KINDS[delivery.kind].moves_to_resume or lease.queue == cls.resume_queue():
        return None
    if not moves_here(cls, delivery.worker.chunk_times):
        return None  # quick chunks: a dead worker's costs the job's tail only as long
    sent_at = delivery.worker.clock.monotonic()
    try:
        copy = delivery.worker.queues.send(
            cls.resume_queue(),
            delivery.message.body,
            delay_seconds=lease.lease_seconds,
            ttl_seconds=NEVER_EXPIRES,
        )
    except StorageError as error:
        log.warning(
            "chunk %s of %s: copying its message to %s failed (%s); it runs from %s",
            delivery.index,
            delivery.job_id,
            cls.resume_queue(),
            error,
            lease.queue,
        )
        return None
    return Moved(copy, sent_at)


def follow(delivery: Delivery, moved: Moved | None) -> None:
    """The chunk is claimed under the copy: its lease follows the copy and the original
    is deleted. Nothing to do without a copy."""
    if moved is None:
        return
    lease = delivery.lease
    original = lease.follow(delivery.job_class.resume_queue(), moved.copy, moved.sent_at)
    if original is None:
        return  # lost already (the chunk stops), or the original's receipt is unknown
    queue, message_id, pop_receipt = original
    budget = delivery.budget(retries.MESSAGE)
    try:
        budget.call(lambda: delivery.worker.queues.delete(queue, message_id, pop_receipt))
    except StorageError as error:
        # It comes back after its lease and is deleted unrun: the record names the copy.
        log.info("deleting message %s from %s after its move failed: %s", message_id, queue, error)


def discard(delivery: Delivery, moved: Moved | None) -> None:
    """The chunk was not claimed under the copy (claimed elsewhere, done, leased on its
    record): delete the copy. If that fails it comes back after a lease and is found a
    duplicate."""
    if moved is None:
        return
    copy, queue = moved.copy, delivery.job_class.resume_queue()
    assert copy.pop_receipt is not None
    try:
        delivery.worker.queues.delete(queue, copy.id, copy.pop_receipt)
    except StorageError as error:
        log.info("deleting the unused copy %s from %s failed: %s", copy.id, queue, error)
