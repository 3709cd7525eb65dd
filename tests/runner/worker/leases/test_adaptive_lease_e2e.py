"""The adaptive lease end to end, on both backends and the real clock, with real short
bounds: a worker whose first renewals are answered late loses a lease once, learns
from it, and loses nothing after (docs/semantics.md §25)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from checkpoint.clock import SystemClock
from checkpoint.lease_book import LeaseBook
from checkpoint.retries import STANDALONE, Budget
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import Fault, FaultyStorage
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.leases.learned import LearnedLease
from runner.worker.loop import WorkerLoop, WorkerSettings

ITEMS, ITEM_SECONDS = 8, 0.25
APPLIED: Counter[tuple[str, int]] = Counter()
_LOCK = threading.Lock()


class Learning(ChunkedJob):
    """Chunks of 2 s under an adaptive lease of 2 s to start with."""

    queue = "learning-lease"
    lease_bounds = (2, 60)
    checkpoint_interval_seconds = 0.0

    def split(self, params: dict[str, Any]) -> Any:
        return ({"first": n * ITEMS} for n in range(params["chunks"]))

    def process(self, chunk: Chunk) -> None:
        item = chunk.state if chunk.state is not None else chunk.payload["first"]
        while item < chunk.payload["first"] + ITEMS:
            time.sleep(ITEM_SECONDS)
            with _LOCK:
                APPLIED[(chunk.job_id, item)] += 1
            item += 1
            chunk.checkpoint(item)


class SlowRenewals:
    """The first ``count`` renewals (UpdateMessage) held ``seconds`` before they are
    sent: a store slowed down, answering past a 2 s lease's 1 s end margin."""

    def __init__(self, count: int, seconds: float):
        self.left, self.seconds = count, seconds
        self._lock = threading.Lock()

    def decide(self, service: str, method: str) -> Fault | None:
        with self._lock:
            if (service, method) != ("queues", "update") or self.left <= 0:
                return None
            self.left -= 1
            return Fault("delay", self.seconds)


@pytest.mark.timeout(180)
def test_a_lease_lost_to_a_slow_store_is_learned_and_not_lost_again(
    real_clock_storage: Storage,
):
    storage = real_clock_storage
    # Given a fresh type's lease (its row forgotten) and a store whose first four
    # renewals are answered 2.5 s late
    budget = Budget(STANDALONE, SystemClock())
    CheckpointStore(storage).ensure()
    LeaseBook(storage.records).forget(Learning.job_type(), budget)
    faulty = FaultyStorage(storage, SlowRenewals(count=4, seconds=2.5))
    job_id = submit(
        Learning, {"chunks": 4}, storage=faulty.storage, job_id=f"learn-{uuid.uuid4().hex[:8]}"
    )

    # When one worker runs the job to its end, two chunks at a time
    settings = WorkerSettings(concurrency=2, burst=True, poll_max_seconds=0.2)
    assert WorkerLoop(faulty.storage, [Learning], settings).run() == 0

    # Then every item was applied, and only the chunks running during the first lesson
    # (one stall: one lesson) ran twice
    store = CheckpointStore(storage)
    assert store.get_job(job_id).state == "done"
    applied = {item: n for (job, item), n in APPLIED.items() if job == job_id}
    assert sorted(applied) == list(range(4 * ITEMS))
    attempts = sorted(task.attempt for task in store.chunks(job_id))
    assert attempts[:2] == [1, 1] and max(attempts) <= 2, attempts
    # ... and the type's row learned a lease long enough for a 2.5 s late answer
    row = LeaseBook(storage.records).read(Learning.job_type(), budget)
    assert row is not None
    learned = LearnedLease.from_record(Learning.job_type(), row)
    assert 1 <= learned.lost_in_last_hour(SystemClock().now()) <= 2
    assert learned.lease_seconds >= 8 and learned.lateness.samples > 0
