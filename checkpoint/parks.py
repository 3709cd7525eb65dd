"""Parked messages of paused jobs: a note of each, so that a resume reaches them at once.

A worker that receives a message of a paused job parks it: it sends a fresh copy, out of
sight for 5 minutes to an hour (``runner.worker.tasks.parking.park_seconds``), and deletes the
original. The send returns the copy's id and pop receipt; the worker notes them here, one
record per task (named as the task's own record) in a partition of the job's own
(:func:`~checkpoint.layout.park_partition`). ``runner resume`` then makes every noted
copy visible at once and drops the notes (:func:`release`), so a resumed job's work does
not wait for its parks to end: parks can be long, and a pause costs next to nothing for
as long as it lasts. ``runner cancel`` does the same, so the copies are deleted unrun at
once; deleting a job sweeps the partition with its other records.

A note is a shortcut, never needed for correctness: a note lost (its write failed past
its retries) or stale (its copy received since, or parked again) only means that copy
comes back when its park ends, as it would with no note at all. So a note is written by
an unconditional upsert, which is safe to retry as it is, and a release skips quietly
whatever it cannot reach.
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from checkpoint import layout
from checkpoint.clock import Clock
from checkpoint.errors import BatchFailed, Conflict, LeaseLost, NotFound
from checkpoint.records import TaskKind
from checkpoint.retries import Budget
from checkpoint.storage import BatchOp, QueueMessage, QueueStore, Record, RecordStore, Where

log = logging.getLogger(__name__)

#: Notes read, then released and deleted in one batch, at a time (Azure's batch size).
PAGE_ROWS = 100
#: Copies of a page made visible at once: each update is a round trip that mostly waits,
#: so a resume of many parked chunks takes a fraction of what one call after another
#: would (a queue serves about 2,000 messages a second, far above this).
RELEASE_THREADS = 8
#: How long after a resume a worker that had not seen it yet may still note a park: it
#: decides on a job record under 1 s old (``runner.worker.job_cache.FRESH_SECONDS``) and notes
#: the park a moment later. A release looks at the notes again once this has passed
#: since it began, so such a park is reached too.
LATE_PARK_SECONDS = 2.0


@dataclass(frozen=True)
class Released:
    """What a release did: copies made visible, and notes whose copy was gone or
    received since (skipped)."""

    visible: int = 0
    skipped: int = 0

    def __add__(self, other: Released) -> Released:
        return Released(self.visible + other.visible, self.skipped + other.skipped)


def park_row(kind: TaskKind, index: int) -> str:
    """The row of a task's note: its record's row (a chunk's ``c...``, ``plan``,
    ``feed``, ``final``), so a task parked again replaces its note instead of adding one."""
    if kind == "chunk":
        return layout.chunk_row(index)
    return layout.CONTROL_ROWS[kind]


def note(
    records: RecordStore,
    job_id: str,
    kind: TaskKind,
    index: int,
    queue: str,
    copy: QueueMessage,
    budget: Budget,
) -> None:
    """Note where the parked ``copy`` (as its send returned it) is and its pop receipt.

    An upsert (a PUT): retried as it is, nothing to settle."""
    properties = {"queue": queue, "message_id": copy.id, "pop_receipt": copy.pop_receipt}
    row = park_row(kind, index)
    budget.call(
        lambda: records.upsert(layout.TASKS_TABLE, layout.park_partition(job_id), row, properties),
        f"note the park of {job_id} {kind} {index}",
    )


def release(records: RecordStore, queues: QueueStore, job_id: str, budget: Budget) -> Released:
    """Make every noted parked copy of the job visible now and drop its note; a copy
    gone or received since is skipped. Each note is looked at once, in row order.

    Costs one update of the copy's visibility per note (:data:`RELEASE_THREADS` at a
    time), and a query and a batch delete per :data:`PAGE_ROWS` notes. Raises a
    StorageError past ``budget``; releasing again finishes what was left."""
    partition = layout.park_partition(job_id)
    released, after = Released(), ""
    bring_back = functools.partial(_bring_back, queues, budget=budget)
    with ThreadPoolExecutor(RELEASE_THREADS, thread_name_prefix="release") as pool:
        while True:
            page = budget.call(
                functools.partial(_page, records, partition, after), f"read the parks of {job_id}"
            )
            if not page:
                return released
            for outcome in pool.map(bring_back, page):
                released += outcome
            _drop(records, partition, page, budget)
            after = page[-1].row_key


def release_resumed(
    records: RecordStore, queues: QueueStore, job_id: str, clock: Clock, budget: Budget
) -> Released:
    """:func:`release` for a job whose record was just written not paused: once at
    once, and again once :data:`LATE_PARK_SECONDS` have passed since, for the parks of
    workers that had not seen the change yet."""
    started = clock.monotonic()
    released = release(records, queues, job_id, budget)
    clock.sleep(LATE_PARK_SECONDS - (clock.monotonic() - started))
    return released + release(records, queues, job_id, budget)


def _page(records: RecordStore, partition: str, after: str) -> list[Record]:
    where = [Where("RowKey", "gt", after)] if after else []
    return list(records.query(layout.TASKS_TABLE, partition, where, limit=PAGE_ROWS))


def _bring_back(queues: QueueStore, found: Record, *, budget: Budget) -> Released:
    queue, message_id, receipt = (
        found.properties.get(name) for name in ("queue", "message_id", "pop_receipt")
    )
    if not (isinstance(queue, str) and isinstance(message_id, str) and isinstance(receipt, str)):
        log.warning("park note %s %s is not readable; skipped", found.partition_key, found.row_key)
        return Released(skipped=1)
    if not (queue and message_id and receipt):
        return Released(skipped=1)
    visible = functools.partial(queues.update, queue, message_id, receipt, visibility_seconds=0)
    try:
        budget.call(visible, f"bring back parked message {message_id}")
    except (LeaseLost, NotFound):
        # Received since (its park ended, or a worker took it once visible), deleted, or
        # its queue is gone: nothing to bring back. An update applied with its answer
        # lost lands here too when tried again: the copy is visible, as wanted.
        return Released(skipped=1)
    return Released(visible=1)


def _drop(records: RecordStore, partition: str, page: list[Record], budget: Budget) -> None:
    """Delete the notes read, each only as it was read: a note a worker wrote since (a
    copy parked again) stays for the next look."""
    ops = [BatchOp("delete", found.row_key, etag=found.etag) for found in page]
    try:
        budget.call(
            lambda: records.batch(layout.TASKS_TABLE, partition, ops),
            f"drop {len(ops)} park notes of {partition}",
        )
    except BatchFailed:
        # A note was written again or deleted meanwhile (or this batch was applied with
        # its answer lost): one at a time, each delete says which.
        for found in page:
            _drop_one(records, partition, found, budget)


def _drop_one(records: RecordStore, partition: str, found: Record, budget: Budget) -> None:
    drop = functools.partial(
        records.delete, layout.TASKS_TABLE, partition, found.row_key, etag=found.etag
    )
    try:
        budget.call(drop, f"drop the park note {found.row_key} of {partition}")
    except Conflict:
        pass  # written again: a copy parked since, for the next look
