"""One received message, start to end: decode, claim, run, checkpoint, complete.

The order of the steps is the product's correctness, so it is spelled out here, each
step in a module of its own, given the message in hand as one
:class:`~runner.worker.tasks.delivery.Delivery`:

1. Take the message's lease at once (the keeper renews it from now on).
   A message of a job type's intake queue is a submission from another program, not
   a task: it is recorded as a job or rejected (:mod:`runner.worker.intake`), and its
   life ends there.
2. Decode it; anything not ours goes to ``<queue>-poison`` with the reason
   (:mod:`runner.worker.tasks.bad_records`). A message left over from a deleted job (its job
   gone, being deleted, or another incarnation of that id) is deleted unrun
   (:mod:`runner.worker.tasks.leftovers`); one of a cancelled or paused job is deleted or
   parked (:mod:`runner.worker.tasks.parking`).
3. Read the task record (:mod:`runner.worker.tasks.claim`). Done, poisoned or a duplicate
   delivery: delete the message unrun. Claimed ``max_attempts`` times already (or
   delivered far more often than that): poison it.
4. Claim: a conditional write marking the task running under this message. Losing that
   race releases the message for later.
5. Run the user's code (:mod:`runner.worker.tasks.run`); checkpoints are fenced writes (see
   :mod:`runner.worker.tasks.control`).
6. Success: mark done (with the shard's counter, atomically) *before* deleting the
   message, then see whether the job is complete (:mod:`runner.worker.tasks.outcome`). For
   chunks the slot hands that to the :class:`~runner.worker.tasks.chunk_finisher.Finisher`,
   which does it for many chunks at once. Failure: record the error and make the message
   visible again after a backoff, or poison it on the last attempt.

What is not the message's fate is not written here: metrics and job control (a running
task told of a cancel or a pause) hook on the named points of its life
(:mod:`runner.worker.hooks`: started, checkpointed, succeeded, failed, handed back,
poisoned, left), each one module.
"""

from __future__ import annotations

import functools

from checkpoint import messages
from checkpoint.errors import BadMessage, BadRecord
from checkpoint.retries import Budget
from checkpoint.settle import Writer
from checkpoint.storage import QueueMessage
from runner.worker.intake import take_submission, takes_submissions
from runner.worker.leases.lease import Lease, take_lease
from runner.worker.tasks.bad_records import poison_bad_message, unreadable_after_all
from runner.worker.tasks.claim import claim, claim_planned, claimable
from runner.worker.tasks.delivery import Context, Delivery
from runner.worker.tasks.leftovers import judged
from runner.worker.tasks.parking import set_aside
from runner.worker.tasks.resume import copy_to_resume, discard, follow
from runner.worker.tasks.run import start
from runner.worker.tasks.task_kinds import KINDS


def handle(
    worker: Context,
    queue: str,
    message: QueueMessage,
    received_at: float,
    lease: Lease | None = None,
) -> float | None:
    """Process one received message completely; never raises for a bad message.

    ``lease`` is the message's lease if it was taken already
    (:func:`~runner.worker.leases.lease.take_lease`: the worker loop takes it
    at once, while the message waits for a free slot); else it is taken now. Returns the
    seconds its chunk ran, whatever its outcome, if it ran one (None: planning, finalize
    and messages deleted unrun say nothing about the chunks to come). The caller notes them
    (:class:`runner.worker.receiving.prefetch.Slots`): they set the prefetch depth and
    whether the type's messages move to its resume queue.
    """
    if lease is None:
        lease = take_lease(worker.keeper, queue, message, worker.by_queue[queue], received_at)
    try:
        if takes_submissions(worker.by_queue, queue):
            take_submission(worker, lease, message)
            return None
        delivery = _delivery(worker, lease, message)
        return None if delivery is None else _run_task(delivery)
    except BadRecord as bad:
        unreadable_after_all(worker, lease, message, bad)
        return None
    finally:
        # Whatever happened (a storage outage mid-way, say), never renew a message
        # nobody works on: it lapses and is retried. A finished chunk's message is the
        # finisher's now, renewed until it is deleted.
        if not lease.handed_over:
            worker.keeper.drop(lease)


def _delivery(worker: Context, lease: Lease, message: QueueMessage) -> Delivery | None:
    """The message decoded, with its job and job class; None if it was dealt with
    (deleted as a leftover of a deleted job, or poisoned as not ours)."""
    task_message, job_type = None, None
    try:
        task_message = messages.decode(message.body)
        # The job's record, fresh within a second (runner.worker.job_cache): a cancel or
        # a pause counts at once.
        left, job = judged(worker, task_message, lease)
        if left:
            return None
        if job is None:
            raise BadMessage(f"no job {task_message.job_id!r} in the checkpoint store")
        job_type = job.job_type
        job_class = worker.job_classes.get(task_message.job_type)
        # A type is run only from the queues this worker serves it on (its resume
        # queue among them).
        if job_class is None or worker.by_queue.get(lease.queue) is not job_class:
            raise BadMessage(f"unknown job type {task_message.job_type!r} on queue {lease.queue!r}")
    except BadMessage as bad:
        # Only for the job's own type does the job fail too: a stray message naming
        # another type for an existing job is garbage and must not fail that job.
        of_job = (
            task_message if task_message is not None and task_message.job_type == job_type else None
        )
        poison_bad_message(worker, lease, message, bad, of_job)
        return None
    return Delivery(
        worker,
        lease,
        message,
        task_message,
        job_class,
        job,
        task_message.kind,
        task_message.index,
        # Budgets with the lease's deadline, read afresh at each try (renewals move it).
        functools.partial(Budget, clock=worker.clock, deadline=lambda: lease.visible_at),
    )


def _run_task(delivery: Delivery) -> float | None:
    """Decide, claim and run the task; the seconds it ran if it was a chunk."""
    kind = KINDS[delivery.kind]
    if not kind.takes_slot:
        # Planning and finalize are not chunks: they hold no running slot.
        delivery.worker.admission.ended(delivery.message)
        # max_chunk_seconds caps chunks. Planning a huge job may take long, and finalize
        # has no checkpoint to stop at: an unrenewed lease would only let a second
        # worker start it while the first still runs.
        delivery.lease.max_seconds = None
    # For planning and finalize the job was read afresh (runner.worker.tasks.leftovers): a
    # cancel made since this worker's last read is never missed by them.
    if delivery.job.stop_order is not None:
        set_aside(delivery)
        return None
    writer = Writer()
    moved = copy_to_resume(delivery)  # a chunk's message waits in its resume queue
    message_id = moved.copy.id if moved is not None else None
    before = None  # the record as read before the claim (none for a planned claim)
    claimed = claim_planned(delivery, writer, message_id)
    if claimed is None:
        before = claimable(delivery)
        if before is None:
            discard(delivery, moved)
            return None
        claimed = claim(delivery, before, writer, message_id)
        if claimed is None:
            discard(delivery, moved)
            delivery.worker.keeper.release(delivery.lease, delivery.lease.lease_seconds)
            return None
    follow(delivery, moved)
    clock = delivery.worker.clock
    started = clock.monotonic()
    start(delivery, claimed, writer, before)
    return clock.monotonic() - started if kind.takes_slot else None
