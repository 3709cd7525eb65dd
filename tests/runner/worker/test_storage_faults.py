"""A whole job in-process, on both backends, over storage that fails on purpose.

Two worker loops (threads of this process) run a job while the storage double makes a
share of every kind of call busy (not applied), ambiguous (applied, then reported lost)
or slow. Nothing is killed here, so every chunk must run once, none may be stopped as
fenced (that would be a worker fencing itself), and the job must end `done` with its
finalize run once. ``make chaos`` does the same across processes, with kills and pauses.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from typing import Any

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage, RandomFaults, ScriptedFaults
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from jobs.summary import JobSummary
from runner.worker.loop import WorkerLoop, WorkerSettings

ITEMS_PER_CHUNK = 10
#: Every item applied, by (job, item); finalize runs by job (one process, so a dict).
APPLIED: Counter[tuple[str, int]] = Counter()
FINALIZED: Counter[str] = Counter()
#: ``split`` runs by job: a planning run twice would split twice.
SPLIT: Counter[str] = Counter()
_LOCK = threading.Lock()


class Faulted(ChunkedJob):
    queue = "faulted-items"
    lease_seconds = 5
    checkpoint_interval_seconds = 0.05

    def split(self, params: dict[str, Any]) -> Any:
        with _LOCK:
            SPLIT[params.get("name", "")] += 1
        return ({"first": n * ITEMS_PER_CHUNK} for n in range(params["chunks"]))

    def process(self, chunk: Chunk) -> int:
        item = chunk.state if chunk.state is not None else chunk.payload["first"]
        while item < chunk.payload["first"] + ITEMS_PER_CHUNK:
            with _LOCK:
                APPLIED[(chunk.job_id, item)] += 1
            item += 1
            chunk.checkpoint(item)
        return ITEMS_PER_CHUNK

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        assert sum(result for _, result in summary.results()) == summary.total * ITEMS_PER_CHUNK
        with _LOCK:
            FINALIZED[summary.job_id] += 1


@pytest.fixture
def storage(real_clock_storage: Storage) -> Storage:
    return real_clock_storage


def _run_workers(storage: Any, workers: int) -> None:
    settings = WorkerSettings(concurrency=2, burst=True, poll_max_seconds=0.1)
    loops = [WorkerLoop(storage, [Faulted], settings) for _ in range(workers)]
    threads = [threading.Thread(target=loop.run) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    assert not any(thread.is_alive() for thread in threads), "workers did not finish"


@pytest.mark.timeout(300)
def test_a_job_completes_exactly_once_under_busy_ambiguous_and_slow_storage(
    storage: Storage, caplog: pytest.LogCaptureFixture
):
    # Given storage where 10 % of calls are busy, 5 % applied-then-lost, 10 % slow
    plan = RandomFaults(seed=13, busy=0.10, ambiguous=0.05, delayed=0.10, delay_seconds=(0, 0.05))
    faulty = FaultyStorage(storage, plan)
    chunks = 12
    job_id = f"faulted-{uuid.uuid4().hex[:8]}"

    # When a job is submitted and two workers run it to the end
    caplog.set_level(logging.WARNING)
    submit(Faulted, {"chunks": chunks}, storage=faulty.storage, job_id=job_id)
    _run_workers(faulty.storage, workers=2)

    # Then it is done, every item applied, each exactly once (nothing killed: no redo)
    job = CheckpointStore(storage).get_job(job_id)
    assert (job.state, job.error) == ("done", None)
    applied = {item: n for (job, item), n in APPLIED.items() if job == job_id}
    assert sorted(applied) == list(range(chunks * ITEMS_PER_CHUNK))
    assert set(applied.values()) == {1}
    assert FINALIZED[job_id] == 1
    # ... no chunk stopped itself as fenced, and faults of every kind really happened
    fenced = [r.getMessage() for r in caplog.records if "fenced" in r.getMessage()]
    lost = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    assert fenced == [] and lost == []
    faults = faulty.counts.snapshot()["faults"]
    assert min(faults.get(kind, 0) for kind in ("busy", "ambiguous", "delay")) > 0, faults


@pytest.mark.timeout(300)
def test_a_pipeline_hands_off_exactly_once_under_busy_ambiguous_and_slow_storage(
    storage: Storage, caplog: pytest.LogCaptureFixture
):
    # Given storage where 10 % of calls are busy, 5 % applied-then-lost, 10 % slow,
    # and a pipeline of two steps, the second after the first
    plan = RandomFaults(seed=7, busy=0.10, ambiguous=0.05, delayed=0.10, delay_seconds=(0, 0.05))
    faulty = FaultyStorage(storage, plan)
    tag = uuid.uuid4().hex[:8]
    steps: list[str] = []
    for name in ("stage", "publish"):
        steps.append(
            submit(
                Faulted,
                {"chunks": 2, "name": f"{name}-{tag}"},
                storage=faulty.storage,
                job_id=f"faulted-{name}-{tag}",
                after=steps[-1:],
                pipeline=f"faulted-{tag}",
            )
        )

    # When two workers run what there is until nothing is left
    caplog.set_level(logging.WARNING)
    _run_workers(faulty.storage, workers=2)

    # Then both steps are done, each planned once, each item applied once, each
    # finalized once: the hand-off started the second exactly once
    store = CheckpointStore(storage)
    assert [store.get_job(step).state for step in steps] == ["done"] * 2
    assert [SPLIT[f"{name}-{tag}"] for name in ("stage", "publish")] == [1, 1]
    for step in steps:
        applied = {item: n for (job, item), n in APPLIED.items() if job == step}
        assert sorted(applied) == list(range(2 * ITEMS_PER_CHUNK)) and set(applied.values()) == {1}
        assert FINALIZED[step] == 1 and store.get_job(step).dependents_started
    faults = faulty.counts.snapshot()["faults"]
    assert faults.get("ambiguous", 0) > 0, faults


def test_a_worker_waits_for_storage_at_start_up_instead_of_exiting(
    storage: Storage, caplog: pytest.LogCaptureFixture
):
    # Given storage whose table creation fails three times (busy, then lost connections)
    script = ScriptedFaults(
        ("records.create_table", "busy"),
        ("records.create_table", "busy"),
        ("records.create_table", "busy"),
    )
    faulty = FaultyStorage(storage, script)
    caplog.set_level(logging.WARNING)

    # When a worker starts in burst mode, it waits (a line per try), then serves
    code = WorkerLoop(faulty.storage, [Faulted], WorkerSettings(burst=True)).run()

    assert code == 0
    assert script.pending == []
    tries = [r for r in caplog.records if "try" in r.getMessage() and "failed" in r.getMessage()]
    assert len(tries) == 3


def test_a_worker_stopped_while_waiting_for_storage_exits_cleanly(storage: Storage):
    # Given storage that never lets a table be created
    script = ScriptedFaults(*[("records.create_table", "busy")] * 1_000)
    loop = WorkerLoop(FaultyStorage(storage, script).storage, [Faulted])

    # When it is stopped while waiting, it exits 0 without having served
    threading.Timer(1.0, loop.request_stop).start()
    assert loop.run() == 0


def test_planning_that_cannot_reach_storage_for_a_whole_lease_is_handed_back_unfailed(
    tmp_path, caplog: pytest.LogCaptureFixture
):
    # Given a store (on a fake clock: the retries' waits pass at once) whose batches stay
    # busy for longer than the planning lease's retry budget, then recover
    clock = FakeClock()
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    script = ScriptedFaults(*[("records.batch", "busy")] * 40)
    faulty = FaultyStorage(storage, script, sleep=clock.sleep)
    # (submitted before: a submit is a batch too, the job with its catalogue index row)
    job_id = submit(Faulted, {"chunks": 3}, storage=storage)
    caplog.set_level(logging.WARNING)

    # When a worker plans it (burst: to the end), with the clock on the worker's side
    settings = WorkerSettings(burst=True, poll_max_seconds=0.05)
    WorkerLoop(faulty.storage, [Faulted], settings, clock=clock).run()

    # Then planning was handed back (not failed), ran again, and the job is done with no
    # attempt spent on the store's trouble
    store = CheckpointStore(storage)
    assert store.get_job(job_id).state == "done"
    plan = store.get_task(job_id, "plan", 0)
    assert (plan.attempt, plan.error) == (1, None)
    assert any("handed back" in r.getMessage() for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert script.pending == []
