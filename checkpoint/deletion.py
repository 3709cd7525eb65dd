"""Deleting what a job left in storage: task records, spilled values, visible messages.

:meth:`CheckpointStore.delete_job <checkpoint.store.CheckpointStore.delete_job>` marks the
job as being deleted, then calls these in order, and deletes the job's own record last:
a deletion that crashes midway leaves a job that is still listed, and deleting it again
finishes it. Each step is idempotent (what is gone already is skipped) and retries
transient trouble within the caller's budget, one page or one call at a time, so a job
of a million chunks never has to start again for one busy reply.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from checkpoint import layout, messages
from checkpoint.errors import BatchFailed, LeaseLost, NotFound, StorageError
from checkpoint.records import JobState
from checkpoint.retries import Budget
from checkpoint.storage import BatchOp, BlobStore, QueueMessage, QueueStore, RecordStore

log = logging.getLogger(__name__)

#: Rows read, then deleted in one batch, at a time (Azure's batch size, a service target).
PAGE_ROWS = 100
#: Blob names listed, then deleted one by one, at a time.
PAGE_BLOBS = 1000
#: How long a swept message of another job stays hidden if the sweep dies before it
#: hands it back (it is handed back with visibility 0 as soon as the sweep ends).
SWEEP_VISIBILITY_SECONDS = 30
#: Messages a sweep of one queue looks at, at most (100 receives): a deep queue is not
#: swept to its end; what the sweep leaves, workers delete unrun when they meet it.
SWEEP_MAX_MESSAGES = 3_200


@dataclass(frozen=True)
class Deleted:
    """What deleting one job removed (or, with ``dry_run``, would have: counts 0).

    Attributes:
        records: its job record and task records: planning, finalize, every chunk, the
            16 shard counters, the notes of messages parked while it was paused.
        blobs: its spilled values (params, planning progress, chunk payloads, states,
            results).
        messages: its messages the sweep found visible in its queue, resume queue and
            poison queue; those invisible then (leased, backing off, delayed) are deleted
            unrun by the worker that receives them later.
    """

    job_id: str
    state: JobState
    updated_on: datetime | None
    records: int = 0
    blobs: int = 0
    messages: int = 0
    dry_run: bool = False


def task_partitions(job_id: str) -> list[str]:
    """Every partition of the tasks table a job's records live in: its 16 shards, its
    parked messages' notes, then planning's, feeding's and finalize's (last: a planning
    message handled meanwhile reads there)."""
    shards = [layout.shard_partition(job_id, shard) for shard in range(layout.SHARDS)]
    return [*shards, layout.park_partition(job_id), layout.control_partition(job_id)]


def delete_partition(records: RecordStore, partition: str, budget: Budget) -> int:
    """Delete every row of one tasks-table partition, a page read and deleted in one
    batch at a time; returns how many rows this call deleted."""
    deleted = 0
    read = functools.partial(_page, records, partition)
    while True:
        rows = budget.call(read, f"read {partition} to delete it")
        if not rows:
            return deleted
        ops = [BatchOp("delete", row) for row in rows]
        try:
            budget.call(
                lambda: records.batch(layout.TASKS_TABLE, partition, ops),  # noqa: B023
                f"delete {len(ops)} records of {partition}",
            )
        except BatchFailed as failed:
            # A row went meanwhile (another deletion, or this batch applied with its
            # answer lost): read the page again.
            if not isinstance(failed.reason, NotFound):
                raise
            continue
        deleted += len(ops)


def _page(records: RecordStore, partition: str) -> list[str]:
    found = records.query(layout.TASKS_TABLE, partition, select=["RowKey"], limit=PAGE_ROWS)
    return [record.row_key for record in found]


def delete_blobs(blobs: BlobStore, job_id: str, budget: Budget) -> int:
    """Delete every blob under the job's prefix in the data container; returns how many
    this call deleted."""
    prefix = layout.job_blob_prefix(job_id)

    def page() -> list[str]:
        listed = blobs.list(layout.DATA_CONTAINER, prefix)
        return [info.name for info in itertools.islice(listed, PAGE_BLOBS)]

    deleted = 0
    while True:
        names = budget.call(page, f"list the blobs of {job_id}")
        if not names:
            return deleted
        for name in names:
            try:
                budget.call(lambda: blobs.delete(layout.DATA_CONTAINER, name))  # noqa: B023
            except NotFound:
                continue  # gone meanwhile
            deleted += 1


def sweep(queues: QueueStore, queue: str, job_id: str, budget: Budget) -> int:
    """Delete the job's visible messages from ``queue`` (a job queue or a poison queue),
    looking at each visible message once; returns how many were deleted
    (:func:`sweep_where`)."""

    def of_job(message: QueueMessage) -> bool:
        task = messages.named_task(message.body)
        return task is not None and task.job_id == job_id

    return sweep_where(queues, queue, of_job, budget)


def sweep_where(
    queues: QueueStore,
    queue: str,
    wanted: Callable[[QueueMessage], bool],
    budget: Budget,
    *,
    delete: bool = True,
) -> int:
    """Delete the visible messages of ``queue`` that are ``wanted``, looking at each
    visible message once; returns how many were deleted (with ``delete`` False: how
    many would be, all of them handed back).

    Azure cannot delete a message without receiving it, so messages are received with a
    short visibility. The others stay hidden only while the sweep goes on and are then
    handed back with visibility 0 (hiding them is what lets the next receive reach past
    them). It ends at an empty receive, at a receive of messages it saw already (their
    visibility ran out, or workers handed them back), or after
    :data:`SWEEP_MAX_MESSAGES`: workers competing for the queue cannot keep it going.
    """
    seen: set[str] = set()
    others: dict[str, str] = {}  # message id -> newest pop receipt
    deleted = 0
    try:
        while len(seen) < SWEEP_MAX_MESSAGES:
            batch = _receive(queues, queue, budget)
            fresh = [message for message in batch if message.id not in seen]
            seen.update(message.id for message in batch)
            mine = []
            for message in batch:
                if delete and wanted(message):
                    mine.append((message.id, message.pop_receipt or ""))
                    others.pop(message.id, None)
                else:
                    others[message.id] = message.pop_receipt or ""
            deleted += _delete(queues, queue, mine, budget)
            if not delete:  # counted once each, handed back at the end
                deleted += sum(1 for message in fresh if wanted(message))
            if not fresh:
                return deleted
        return deleted
    finally:
        _hand_back(queues, queue, others, budget)


def _receive(queues: QueueStore, queue: str, budget: Budget) -> list[QueueMessage]:
    try:
        return budget.call(
            lambda: queues.receive(
                queue, max_messages=32, visibility_seconds=SWEEP_VISIBILITY_SECONDS
            ),
            f"sweep {queue}",
        )
    except NotFound:
        return []  # no such queue: nothing to sweep


def _delete(queues: QueueStore, queue: str, found: list[tuple[str, str]], budget: Budget) -> int:
    if not found:
        return 0
    outcomes = budget.call(lambda: queues.delete_many(queue, found), f"delete from {queue}")
    # LeaseLost: gone already, or received by a worker once its visibility ran out (the
    # worker deletes it unrun).
    return sum(1 for outcome in outcomes if outcome is None)


def _hand_back(queues: QueueStore, queue: str, leased: dict[str, str], budget: Budget) -> None:
    for message_id, receipt in leased.items():
        visible = functools.partial(queues.update, queue, message_id, receipt, visibility_seconds=0)
        try:
            budget.call(visible, f"hand back {message_id}")
        except LeaseLost:
            continue  # visible again already, and received by someone else since
        except StorageError as error:
            # It reappears by itself once SWEEP_VISIBILITY_SECONDS have passed.
            log.warning("handing message %s back to %s failed: %s", message_id, queue, error)
