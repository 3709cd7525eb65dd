"""Feeding: a job's chunk messages sent a window at a time, as its chunks end.

Planning records every chunk but sends only the messages of the first ``feed_window``
(:mod:`runner.worker.tasks.plan`); the rest are sent by the job's feed task, a task like
planning, run under a lease, whose record holds a cursor: how many chunks have had their
message sent. One step of it (docs/semantics.md §22):

1. reads the chunks ended (done + poisoned, from the shard counters) and the cursor;
2. while ``cursor - ended`` is below the window: reads the next page of chunk records by
   index, sends their messages as planning does, and writes the cursor. The write is
   fenced by the record's ETag: of two feeders (a continuation sent twice), the second's
   write fails and it stops; a page both sent runs once (the claim, §5). The first page
   is half of what the step sends, and the next step's message goes right after it: the
   next step then runs while the other half is still queued, so the workers never find
   the queue drained while the feeder runs (at the back, it ran only once they had);
3. with the cursor at the job's total, ends done. Otherwise its record is set waiting,
   and only then is this message deleted: a crash before leaves this one to come back
   and go on from the written cursor. A next step's message received while this step
   still runs is hidden a moment, not deleted (:func:`runner.worker.tasks.claim.claimable`).

A step never waits in a worker slot: with the window full it ends at once, and its
continuation is hidden :data:`FEED_IDLE_SECONDS`, so an idle feeder costs a few reads a
second, not a busy loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from checkpoint import layout, retries
from checkpoint.errors import BadRecord, LeaseLost, NotFound, StorageError
from checkpoint.records import JobRecord, TaskRecord
from checkpoint.retries import Budget
from checkpoint.storage import NEVER_EXPIRES, QueueStore
from checkpoint.store import CheckpointStore
from checkpoint.tasks.chunk_pages import MAX_PAGE_CHUNKS
from checkpoint.tasks.task_records import PlannedChunk
from runner.worker.observing.logs import TASK_LOGGER
from runner.worker.tasks.control import TaskControl, runner_side
from runner.worker.tasks.delivery import Delivery
from runner.worker.tasks.plan import feed_message, send_chunk_messages
from runner.worker.tasks.record_changes import TaskChanges

log = logging.getLogger(TASK_LOGGER)

#: How long a feed message that could send nothing is hidden before it looks again.
FEED_IDLE_SECONDS = 1
#: While a job of its type with a higher priority is planning or running, a job feeds
#: this share of its window (1/8, at least one chunk).
LOWER_PRIORITY_SHARE = 8
#: A step takes the counters as its worker last saw them (no request) while those leave
#: this share of the window (1/4) to feed; else it reads them (16 requests).
SEEN_SHARE = 4
#: Job states in which a job's chunks are still to run.
_UNDER_WAY = ("planning", "running")


@dataclass(frozen=True)
class FeedStep:
    """What one step did: the cursor it left, chunk messages it sent, and whether every
    chunk of the job has had its message sent (the feed task is done)."""

    cursor: int
    fed: int
    finished: bool


def run_feed(
    store: CheckpointStore,
    queues: QueueStore,
    job: JobRecord,
    window: int,
    first: int,
    control: TaskControl,
    midway: Callable[[int], object],
) -> FeedStep:
    """One step of the job's feed task (``job``: its record as its delivery was judged,
    read from the store then; ``first``: where its cursor starts if its record holds
    none; ``window``: the job class's ``feed_window``); ``midway(cursor)`` is called once
    the first half of what it sends is sent and its cursor written.

    The last page's cursor is not written here: the step's end writes it (the record
    set waiting by :func:`feed_later`, or its done mark), one write fewer a step. A
    step stopped right after its last page (a cancel, a pause, a lost lease) leaves it
    unwritten: the next step sends that page again, and the claim deletes those
    duplicates unrun (§5)."""
    read = control.lease_budget(retries.READ)
    send = control.lease_budget(retries.PLANNING)
    job_id = job.job_id
    stored = control.newest_state
    cursor = int(stored) if stored is not None else first
    recorded = runner_side(lambda: _recorded(store, job, read), "reading the chunks planned")
    others = runner_side(
        lambda: store.under_way_above(job.job_type, job.priority, read),
        "reading the jobs of a higher priority",
    )
    window = window_beside(job, others, window)
    ended = _ended(store, job_id, cursor, window, read)
    target = to_block_end(cursor, min(ended + window, recorded), recorded)
    fed = 0
    while cursor < target:
        count = min(target - cursor, MAX_PAGE_CHUNKS)
        first_page = not fed
        if first_page:  # about half: the next step's message goes behind it
            count = to_block_end(cursor, cursor + (count + 1) // 2, target) - cursor
        runner_side(
            lambda: _feed_page(store, queues, job, cursor, count, read, send),  # noqa: B023
            "feeding a page of chunks",
        )
        cursor, fed = cursor + count, fed + count
        if first_page or cursor < target:
            runner_side(
                lambda: control.write(TaskChanges(), {"progress": cursor}),  # noqa: B023
                "writing the feed cursor",
            )
        if first_page:
            midway(cursor)
        control.raise_if_stopped()
    return FeedStep(cursor, fed, job.total is not None and cursor >= job.total)


def to_block_end(start: int, end: int, last: int) -> int:
    """A page from chunk ``start`` to ``end`` (exclusive) cut back to the end of the last
    whole block in it (checkpoint.layout's blocks of consecutive chunks, one shard
    each), unless it reaches ``last`` or holds no whole block's end. A page is read with
    a query per block it touches, so a page ending mid-block leaves that block to be
    queried again by the next page: steps and their halves cut at block ends read each
    block once (0.048 queries per trivial chunk on Azurite; 1/32 is the least)."""
    if end >= last:
        return last
    aligned = end - end % layout.SHARD_BLOCK
    return aligned if aligned > start else end


def window_beside(job: JobRecord, others: Iterable[JobRecord], window: int) -> int:
    """The window ``job`` feeds now: its own, or an eighth of it (at least 1) while a
    job of its type with a higher priority is under way (planning or running, not paused
    nor cancelled), so that one gets most of the workers and this one is not starved."""
    for other in others:
        if (
            other.job_type == job.job_type
            and other.priority > job.priority
            and other.state in _UNDER_WAY
            and other.stop_order is None
        ):
            return max(1, window // LOWER_PRIORITY_SHARE)
    return window


def _ended(store: CheckpointStore, job_id: str, cursor: int, window: int, budget: Budget) -> int:
    """The job's chunks ended (done + poisoned): as this worker last saw its counters
    (no request) if those leave at least 1/:data:`SEEN_SHARE` of the window to feed, else
    read from its 16 counters. What was seen is a low bound (counters only grow), so it
    never overfills the window; a worker that ends most of the job's chunks (one worker,
    or quick chunks) sees them closely, and its steps read no counter."""
    seen = store.counts_seen(job_id)
    ended = seen["done"] + seen["poisoned"]
    if window - (cursor - ended) >= max(1, window // SEEN_SHARE):
        return ended
    counts = runner_side(lambda: store.counts(job_id, budget), "reading the chunks ended")
    return counts["done"] + counts["poisoned"]


def _recorded(store: CheckpointStore, job: JobRecord, budget: Budget) -> int:
    """How many of the job's chunks are recorded: its total once planned, else what its
    planning last wrote as its progress (a little behind, never ahead)."""
    if job.total is not None:
        return job.total
    try:
        plan = store.get_task(job.job_id, "plan", 0, budget)
    except NotFound:
        return 0
    progress = store.value(plan.properties, "progress", of=plan.name)
    return progress if isinstance(progress, int) else 0


def _feed_page(
    store: CheckpointStore,
    queues: QueueStore,
    job: JobRecord,
    first: int,
    count: int,
    read: Budget,
    send: Budget,
) -> None:
    found = dict(store.chunk_page(job.job_id, first, count, read).chunks)
    planned = [as_planned(index, found.get(index)) for index in range(first, first + count)]
    send_chunk_messages(queues, job, planned, send)


def as_planned(index: int, found: TaskRecord | BadRecord | None) -> PlannedChunk:
    """The chunk as its message may carry it: its record as read if it was never
    claimed, so the worker claims it without reading it; else only its index (the
    worker reads it: it may have run already, from a page sent twice). A record missing
    or unreadable is left to the worker too, which poisons it with the reason."""
    if (
        isinstance(found, TaskRecord)
        and found.state == "waiting"
        and found.attempt == 0
        and found.message_id is None
        and not found.has_progress
        and not found.properties.get("payload_blob")
    ):
        payload = found.properties.get("payload")
        if isinstance(payload, bytes) and payload:
            return PlannedChunk(index, found.etag, payload)
    return PlannedChunk(index)


@dataclass
class NextStep:
    """Sends the message of a job's next feed step, once per step (midway, or at its end
    if it sent nothing or the midway send failed)."""

    _delivery: Delivery
    sent: bool = False

    def send(self, cursor: int, delay_seconds: int = 0) -> bool:
        """Send it unless sent already; False if that failed (the failure is logged)."""
        if self.sent:
            return True
        delivery = self._delivery
        body = feed_message(delivery.job, cursor)
        queue, queues = delivery.lease.queue, delivery.worker.queues
        try:
            # A send applied with its answer lost and sent again makes two feeders: the
            # cursor's ETag fences their writes, and neither sends past the window.
            delivery.budget(retries.MESSAGE).call(
                lambda: queues.send(
                    queue, body, delay_seconds=delay_seconds, ttl_seconds=NEVER_EXPIRES
                )
            )
        except StorageError as error:
            log.warning("feed of %s: sending its next step failed: %s", delivery.job_id, error)
            return False
        self.sent = True
        return True


def feed_later(delivery: Delivery, control: TaskControl, step: FeedStep, after: NextStep) -> None:
    """End an unfinished step: its record set waiting, the next step's message sent if
    it was not midway, and only then this message deleted. A failure before the send
    leaves this message to come back and go on.

    Its attempts are set back to 0: one record serves every step of the job, so only
    steps dying one after another (``max_attempts`` of them) poison it, not as many
    scattered over a long job."""
    worker, lease = delivery.worker, delivery.lease
    try:
        # Waiting before this message goes: the next step's message, received by another
        # worker, must find the record free to claim.
        control.write(TaskChanges(state="waiting", owner="", attempt=0), {"progress": step.cursor})
    except LeaseLost:
        worker.keeper.drop(lease)
        return
    except StorageError as error:
        log.warning("feed of %s: ending the step failed: %s", delivery.job_id, error)
        worker.keeper.drop(lease)
        return
    delay = 0 if step.fed else FEED_IDLE_SECONDS
    if not after.send(step.cursor, delay):
        worker.keeper.release(lease, delay)
        return
    log.debug("feed of %s: %d sent, cursor %d", delivery.job_id, step.fed, step.cursor)
    worker.keeper.delete(lease)
