"""Planning: running ``split`` under a lease, recording chunks page by page.

Only the messages of the first ``feed_window`` chunks are sent here; the job's feed
task (:mod:`runner.worker.tasks.feed`) sends the rest as chunks end. Progress is the number
of chunks recorded. A planning attempt that crashed is resumed
by running ``split`` again and skipping that many payloads (so ``split`` must be
deterministic); the page in flight at the crash is recorded again idempotently and its
messages may be sent twice, which the claim step turns into one run. Memory holds one
page of payloads, whatever the job's size.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from checkpoint import layout, messages, retries
from checkpoint.messages import INLINE_PAYLOAD_BYTES
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.storage import NEVER_EXPIRES, QueueStore
from checkpoint.store import CheckpointStore
from checkpoint.tasks.task_records import PlannedChunk
from jobs.job import ChunkedJob
from runner.worker.tasks.control import TaskControl, runner_side

#: Chunks recorded and enqueued per step: two rounds of the shards' blocks, so each
#: shard's batch holds two blocks (64 rows) and recording costs 1/64 of a request per
#: chunk (1/32 with pages of 400, 0.032 requests per trivial chunk on Azurite). Planning
#: holds one page of payloads: 1,024 of them, whatever the job's size.
PAGE_CHUNKS = 2 * layout.SHARDS * layout.SHARD_BLOCK


def run_plan(
    store: CheckpointStore,
    queues: QueueStore,
    job_class: type[ChunkedJob],
    job: JobRecord,
    control: TaskControl,
) -> int:
    """Record every chunk ``split`` yields from where the last attempt stopped, sending
    the messages of the first window of them; return the job's chunk count."""
    budget = control.lease_budget(retries.PLANNING)
    read = control.lease_budget(retries.READ)
    params = runner_side(lambda: read.call(lambda: store.params(job)), "reading the job's params")
    enqueued = int(control.newest_state or 0)
    payloads = itertools.islice(iter(job_class().split(params)), enqueued, None)
    window = job_class.feed_window
    while True:
        page = list(itertools.islice(payloads, PAGE_CHUNKS))
        if not page:
            return enqueued
        runner_side(
            lambda: _enqueue(store, queues, job, enqueued, page, budget, window),  # noqa: B023
            "planning a page",
        )
        enqueued += len(page)
        control.offer(enqueued)
        control.raise_if_stopped()


def _enqueue(
    store: CheckpointStore,
    queues: QueueStore,
    job: JobRecord,
    first: int,
    page: list[Any],
    budget: Budget,
    window: int,
) -> None:
    """Record a page of chunks and send the messages of those in the first ``window``;
    with the page holding chunk ``window``, start the job's feeder (runner.worker.tasks.feed).

    The feed message goes after the window's messages, at the back of the queue: it
    runs once they have been received. A page planned again after a crash may send it
    again; two feeders are fenced by the cursor on their record (docs/semantics.md §22).
    """
    planned = store.add_chunks(job.job_id, first, page, budget, job.incarnation)
    send_chunk_messages(queues, job, [chunk for chunk in planned if chunk.index < window], budget)
    if first <= window < first + len(page):
        budget.call(sender_of_unsent(queues, job.queues[0], [feed_message(job, window)]))


def send_chunk_messages(
    queues: QueueStore, job: JobRecord, planned: list[PlannedChunk], budget: Budget
) -> None:
    """Build and send the messages of ``planned`` chunks (planning's and the feeder's):
    each carries its record as planned when known and its payload is small, so the
    worker claims it without reading it (checkpoint.messages)."""
    bodies: dict[str, list[bytes]] = {}
    for chunk in planned:
        inline = chunk.payload is not None and len(chunk.payload) <= INLINE_PAYLOAD_BYTES
        task = messages.TaskMessage(
            "chunk",
            job.job_type,
            job.job_id,
            chunk.index,
            chunk.etag if inline else None,
            chunk.payload if inline else None,
            job.incarnation,
        )
        bodies.setdefault(job.chunk_queue(chunk.index), []).append(messages.encode(task))
    # One send_many per queue the chunks go to (blocks of consecutive chunks: a page of
    # 400 reaches every queue of a job of up to 12 queues).
    for queue, sent in bodies.items():
        budget.call(sender_of_unsent(queues, queue, sent))


def feed_message(job: JobRecord, first: int) -> bytes:
    """The message of the job's feed task; ``first``: the chunk it starts at if its
    record holds no cursor yet."""
    return messages.encode(
        messages.TaskMessage("feed", job.job_type, job.job_id, first, incarnation=job.incarnation)
    )


def sender_of_unsent(queues: QueueStore, queue: str, bodies: list[bytes]) -> Callable[[], None]:
    """One try at sending what is not sent yet: a retry sends again only the messages
    whose send failed, so passing trouble on a few does not send the whole page twice
    (with sends refused now and then, a page of a thousand rarely goes through whole).
    A failure that was applied with its answer lost still leaves a duplicate: the claim
    turns it into one run (docs/semantics.md §5)."""
    unsent = list(bodies)

    def send() -> None:
        nonlocal unsent
        troubles = queues.send_many(queue, unsent, ttl_seconds=NEVER_EXPIRES)
        failed = [(body, t) for body, t in zip(unsent, troubles, strict=True) if t is not None]
        unsent = [body for body, _ in failed]
        if failed:
            raise failed[0][1]

    return send
