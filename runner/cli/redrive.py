"""``runner poison redrive``: give a job's poisoned work new attempts, and a job failed
past its ``tolerated_failures`` the rest of its work back.

1. Every poisoned task (chunk, planning, finalize) goes back to waiting with its attempt
   count reset (a chunk's shard counter is adjusted in the same batch).
2. A failed job is reopened: back to ``running`` (``planning`` if planning never
   finished), its error cleared, and, if it failed past its tolerance, its
   ``cancelled_on`` and ``cancel_reason`` removed, so workers run its messages again.
   The same write marks it ``redriving`` (:data:`~checkpoint.records.REDRIVING`).
3. The job's messages in ``<queue>-poison`` are moved back to the job queue, originals
   unchanged; other jobs' poison messages stay where they are. A job of several queues
   has a poison queue per queue: each message goes back to the queue it came from.
4. A reset task whose poison message is gone (purged by hand, say) gets a new message,
   on its chunk's own queue (planning and finalize: the job's first queue).
5. A job that failed past its tolerance had its other messages dropped unrun
   (docs/semantics.md §16): each unfinished task gets one again (:func:`send_dropped`).
6. The ``redriving`` mark is cleared.

Every step is safe to repeat, so a redrive that died midway (or whose write was applied
with its answer lost) is finished by running it again: a job still marked ``redriving``
has step 5 done again, whatever its cause. A task sent a message twice runs once (the
claim's compare-and-swap, docs/semantics.md §5). A job cancelled (``runner cancel``, or
a job it ran after cancelled) is not redriven: that was someone's decision.

A record that cannot be read (garbled by hand or by another version) is gone past:
it is reported, left as it is with its poison messages, and the rest is redriven.

``runner poison redrive --pipeline ID`` redrives each failed step of a pipeline, in the
order they run (:func:`redrive_pipeline`), and leaves the others as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Set
from dataclasses import dataclass, field
from typing import Any

from checkpoint import layout, messages
from checkpoint.errors import BadMessage, BadRecord, Conflict, LeaseLost, NotFound
from checkpoint.layout import poison_queue_of
from checkpoint.records import REDRIVING, REMOVED, JobRecord, TaskKind
from checkpoint.retries import Budget
from checkpoint.storage import NEVER_EXPIRES, QueueStore, Where
from checkpoint.store import CheckpointStore
from checkpoint.tasks.task_records import PlannedChunk
from jobs import dependencies
from jobs.errors import JobEnded
from runner.cli.pipeline_view import pipeline_jobs
from runner.cli.status_types import Unreadable
from runner.worker.tasks.plan import feed_message, send_chunk_messages, sender_of_unsent

#: How long poison messages of other jobs stay hidden while we look past them.
SCAN_VISIBILITY_SECONDS = 30
#: Chunk messages sent again per batch of sends (a page of the chunks scanned).
RESEND_PAGE_CHUNKS = 256

_RESET = {"state": "waiting", "owner": "", "attempt": 0}


@dataclass(frozen=True)
class Redriven:
    """What a redrive did.

    Attributes:
        count: tasks reset or messages moved back (each task counted once).
        unreadable: ``(kind, index, problem)`` of each record that cannot be read, so
            was left as it is, its poison messages with it (nothing can reset it).
        resent: unfinished tasks of a job failed past its tolerance given a message
            again (theirs were dropped unrun when it failed).
    """

    count: int
    unreadable: list[tuple[TaskKind, int, str]] = field(default_factory=list)
    resent: int = 0


def redrive(store: CheckpointStore, queues: QueueStore, job_id: str) -> Redriven:
    """Re-run a job's poisoned work (and the rest of a job failed past its tolerance),
    going past records that cannot be read.

    Raises:
        JobNotFound: no such job.
        JobEnded: the job was cancelled.
    """
    job = store.get_job(job_id)
    if job.state == "cancelled":
        # Its remaining work was dropped on purpose: running it again is a new submit.
        raise JobEnded(
            f"job {job_id!r} was cancelled ({job.cancel_reason or 'no reason given'}) and a "
            "cancelled job is not redriven; to run it again, submit it under a new --job-id, "
            f"or `runner delete {job_id}` first and submit it under this id"
        )
    # Its messages were dropped (failed past its tolerance), or may never have been
    # sent (an earlier redrive died before it cleared its mark).
    dropped = job.cancelled_on is not None or job.redriving
    unreadable: list[tuple[TaskKind, int, str]] = []
    reset = _reset_poisoned(store, job_id, unreadable)
    # Reopened before any message is sent: a worker deletes unrun a message of a job it
    # finds failed past its tolerance (it reads such a record afresh first).
    reopened = _reopen(store, job_id, bool(reset))
    job = reopened or job
    budget = store.budget()
    left = {(kind, index) for kind, index, _ in unreadable}
    moved = _move_back_all(queues, job, left, budget)
    for kind, index in sorted(reset - moved):
        message = messages.TaskMessage(
            kind, job.job_type, job_id, index, incarnation=job.incarnation
        )
        queue = job.chunk_queue(index) if kind == "chunk" else job.queues[0]
        _send(queues, queue, messages.encode(message), budget)
    resent = 0
    if reopened is not None:
        if dropped:
            before = len(unreadable)
            resent = send_dropped(store, queues, job, reset | moved, unreadable)
            if len(unreadable) > before:
                # Left marked: mended, they get their messages from the next redrive.
                return Redriven(len(reset | moved), unreadable, resent)
        store.change_job(job_id, lambda fresh: {REDRIVING: False} if fresh.redriving else None)
    return Redriven(len(reset | moved), unreadable, resent)


@dataclass(frozen=True)
class Outcome:
    """What ``runner poison redrive`` says of one job (``--json``: an object each).

    Attributes:
        state: the job's state as the command found it (``unreadable``: its record
            cannot be read).
        redriven: whether it was redriven (a step of a pipeline that has not failed is
            left as it is).
        count, resent: as :class:`Redriven`'s.
        unreadable: its records that cannot be read, left as they are.
    """

    job_id: str
    state: str
    redriven: bool
    count: int = 0
    resent: int = 0
    unreadable: tuple[Unreadable, ...] = ()

    def lines(self) -> list[str]:
        """The text form: a line for the job, then one per record left unread."""
        if self.state == "unreadable":
            return [f"{self.job_id}: not redriven, unreadable: {self.unreadable[0].problem}"]
        if not self.redriven:
            return [f"{self.job_id}: {self.state}, not redriven (only a failed step is)"]
        done = Redriven(self.count, resent=self.resent)
        bad = [f"not redriven, unreadable: {each.problem}" for each in self.unreadable]
        return [redriven_line(self.job_id, done), *bad]


def redrive_job(store: CheckpointStore, queues: QueueStore, job_id: str) -> Outcome:
    """:func:`redrive` the job, as an :class:`Outcome`."""
    state = store.get_job(job_id).state
    done = redrive(store, queues, job_id)
    bad = tuple(Unreadable(kind, index, problem) for kind, index, problem in done.unreadable)
    return Outcome(job_id, state, True, done.count, done.resent, bad)


def redrive_pipeline(store: CheckpointStore, queues: QueueStore, pipeline: str) -> list[Outcome]:
    """Redrive each step of ``pipeline`` that failed (or whose redrive is unfinished), in
    the order they run; the others are left as they are. A failed step's dependents
    wait for it to end done, so its redrive is all they need. Raises PipelineNotFound
    if it has no step."""
    found, unreadable = pipeline_jobs(store, pipeline)
    outcomes = []
    for job in found:
        if job.state == "failed" or job.redriving:
            outcomes.append(redrive_job(store, queues, job.job_id))
        else:
            outcomes.append(Outcome(job.job_id, job.state, False))
    for step in unreadable:
        outcomes.append(Outcome(step.job_id, step.state, False, unreadable=step.unreadable))
    return outcomes


def redriven_line(job_id: str, done: Redriven) -> str:
    """What ``runner poison redrive`` says it did: ``redrove 2 poisoned task(s) of x``,
    and how many dropped tasks were sent again if any were."""
    resent = f", and sent {done.resent} dropped task(s) again" if done.resent else ""
    return f"redrove {done.count} poisoned task(s) of {job_id}{resent}"


def _move_back_all(
    queues: QueueStore, job: JobRecord, left: Set[tuple[TaskKind, int]], budget: Budget
) -> set[tuple[TaskKind, int]]:
    """Move every poison message of the job back (:func:`move_back`) but those of
    ``left``; the tasks they name."""
    moved: set[tuple[TaskKind, int]] = set()
    for queue in job.queues:
        moved |= move_back(queues, queue, job.job_id, job.incarnation, budget, left_alone=left)
    if job.resume_poison_queue is not None:
        # Poisoned from the type's resume queue while the job could not be read: each
        # goes back to its own chunk's queue, known now.
        moved |= move_back(
            queues,
            job.queue,
            job.job_id,
            job.incarnation,
            budget,
            left_alone=left,
            home=lambda task: (
                job.chunk_queue(task.index) if task.kind == "chunk" else job.queues[0]
            ),
        )
    return moved


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


def _reopen(store: CheckpointStore, job_id: str, reset: bool) -> JobRecord | None:
    """Take a failed job back to ``running`` (``planning`` if planning never ended),
    marked ``redriving``, its error and any cancel of its failure removed; a job still
    under way with tasks ``reset`` just marked. Returns the job so marked (one marked
    already, by a redrive that died, as it is), or None: nothing to finish."""

    def decide(job: JobRecord) -> dict[str, Any] | None:
        if job.state != "failed":
            return None if job.ended or job.redriving or not reset else {REDRIVING: True}
        cancel: dict[str, Any] = {}
        if job.cancelled_on is not None:
            cancel = {"cancelled_on": REMOVED, "cancel_reason": REMOVED}
        state = "planning" if job.total is None else "running"
        return {"state": state, "error": "", **cancel, REDRIVING: True}

    job = store.change_job(job_id, decide) or store.get_job(job_id)
    return job if job.redriving else None


def send_dropped(
    store: CheckpointStore,
    queues: QueueStore,
    job: JobRecord,
    sent_already: Set[tuple[TaskKind, int]],
    unreadable: list[tuple[TaskKind, int, str]],
) -> int:
    """Send a message again to each unfinished task of a job whose messages were dropped
    when it failed past its tolerance (or may not have been sent, by a redrive that
    died); returns how many were sent. Some may have a message still: the claim runs
    one of the two (docs/semantics.md §5).

    - planning, if it never ended (it goes on from the chunks it recorded);
    - feeding, unless it ended: from its cursor, or from chunk 0 if it never started
      (then at most the first window of chunks had messages, so at most that many done
      ones get a message again, each deleted unrun);
    - every chunk its feeding sent (below its cursor; every chunk once it ended) that
      is neither done nor poisoned, but those in ``sent_already``.

    A chunk record that cannot be read is added to ``unreadable`` and gets nothing.
    """
    budget = store.budget()
    sent = 0
    if job.total is None and ("plan", 0) not in sent_already:
        dependencies.send_planning(queues, job, 0, budget)
        sent += 1
    cursor, feeding_ended = _feeding(store, job)
    if not feeding_ended and ("feed", 0) not in sent_already:
        budget.call(sender_of_unsent(queues, job.queues[0], [feed_message(job, 0)]))
        sent += 1
    page: list[PlannedChunk] = []
    for index in _unfinished_chunks(store, job, cursor, unreadable):
        if ("chunk", index) not in sent_already:
            page.append(PlannedChunk(index))
        if len(page) >= RESEND_PAGE_CHUNKS:
            send_chunk_messages(queues, job, page, budget)
            sent, page = sent + len(page), []
    send_chunk_messages(queues, job, page, budget)
    return sent + len(page)


def _feeding(store: CheckpointStore, job: JobRecord) -> tuple[int, bool]:
    """How many of the job's chunks its feeding has sent (its cursor; 0 if it never
    started), and whether it ended (every chunk's message sent)."""
    try:
        feed = store.get_task(job.job_id, "feed", 0)
    except NotFound:
        return 0, False
    cursor = store.value(feed.properties, "progress", of=feed.name)
    return (cursor if isinstance(cursor, int) else 0), feed.state == "done"


def _unfinished_chunks(
    store: CheckpointStore, job: JobRecord, below: int, unreadable: list[tuple[TaskKind, int, str]]
) -> Iterator[int]:
    """The chunks below ``below`` that are neither done nor poisoned, in index order:
    one query per shard, which returns only those."""
    if not below:
        return
    where = [
        Where("RowKey", "lt", layout.chunk_row(below)),
        Where("state", "ne", "done"),
        Where("state", "ne", "poisoned"),
    ]
    for index, chunk in store.scan_chunks(job.job_id, where=where, total=job.total):
        if isinstance(chunk, BadRecord):
            unreadable.append(("chunk", index, str(chunk)))
        else:
            yield index


def move_back(
    queues: QueueStore,
    queue: str,
    job_id: str,
    incarnation: str | None,
    budget: Budget,
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
    poison them again). Each call is tried again on transient trouble (``budget``): a
    send applied with its answer lost is sent twice, and the claim runs one."""
    moved: set[tuple[TaskKind, int]] = set()
    poison_queue = poison_queue_of(queue)
    receive = functools.partial(
        queues.receive, poison_queue, max_messages=32, visibility_seconds=SCAN_VISIBILITY_SECONDS
    )
    while True:
        try:
            batch = budget.call(receive)
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
            _send(queues, queue if home is None else home(task), body, budget)
            try:
                budget.call(
                    functools.partial(
                        queues.delete, poison_queue, message.id, message.pop_receipt or ""
                    )
                )
            except (LeaseLost, NotFound):
                pass  # received or deleted since (by this call's own applied try, say)
            moved.add((task.kind, task.index))


def _send(queues: QueueStore, queue: str, body: bytes, budget: Budget) -> None:
    send = functools.partial(queues.send, queue, body, ttl_seconds=NEVER_EXPIRES)
    budget.call(send)


def _original(body: bytes) -> tuple[bytes, messages.TaskMessage] | None:
    record = messages.read_poisoned(body)
    if not record or record.get("truncated"):
        return None
    original = bytes(record.get("original") or b"")
    try:
        return original, messages.decode(original)
    except BadMessage:
        return None
