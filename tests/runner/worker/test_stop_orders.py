"""The stop-order watcher (runner/worker/stop_orders.py): a cancel or a pause reaches a
worker's running tasks within 2 s whatever their lease, for one job-record read per
worker and job about once a second (docs/semantics.md §16).

On both backends with a FakeClock, through the worker's own parts (the :class:`World`
of tests/runner/worker/tasks/test_task_lifecycle.py); then a worker loop in real time whose chunk
would run on for 15 s under a 30 s lease, cancelled while it runs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from checkpoint import layout, retries
from checkpoint.backends import open_storage
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.storage import ANY_ETAG
from checkpoint.store import CheckpointStore
from jobs import manage
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.loop import WorkerLoop, WorkerSettings
from runner.worker.stop_orders import CHECK_SECONDS, MAX_AGE_SECONDS, StopOrderWatcher
from tests.runner.world import World


class FakeTask:
    """A running task as the watcher sees it: the stop orders it was told."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def stop_for(self, order: str) -> bool:
        self.told.append(order)
        return len(self.told) == 1


def _count_job_reads(world: World) -> Counter[str]:
    """Job-record reads the worker makes from now on, by job id."""
    reads: Counter[str] = Counter()
    store = world.worker.store
    real = store.get_job

    def counted(job_id: str, budget: Budget | None = None) -> JobRecord:
        reads[job_id] += 1
        return real(job_id, budget)

    world.monkeypatch.setattr(store, "get_job", counted)
    return reads


def test_each_job_is_read_once_a_second_however_many_of_its_tasks_run(world: World):
    # Given three tasks of one job and one of another running here
    first, second = world.job([{"act": "ok"}] * 3), world.job([{"act": "ok"}])
    reads = _count_job_reads(world)
    watcher = world.worker.stop_orders
    with ExitStack() as running:
        for job_id in (first, first, first, second):
            running.enter_context(watcher.watching(job_id, FakeTask()))

        # Then nothing is read before the first look is due (the tasks' deliveries have
        # just read the records), then one read per job
        assert watcher.check_due() == pytest.approx(MAX_AGE_SECONDS)
        assert reads == {}
        world.clock.advance(MAX_AGE_SECONDS)
        assert watcher.check_due() == pytest.approx(CHECK_SECONDS)
        assert reads == {first: 1, second: 1}
        world.clock.advance(CHECK_SECONDS / 2)
        assert watcher.check_due() == pytest.approx(CHECK_SECONDS / 2)
        assert reads == {first: 1, second: 1}
        world.clock.advance(CHECK_SECONDS / 2)
        watcher.check_due()
        assert reads == {first: 2, second: 2}

    # and a job with nothing running here is not looked at at all
    world.clock.advance(CHECK_SECONDS * 10)
    assert watcher.check_due() == CHECK_SECONDS
    assert reads == {first: 2, second: 2}


def test_a_record_a_delivery_read_just_now_serves_the_look(world: World):
    job_id = world.job([{"act": "ok"}])
    reads = _count_job_reads(world)
    watcher = world.worker.stop_orders
    with watcher.watching(job_id, FakeTask()):
        world.clock.advance(MAX_AGE_SECONDS / 2)
        world.worker.job_cache.job(job_id, retries.once(world.clock), fresh=True)  # a delivery
        world.clock.advance(MAX_AGE_SECONDS / 2)
        assert watcher.check_due() == pytest.approx(CHECK_SECONDS)  # looked at, no read
    assert reads == {job_id: 1}


def test_a_cancel_and_a_pause_are_told_to_every_running_task_of_their_job(world: World):
    cancelled, paused, drained = (world.job([{"act": "ok"}]) for _ in range(3))
    tasks = {job_id: [FakeTask(), FakeTask()] for job_id in (cancelled, paused, drained)}
    storage = world.backend.storage
    with ExitStack() as running:
        for job_id, its_tasks in tasks.items():
            for task in its_tasks:
                running.enter_context(world.worker.stop_orders.watching(job_id, task))
        manage.cancel(cancelled, "wrong input", storage=storage, clock=world.clock)
        manage.pause(paused, storage=storage, clock=world.clock)
        manage.pause(drained, drain=True, storage=storage, clock=world.clock)

        world.clock.advance(CHECK_SECONDS)
        world.worker.stop_orders.check_due()

    assert [task.told for task in tasks[cancelled]] == [["cancelled"], ["cancelled"]]
    assert [task.told for task in tasks[paused]] == [["paused"], ["paused"]]
    assert [task.told for task in tasks[drained]] == [[], []]  # a drain lets them finish


def test_a_look_the_store_does_not_answer_goes_by_the_record_known(world: World):
    # Given a job this worker knows as paused (resumed since), and a cancelled job it
    # never read
    storage = world.backend.storage
    known, unknown = world.job([{"act": "ok"}]), world.job([{"act": "ok"}])
    manage.pause(known, storage=storage, clock=world.clock)
    world.worker.job_cache.job(known, retries.once(world.clock), fresh=True)
    manage.resume(known, storage=storage, clock=world.clock)
    manage.cancel(unknown, storage=storage, clock=world.clock)
    told_known, told_unknown = FakeTask(), FakeTask()
    with ExitStack() as running:
        running.enter_context(world.worker.stop_orders.watching(known, told_known))
        running.enter_context(world.worker.stop_orders.watching(unknown, told_unknown))

        # When the store does not answer the looks
        world.meanwhile.busy.add("records.get")
        world.clock.advance(CHECK_SECONDS)
        world.worker.stop_orders.check_due()
        world.meanwhile.busy.clear()

    # Then the record known decides; a job never read goes on, as under its lease
    assert told_known.told == ["paused"] and told_unknown.told == []


def test_a_job_deleted_altogether_stops_its_running_tasks_as_deleted(world: World):
    job_id = world.job([{"act": "ok"}])
    task = FakeTask()
    with world.worker.stop_orders.watching(job_id, task):
        records = world.backend.storage.records
        records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, etag=ANY_ETAG)
        world.clock.advance(CHECK_SECONDS)
        world.worker.stop_orders.check_due()
    assert task.told == ["deleted"]


def test_a_job_this_worker_failed_stops_its_tasks_and_deliveries_here_at_once(world: World):
    job_id = world.job([{"act": "ok"}] * 2)
    task = FakeTask()
    reads = _count_job_reads(world)
    with world.worker.stop_orders.watching(job_id, task):
        failed = world.store.change_job(
            job_id, lambda job: {"state": "failed", "cancelled_on": world.clock.now()}
        )
        assert failed is not None
        world.worker.stop_orders.job_changed(failed)

    assert task.told == ["cancelled"]
    # the noted record answers the next delivery, without a read
    assert world.worker.job_cache.job(job_id, retries.once(world.clock)).state == "failed"
    assert reads == {}


def test_a_record_that_stops_nothing_is_only_noted(world: World):
    job_id = world.job([{"act": "ok"}])
    task = FakeTask()
    with world.worker.stop_orders.watching(job_id, task):
        world.worker.stop_orders.job_changed(world.store.get_job(job_id))
    assert task.told == []


class Stubborn:
    """A task whose first telling fails (the watcher must outlive it)."""

    def __init__(self) -> None:
        self.told: list[str] = []
        self.told_again = threading.Event()

    def stop_for(self, order: str) -> bool:
        self.told.append(order)
        if len(self.told) == 1:
            raise RuntimeError("a bad task")
        self.told_again.set()
        return True


def test_the_watcher_thread_looks_on_its_own_and_outlives_a_bad_pass(world: World):
    job_id = world.job([{"act": "ok"}])
    watcher = StopOrderWatcher(world.worker.job_cache, world.clock, check_seconds=0.05)
    task = Stubborn()
    manage.cancel(job_id, storage=world.backend.storage, clock=world.clock)
    with watcher.watching(job_id, task):
        watcher.start()
        watcher.start()  # idempotent
        try:
            # The fake clock moves while the thread waits in real time between passes
            for _ in range(500):
                world.clock.advance(0.05)
                if task.told_again.wait(0.02):
                    break
            assert task.told_again.is_set()
        finally:
            watcher.stop()
            watcher.stop()
    assert task.told[:2] == ["cancelled", "cancelled"]


# --------------------------------------------------------------------------- real time

#: How long the chunk below would run if nothing stopped it (less than a renewal).
RUN_SECONDS = 15.0
#: How late its stop may come after the cancel: the 2 s promised, and slack for a busy
#: machine (a renewal-only stop would come after RUN_SECONDS).
STOP_BOUND_SECONDS = 5.0
TIMES: dict[str, float] = {}
STARTED = threading.Event()


class LongChunk(ChunkedJob):
    """One chunk that checkpoints every 20 ms for RUN_SECONDS, under a 30 s lease."""

    queue = "stop-orders-long-chunk"
    lease_seconds = 30
    checkpoint_interval_seconds = 0.1

    def split(self, params: Any) -> Any:
        return [{"rows": 1}]

    def process(self, chunk: Chunk) -> Any:
        STARTED.set()
        steps = chunk.state or 0
        try:
            deadline = time.monotonic() + RUN_SECONDS
            while time.monotonic() < deadline:
                steps += 1
                chunk.checkpoint(steps)
                time.sleep(0.02)
            return steps
        finally:
            TIMES["stopped"] = time.monotonic()


def test_a_cancel_stops_a_chunk_long_before_its_lease_is_renewed(tmp_path: Path):
    storage = open_storage(str(tmp_path / "store"))
    STARTED.clear()
    try:
        job_id = submit(LongChunk, {}, storage=storage)
        loop = WorkerLoop(storage, [LongChunk], WorkerSettings(burst=True, poll_max_seconds=0.05))
        worker = threading.Thread(target=loop.run)
        worker.start()
        try:
            assert STARTED.wait(30)
            time.sleep(0.2)
            cancelled_at = time.monotonic()
            manage.cancel(job_id, "stop it", storage=storage)
        finally:
            worker.join(RUN_SECONDS + 30)
        assert TIMES["stopped"] - cancelled_at < STOP_BOUND_SECONDS
        store = CheckpointStore(storage)
        chunk = store.get_task(job_id, "chunk", 0)
        assert chunk.state == "waiting" and chunk.attempt == 0  # not done, attempt given back
        assert store.get_job(job_id).state == "cancelled"
    finally:
        storage.close()
