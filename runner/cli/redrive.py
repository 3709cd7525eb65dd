"""``runner poison redrive``: give a job's poisoned work new attempts.

1. Every poisoned task (chunk, planning, finalize) goes back to waiting with its attempt
   count reset (a chunk's shard counter is adjusted in the same batch).
2. The job's messages in ``<queue>-poison`` are moved back to the job queue, originals
   unchanged; other jobs' poison messages stay where they are. A job of several queues
   has a poison queue per queue: each message goes back to the queue it came from.
3. A reset task whose poison message is gone (purged by hand, say) gets a new message,
   on its chunk's own queue (planning and finalize: the job's first queue).

A record that cannot be read (garbled by hand or by another version) is gone past:
it is reported, left as it is with its poison messages, and the rest is redriven.

The job then leaves ``failed`` and can complete and finalize.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass, field

from checkpoint import messages
from checkpoint.errors import BadMessage, BadRecord, Conflict, LeaseLost, NotFound
from checkpoint.layout import poison_queue_of
from checkpoint.records import TaskKind
from checkpoint.storage import NEVER_EXPIRES, QueueStore
from checkpoint.store import CheckpointStore
from jobs.errors import JobEnded

#: How long poison messages of other jobs stay hidden while we look past them.
SCAN_VISIBILITY_SECONDS = 30

_RESET = {"state": "waiting", "owner": "", "attempt": 0}


@dataclass(frozen=True)
class Redriven:
    """What a redrive did.

    Attributes:
        count: tasks reset or messages moved back (each task counted once).
        unreadable: ``(kind, index, problem)`` of each record that cannot be read, so
            was left as it is, its poison messages with it (nothing can reset it).
    """

    count: int
    unreadable: list[tuple[TaskKind, int, str]] = field(default_factory=list)


def redrive(store: CheckpointStore, queues: QueueStore, job_id: str) -> Redriven:
    """Re-run a job's poisoned work, going past records that cannot be read."""
    job = store.get_job(job_id)
    if job.cancelled_on is not None:
        # Its waiting chunks were dropped unrun: reopening it would finish nothing.
        # A submit under its id finds the job and does nothing: say what does run it.
        raise JobEnded(
            f"job {job_id!r} was {job.state} and its remaining chunks cancelled "
            f"({job.cancel_reason or 'no reason given'}), so it cannot be redriven; to run "
            f"it again, submit it under a new --job-id, or `runner delete {job_id}` first "
            "and submit it under this id"
        )
    unreadable: list[tuple[TaskKind, int, str]] = []
    reset = _reset_poisoned(store, job_id, unreadable)
    left = {(kind, index) for kind, index, _ in unreadable}
    moved: set[tuple[TaskKind, int]] = set()
    for queue in job.queues:
        moved |= move_back(queues, queue, job_id, job.incarnation, left_alone=left)
    if job.resume_poison_queue is not None:
        # Poisoned from the type's resume queue while the job could not be read: each
        # goes back to its own chunk's queue, known now.
        moved |= move_back(
            queues,
            job.queue,
            job_id,
            job.incarnation,
            left_alone=left,
            home=lambda task: (
                job.chunk_queue(task.index) if task.kind == "chunk" else job.queues[0]
            ),
        )
    for kind, index in sorted(reset - moved):
        message = messages.TaskMessage(
            kind, job.job_type, job_id, index, incarnation=job.incarnation
        )
        queue = job.chunk_queue(index) if kind == "chunk" else job.queues[0]
        queues.send(queue, messages.encode(message), ttl_seconds=NEVER_EXPIRES)
    if reset or moved:
        _reopen(store, job_id)
    return Redriven(len(reset | moved), unreadable)


def _reset_poisoned(
    store: CheckpointStore, job_id: str, unreadable: list[tuple[TaskKind, int, str]]
) -> set[tuple[TaskKind, int]]:
    """Reset every poisoned task that can be read; note the others in ``unreadable``."""
    reset: set[tuple[TaskKind, int]] = set()
    for kind, index, task in list(store.poisoned_tasks(job_id)):
        if isinstance(task, BadRecord):
            unreadable.append((kind, index, str(task)))
            continue
        try:
            if task.kind == "chunk":
                store.count_chunk(task, _RESET, {}, "poisoned", take_off=True)
            else:
                store.write_task(task, _RESET)
        except Conflict:
            continue  # changed meanwhile: someone else redrove it
        reset.add((task.kind, task.index))
    return reset


def _reopen(store: CheckpointStore, job_id: str) -> None:
    while True:
        job = store.get_job(job_id)
        if job.state != "failed":
            return
        state = "planning" if job.total is None else "running"
        try:
            store.update_job(job, state=state, error="")
            return
        except Conflict:
            continue


def move_back(
    queues: QueueStore,
    queue: str,
    job_id: str,
    incarnation: str | None,
    left_alone: Set[tuple[TaskKind, int]] = frozenset(),
    home: Callable[[messages.TaskMessage], str] | None = None,
) -> set[tuple[TaskKind, int]]:
    """Move ``job_id``'s messages from ``<queue>-poison`` back to ``queue`` (or to the
    queue ``home`` names for each task); returns the tasks they name. Sent before
    deleted: a crash in between leaves a duplicate, which the claim step drops, never a
    loss. A poison queue that does not exist holds nothing.

    Messages of another ``incarnation`` (an earlier job of this id, deleted since) are
    not this job's: they stay, and its tasks get fresh messages instead. So do those
    of the tasks in ``left_alone`` (their records cannot be read: a worker would only
    poison them again)."""
    moved: set[tuple[TaskKind, int]] = set()
    poison_queue = poison_queue_of(queue)
    while True:
        try:
            batch = queues.receive(
                poison_queue, max_messages=32, visibility_seconds=SCAN_VISIBILITY_SECONDS
            )
        except NotFound:
            batch = []  # never made: nothing was poisoned there
        if not batch:
            return moved
        for message in batch:
            original = _original(message.body)
            if original is None:
                continue
            body, task = original
            if task.job_id != job_id or task.incarnation not in (None, incarnation):
                continue
            if (task.kind, task.index) in left_alone:
                continue
            queues.send(queue if home is None else home(task), body, ttl_seconds=NEVER_EXPIRES)
            try:
                queues.delete(poison_queue, message.id, message.pop_receipt or "")
            except LeaseLost:
                pass
            moved.add((task.kind, task.index))


def _original(body: bytes) -> tuple[bytes, messages.TaskMessage] | None:
    record = messages.read_poisoned(body)
    if not record or record.get("truncated"):
        return None
    original = bytes(record.get("original") or b"")
    try:
        return original, messages.decode(original)
    except BadMessage:
        return None
