"""``jobs.testing``, the harnesses users test their own jobs with.

``ChunkEnvironment``: checkpoints and their durability on a FakeClock, simulated lease
loss and worker stop, planning and finalize — and that it behaves exactly as the
runner's TaskControl. ``run_job``: a whole job through the runner's own code in this
process, with workers killed at chosen points and resumed, retries, poison, the report."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import CodecError, LeaseLost
from checkpoint.records import Progress
from checkpoint.store import CheckpointStore
from jobs.backoff import Backoff
from jobs.chunk import Chunk, ChunkControl
from jobs.errors import ChunkStopped, JobDefinitionError
from jobs.job import ChunkedJob
from jobs.summary import JobSummary
from jobs.testing import ChunkEnvironment, CrashAt, JobDidNotFinish, JobRun, run_job
from runner.worker.control import TaskControl
from runner.worker.lease import Lease


class CountRows(ChunkedJob):
    """Rows ``first..last`` of each chunk, one checkpoint per row."""

    checkpoint_interval_seconds = 5

    def split(self, params: Any) -> Iterator[dict[str, int]]:
        for first in range(0, params["rows"], 10):
            yield {"first": first, "last": min(first + 10, params["rows"])}

    def process(self, chunk: Chunk) -> dict[str, Any]:
        row = chunk.state if chunk.state is not None else chunk.payload["first"]
        seen = []
        while row < chunk.payload["last"]:
            seen.append(row)
            row += 1
            chunk.checkpoint(row)
        return {"last": row, "seen": seen}

    def finalize(self, params: Any, summary: JobSummary) -> dict[str, Any]:
        return {
            "total": summary.total,
            "done": summary.done,
            "rows": sum(len(result["seen"]) for _, result in summary.results()),
            "order": [index for index, _ in summary.results()],
        }


def _env(clock: FakeClock | None = None, **kwargs: Any) -> ChunkEnvironment:
    """CountRows on rows 0-9; one second of work per row unless a clock is given."""
    clock = clock or FakeClock()
    kwargs.setdefault("on_checkpoint", lambda _state: clock.advance(1))
    return ChunkEnvironment(
        CountRows, params={"rows": 10}, payload={"first": 0, "last": 10}, clock=clock, **kwargs
    )


class MigrateOrders(ChunkedJob):
    """The design brief's example job, as the module docstring of jobs.testing uses it."""

    def split(self, params: Any) -> Iterator[dict[str, int]]:
        for first in range(0, params["rows"], 10_000):
            yield {"first": first, "last": min(first + 10_000, params["rows"])}

    def process(self, chunk: Chunk) -> None:
        row = chunk.state or chunk.payload["first"]
        while row < chunk.payload["last"]:
            MIGRATED.append(row)
            row += 1
            chunk.checkpoint(row)


MIGRATED: list[int] = []


def test_the_module_docstring_example():
    MIGRATED.clear()
    env = ChunkEnvironment(
        MigrateOrders,
        params={"rows": 30},
        payload={"first": 0, "last": 30},
        checkpoint_interval_seconds=0,
    )
    env.lose_lease_after(10)
    with pytest.raises(LeaseLost):
        env.run()
    assert env.durable_state == 10

    again = env.next_attempt()
    again.run()
    assert again.checkpoints[0] == 11
    assert sorted(MIGRATED) == list(range(11)) + list(range(10, 30))  # row 10 twice


# --------------------------------------------------------------------------- running


def test_run_returns_the_result_and_records_every_checkpoint():
    env = _env()
    assert env.run() == {"last": 10, "seen": list(range(10))}
    assert env.result == {"last": 10, "seen": list(range(10))}
    assert env.checkpoints == list(range(1, 11))


def test_durable_checkpoints_follow_the_interval_then_the_final_flush():
    # Given one checkpoint per second and a 5 s interval (the claim counts as a write)
    env = _env()
    env.run()
    # Then the checkpoint offered at 5 s was written, and the newest at the end
    assert env.durable == [6, 10]
    assert env.durable_state == 10


def test_a_zero_interval_makes_every_checkpoint_durable():
    env = _env(checkpoint_interval_seconds=0)
    env.run()
    assert env.durable == list(range(1, 11))


def test_no_time_passing_means_only_the_final_flush_is_durable():
    env = _env(on_checkpoint=None)
    env.run()
    assert env.durable == [10]


def test_chunk_sees_its_coordinates():
    seen: dict[str, Any] = {}

    class Inspect(ChunkedJob):
        def process(self, chunk: Chunk) -> None:
            seen.update(vars(chunk))

    ChunkEnvironment(
        Inspect,
        params={"p": 1},
        payload=("a", 1),
        state={"row": 3},
        attempt=4,
        job_id="job-9",
        index=12,
    ).run()
    assert seen["job_id"] == "job-9" and seen["index"] == 12 and seen["attempt"] == 4
    assert seen["params"] == {"p": 1}
    assert seen["payload"] == ["a", 1]  # after msgpack, as on a worker: tuples are lists
    assert seen["state"] == {"row": 3}


def test_an_instance_can_be_given_instead_of_the_class():
    job = CountRows()
    env = ChunkEnvironment(job, payload={"first": 5, "last": 7})
    assert env.run()["seen"] == [5, 6]


def test_an_environment_runs_once():
    env = _env()
    env.run()
    with pytest.raises(RuntimeError, match="next_attempt"):
        env.run()


def test_it_is_a_chunk_control():
    control: ChunkControl = _env()
    assert control.stopping is False


# --------------------------------------------------------------------------- lease loss


def test_lose_lease_after_n_checkpoints_raises_at_the_next_one_without_writing():
    env = _env()
    env.lose_lease_after(3)
    with pytest.raises(LeaseLost, match="simulated"):
        env.run()
    assert env.checkpoints == [1, 2, 3, 4]  # the fourth was offered, then refused
    assert env.durable == []  # nothing written after the loss, nor flushed
    assert env.durable_state is None
    assert env.result is None


def test_losing_the_lease_after_durable_writes_keeps_only_those():
    env = _env()
    env.lose_lease_after(8)
    with pytest.raises(LeaseLost):
        env.run()
    assert env.durable == [6]
    assert env.durable_state == 6


def test_lose_lease_from_a_checkpoint_callback():
    clock = FakeClock()

    def at_checkpoint(state: int) -> None:
        clock.advance(1)
        if state == 5:
            env.lose_lease("another worker claimed it")

    env = _env(clock, on_checkpoint=at_checkpoint)
    with pytest.raises(LeaseLost, match="another worker claimed it"):
        env.run()
    assert env.checkpoints[-1] == 6
    assert env.durable == []


def test_lease_lost_before_the_start_stops_the_first_checkpoint():
    env = _env()
    env.lose_lease_after(0)
    assert env.stopping is True
    with pytest.raises(LeaseLost):
        env.run()
    assert env.checkpoints == [1]


def test_a_lost_lease_refuses_a_due_write_from_offer_itself():
    env = _env(checkpoint_interval_seconds=0)
    env.lose_lease()
    with pytest.raises(LeaseLost):
        env.offer(1)
    assert env.durable == []


def test_a_loop_that_rarely_checkpoints_can_watch_stopping():
    class Polling(ChunkedJob):
        def process(self, chunk: Chunk) -> int:
            spins = 0
            while not chunk.stopping:
                spins += 1
                if spins == 3:
                    env.lose_lease()
            return spins

    env = ChunkEnvironment(Polling)
    assert env.run() == 3
    assert env.lease_lost is True


def test_past_max_chunk_seconds_the_lease_is_lost():
    class Capped(CountRows):
        max_chunk_seconds = 3.5

    clock = FakeClock()
    env = ChunkEnvironment(
        Capped,
        payload={"first": 0, "last": 10},
        clock=clock,
        on_checkpoint=lambda _state: clock.advance(1),
    )
    with pytest.raises(LeaseLost, match="max_chunk_seconds"):
        env.run()
    assert env.checkpoints == [1, 2, 3, 4, 5]  # offered at 0, 1, 2, 3 and 4 s


def test_lease_loss_from_another_thread_is_seen_at_the_next_checkpoint():
    # As on a worker, where the lease keeper's thread loses the lease
    started, lost = threading.Event(), threading.Event()

    class Waits(ChunkedJob):
        def process(self, chunk: Chunk) -> None:
            chunk.checkpoint(1)
            started.set()
            assert lost.wait(10)
            chunk.checkpoint(2)

    env = ChunkEnvironment(Waits)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            env.run()
        except LeaseLost as error:
            failure.append(error)

    runner = threading.Thread(target=run)
    runner.start()
    assert started.wait(10)
    env.lose_lease()
    lost.set()
    runner.join(10)
    assert len(failure) == 1


# --------------------------------------------------------------------------- stopping


def test_stop_after_n_checkpoints_flushes_the_newest_then_raises_chunk_stopped():
    env = _env()
    env.stop_after(3)
    with pytest.raises(ChunkStopped):
        env.run()
    assert env.checkpoints == [1, 2, 3, 4]
    assert env.durable == [4]  # flushed before stopping, although no interval passed
    assert env.durable_state == 4


def test_stop_from_a_callback():
    clock = FakeClock()
    env = _env(clock, on_checkpoint=lambda state: env.stop() if state == 7 else clock.advance(1))
    with pytest.raises(ChunkStopped):
        env.run()
    assert env.durable == [6, 8]


def test_stop_before_the_start_stops_at_the_first_checkpoint():
    env = _env()
    env.stop_after(0)
    assert env.stopping is True
    with pytest.raises(ChunkStopped):
        env.run()
    assert env.durable == [1]


def test_a_lost_lease_wins_over_a_stop():
    env = _env()
    env.stop_after(2)
    env.lose_lease_after(2)
    with pytest.raises(LeaseLost):
        env.run()
    assert env.durable == []


# --------------------------------------------------------------------------- failures


def test_a_failing_process_has_its_newest_state_flushed():
    class Fails(CountRows):
        def process(self, chunk: Chunk) -> Any:
            chunk.checkpoint("halfway")
            raise ValueError("bad row")

    env = ChunkEnvironment(Fails)
    with pytest.raises(ValueError, match="bad row"):
        env.run()
    assert env.durable == ["halfway"]


def test_a_failure_after_the_lease_was_lost_writes_nothing():
    class Fails(CountRows):
        def process(self, chunk: Chunk) -> Any:
            chunk.checkpoint("halfway")
            env.lose_lease()
            raise ValueError("bad row")

    env = ChunkEnvironment(Fails)
    with pytest.raises(ValueError):
        env.run()
    assert env.durable == []


def test_a_state_that_is_not_msgpack_able_fails_at_its_checkpoint():
    class BadState(CountRows):
        def process(self, chunk: Chunk) -> Any:
            chunk.checkpoint({1, 2})

    with pytest.raises(CodecError, match="checkpoint state is not msgpack-able"):
        ChunkEnvironment(BadState).run()


def test_a_result_that_is_not_msgpack_able_fails_the_run():
    class BadResult(CountRows):
        def process(self, chunk: Chunk) -> Any:
            return object()

    env = ChunkEnvironment(BadResult)
    with pytest.raises(CodecError, match="chunk result"):
        env.run()
    assert env.result is None


def test_a_payload_that_is_not_msgpack_able_is_refused_up_front():
    with pytest.raises(CodecError, match="payload"):
        ChunkEnvironment(CountRows, payload={"when": object()})


def test_a_mutated_state_is_written_as_it_was_at_checkpoint_time():
    # The runner snapshots each checkpointed state: mutating the object afterwards must
    # not change what a flush stores (it would claim work that was never done).
    class Mutates(ChunkedJob):
        def process(self, chunk: Chunk) -> None:
            state = {"row": 1}
            chunk.checkpoint(state)
            state["row"] = 99  # not yet done!
            raise RuntimeError("crash before row 99 was done")

    env = ChunkEnvironment(Mutates)
    with pytest.raises(RuntimeError):
        env.run()
    assert env.checkpoints == [{"row": 1}]
    assert env.durable == [{"row": 1}]


# --------------------------------------------------------------------------- resuming


def test_next_attempt_resumes_from_the_durable_state():
    # Given a first attempt that lost its lease after 8 rows (6 of them durable)
    first = _env()
    first.lose_lease_after(8)
    with pytest.raises(LeaseLost):
        first.run()

    # When the chunk is delivered again
    second = first.next_attempt()
    result = second.run()

    # Then it starts from row 6, as attempt 2: at most one interval of work redone
    assert second.attempt == 2
    assert result["seen"] == [6, 7, 8, 9]
    redone = set(first.checkpoints[:-1]) & set(second.checkpoints)
    assert len(redone) <= CountRows.checkpoint_interval_seconds
    assert second.clock is first.clock


def test_a_stopped_chunk_resumes_exactly_where_it_stopped():
    first = _env()
    first.stop_after(4)
    with pytest.raises(ChunkStopped):
        first.run()
    assert first.next_attempt().run()["seen"] == [5, 6, 7, 8, 9]


# --------------------------------------------------------------------------- plan


def test_plan_returns_the_payloads():
    env = ChunkEnvironment(CountRows)
    assert env.plan({"rows": 25}) == [
        {"first": 0, "last": 10},
        {"first": 10, "last": 20},
        {"first": 20, "last": 25},
    ]


def test_plan_uses_the_environments_params_by_default():
    assert len(ChunkEnvironment(CountRows, params={"rows": 95}).plan()) == 10


def test_plan_payloads_come_back_as_process_sees_them():
    class Tuples(ChunkedJob):
        def split(self, params: Any) -> Iterator[Any]:
            yield (1, 2)

    assert ChunkEnvironment(Tuples).plan() == [[1, 2]]


def test_plan_refuses_a_payload_that_is_not_msgpack_able():
    class BadSplit(ChunkedJob):
        def split(self, params: Any) -> Iterator[Any]:
            yield {"ok": 1}
            yield {"bad": {1, 2}}

    with pytest.raises(CodecError, match="payload 1 of split"):
        ChunkEnvironment(BadSplit).plan()


def test_plan_checks_split_is_deterministic():
    calls = iter(range(100))

    class Drifts(ChunkedJob):
        def split(self, params: Any) -> Iterator[Any]:
            yield {"stamp": next(calls)}

    with pytest.raises(AssertionError, match="not deterministic"):
        ChunkEnvironment(Drifts).plan()
    assert len(ChunkEnvironment(Drifts).plan(check_deterministic=False)) == 1


def test_plan_of_a_job_without_split_says_so():
    class NoSplit(ChunkedJob):
        pass

    with pytest.raises(NotImplementedError, match="NoSplit.split"):
        ChunkEnvironment(NoSplit).plan()


# --------------------------------------------------------------------------- finalize


def test_finalize_gets_a_summary_of_all_chunks_done():
    env = ChunkEnvironment(CountRows, params={"rows": 25})
    results = []
    for index, payload in enumerate(env.plan()):
        chunk_env = ChunkEnvironment(CountRows, params={"rows": 25}, payload=payload, index=index)
        results.append(chunk_env.run())
    assert env.finalize(results=results) == {"total": 3, "done": 3, "rows": 25, "order": [0, 1, 2]}


def test_finalize_takes_results_by_index_in_any_order():
    seen: list[Any] = []

    class Collects(ChunkedJob):
        def finalize(self, params: Any, summary: JobSummary) -> None:
            seen.append((params, summary.job_id, summary.total, list(summary.results())))

    env = ChunkEnvironment(Collects, job_id="job-7")
    env.finalize({"p": (1,)}, {2: "c", 0: "a", 1: ("b",)})
    assert seen == [({"p": [1]}, "job-7", 3, [(0, "a"), (1, ["b"]), (2, "c")])]


def test_default_finalize_does_nothing():
    class Plain(ChunkedJob):
        pass

    assert ChunkEnvironment(Plain).finalize(results=[1]) is None


# --------------------------------------------------------------------------- parity


class RecordingStore(CheckpointStore):
    """The real store, noting each progress value written."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.progress: list[Any] = []

    def write_task(self, task: Any, changes: Any, values: Any = None, **kwargs: Any) -> Any:
        values = values or {}
        written = super().write_task(task, changes, values, **kwargs)
        if "progress" in values:
            self.progress.append(values["progress"])
        return written


SCRIPTS = {
    "steady": [
        ("offer", 1),
        ("advance", 2),
        ("check",),
        ("offer", 2),
        ("advance", 3),
        ("offer", 3),
        ("check",),
        ("offer", 4),
        ("advance", 5),
        ("offer", 5),
        ("offer", 6),
        ("check",),
    ],
    "stop": [
        ("offer", 1),
        ("advance", 1),
        ("offer", 2),
        ("check",),
        ("stop",),
        ("offer", 3),
        ("check",),
    ],
    "lose-then-due": [("offer", 1), ("lose",), ("advance", 6), ("offer", 2), ("check",)],
    "lose-then-check": [
        ("offer", 1),
        ("advance", 6),
        ("offer", 2),
        ("offer", 3),
        ("lose",),
        ("check",),
        ("stop",),
        ("check",),
    ],
    "stop-and-lose": [("offer", 1), ("stop",), ("lose",), ("check",)],
    "stop-nothing-new": [("advance", 5), ("offer", 1), ("stop",), ("check",)],
}


def _play(
    script: list[tuple[Any, ...]], clock: FakeClock, control: Any, lose: Any, stop: Any
) -> list[str | None]:
    outcomes: list[str | None] = []
    for step, *args in script:
        try:
            if step == "offer":
                control.offer(args[0])
            elif step == "check":
                control.raise_if_stopped()
            elif step == "advance":
                clock.advance(args[0])
            elif step == "lose":
                lose()
            else:
                stop()
            outcomes.append(None)
        except (LeaseLost, ChunkStopped) as error:
            outcomes.append(type(error).__name__)
    return outcomes


@pytest.fixture
def runner_control(tmp_path: Path) -> Iterator[Any]:
    """A TaskControl over a claimed chunk on the embedded store, and its levers."""
    clock = FakeClock()
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    store = RecordingStore(storage, clock)
    store.create_job("parity", "tests:Job", "jobs-q", {})
    store.add_chunks("parity", 0, [{}])
    task = store.write_task(store.get_task("parity", "chunk", 0), {"state": "running"})
    now = clock.monotonic()
    lease = Lease("jobs-q", "m", "r", 60, acquired_at=now, visible_at=now + 60)
    stopping = threading.Event()
    control = TaskControl(store, task, lease, clock, 5.0, stopping)
    yield clock, control, store, lambda: lease.lose("lost"), stopping.set
    storage.close()


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_behaves_exactly_like_the_runners_task_control(script, runner_control):
    # Given the same steps played on the runner's TaskControl and on the harness
    clock, control, store, lose, stop = runner_control
    runner_outcomes = _play(script, clock, control, lose, stop)
    env_clock = FakeClock()
    env = ChunkEnvironment(CountRows, clock=env_clock, checkpoint_interval_seconds=5.0)
    env_outcomes = _play(script, env_clock, env, env.lose_lease, env.stop)

    # Then both raise the same thing at the same step and write the same states
    assert env_outcomes == runner_outcomes
    assert env.durable == store.progress
    assert env.stopping == control.stopping


# --------------------------------------------------------------------------- a whole job


class Failing(ChunkedJob):
    """CountRows' chunks, of which those named in ``params["fail"]`` always raise."""

    max_attempts = 3
    backoff = Backoff(first_seconds=5, multiplier=2, jitter=0)

    def split(self, params: Any) -> Iterator[int]:
        yield from range(params["chunks"])

    def process(self, chunk: Chunk) -> int:
        if chunk.payload in chunk.params["fail"]:
            raise ValueError(f"chunk {chunk.payload} cannot be read")
        return chunk.payload * 10

    def finalize(self, params: Any, summary: JobSummary) -> None:
        raise AssertionError("finalize must not run while a chunk is poisoned")


class Tiny(ChunkedJob):
    """One checkpoint per chunk; many chunks cheaply."""

    def split(self, params: Any) -> Iterator[int]:
        yield from range(params["chunks"])

    def process(self, chunk: Chunk) -> int:
        chunk.checkpoint(chunk.payload)
        return chunk.payload


class Endless(ChunkedJob):
    """A chunk that never ends, but checkpoints: only max_chunk_seconds stops it."""

    lease_seconds = 10
    max_chunk_seconds = 60
    max_attempts = 2

    def split(self, params: Any) -> Iterator[None]:
        yield None

    def process(self, chunk: Chunk) -> None:
        step = chunk.state or 0
        while True:
            step += 1
            chunk.checkpoint(step)


class DocsMigrateOrders(ChunkedJob):
    """The MigrateOrders of docs/writing-jobs.md, as jobs.testing's docstring runs it."""

    def split(self, params: Any) -> Iterator[dict[str, int]]:
        step = params.get("rows_per_chunk", 10_000)
        for first in range(0, params["rows"], step):
            yield {"first": first, "last": min(first + step, params["rows"])}

    def process(self, chunk: Chunk) -> dict[str, int]:
        row = chunk.state if chunk.state is not None else chunk.payload["first"]
        while row < chunk.payload["last"]:
            row += 1
            chunk.checkpoint(row)
        return {"rows": chunk.payload["last"] - chunk.payload["first"]}


def _rows_done(run: JobRun, index: int) -> list[int]:
    """The rows CountRows processed for chunk ``index``, over all its calls."""
    return [row for call in run.chunks[index].calls for row in call.checkpoints]


def test_the_run_job_docstring_example():
    run = run_job(
        DocsMigrateOrders,
        {"rows": 25, "rows_per_chunk": 10},
        crash=CrashAt(chunk=1, checkpoint=4),
    )
    run.assert_done()
    assert run.results == [{"rows": 10}, {"rows": 10}, {"rows": 5}]
    crashed, resumed = run.chunks[1].calls
    assert crashed.outcome == "crashed" and crashed.checkpoints[-1] == 14
    assert resumed.started_from == 14


class CountRowsOnFourQueues(CountRows):
    queues = 4


def test_run_job_runs_a_job_of_several_queues_from_each_of_them(
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a job of four queues, one chunk per block (its three chunks on three queues)
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 1)
    queue = CountRowsOnFourQueues.queue
    assert [CountRowsOnFourQueues.chunk_queue(i) for i in range(3)] == [
        f"{queue}-0",
        f"{queue}-1",
        f"{queue}-2",
    ]

    # When the harness runs it, a worker crashing mid-chunk on the way
    run = run_job(CountRowsOnFourQueues, {"rows": 25}, crash=CrashAt(chunk=1, checkpoint=4))

    # Then every chunk ran to its end, as on one queue
    assert (run.state, run.total) == ("done", 3)
    assert [result["last"] for result in run.results] == [10, 20, 25]


def test_run_job_runs_the_whole_job_once_each():
    run = run_job(CountRows, {"rows": 25})

    assert (run.state, run.error, run.total) == ("done", None, 3)
    assert run.results == [
        {"last": 10, "seen": list(range(10))},
        {"last": 20, "seen": list(range(10, 20))},
        {"last": 25, "seen": list(range(20, 25))},
    ]
    # each chunk's last durable state is its last checkpoint; every task ran once
    assert [chunk.checkpoint for chunk in run.chunks] == [10, 20, 25]
    assert [(chunk.state, chunk.attempt, chunk.runs) for chunk in run.chunks] == [
        ("done", 1, 1)
    ] * 3
    assert run.planning is not None and run.planning.runs == 1
    assert run.planning.checkpoint == 3  # chunks enqueued
    assert run.finalize is not None and (run.finalize.state, run.finalize.runs) == ("done", 1)
    assert [(call.kind, call.index) for call in run.calls] == [
        ("plan", 0),
        ("chunk", 0),
        ("chunk", 1),
        ("chunk", 2),
        ("final", 0),
    ]
    # finalize saw every result through the store, and its return value is kept
    assert run.summary is not None
    assert (run.summary.total, run.summary.done) == (3, 3)
    assert run.summary.results == list(enumerate(run.results)) * 2  # it reads them twice
    assert run.finalize_result == {"total": 3, "done": 3, "rows": 25, "order": [0, 1, 2]}
    assert run.assert_done() is run


def test_values_travel_through_msgpack():
    class Tuples(ChunkedJob):
        def split(self, params: Any) -> Iterator[Any]:
            yield (params["pair"], {1: b"x"})

        def process(self, chunk: Chunk) -> Any:
            assert chunk.payload == [[1, 2], {1: b"x"}]
            chunk.checkpoint((3, 4))
            return ("done",)

    run = run_job(Tuples, {"pair": (1, 2)})
    assert run.assert_done().results == [["done"]]
    assert run.chunks[0].checkpoint == [3, 4]
    assert run.chunks[0].calls[0].checkpoints == [[3, 4]]


def test_a_crash_at_a_checkpoint_resumes_from_exactly_that_checkpoint():
    # Given chunk 1's worker killed inside its 4th checkpoint (state 14); the clock does
    # not move while chunks run, so only the crash point makes a state durable
    run = run_job(CountRows, {"rows": 25}, crash=CrashAt(chunk=1, checkpoint=4))

    # Then a fresh worker resumed the chunk from state 14, once the lease had run out
    crashed, resumed = run.chunks[1].calls
    assert (crashed.outcome, crashed.checkpoints) == ("crashed", [11, 12, 13, 14])
    assert (resumed.attempt, resumed.started_from, resumed.outcome) == (2, 14, "returned")
    assert resumed.worker != crashed.worker
    assert (resumed.started_on - crashed.started_on).total_seconds() == CountRows.lease_seconds
    # and redid nothing before it: rows 10-13 once, then 14-19 once
    assert _rows_done(run, 1) == list(range(11, 21))
    assert run.chunks[1].result == {"last": 20, "seen": list(range(14, 20))}
    assert (run.chunks[1].state, run.chunks[1].attempt, run.chunks[1].runs) == ("done", 2, 2)
    assert run.assert_done().results[0] == {"last": 10, "seen": list(range(10))}


def test_a_crash_point_writes_its_checkpoint_whatever_the_interval():
    # Given a second of work per checkpoint and the job's 5-second interval: the runner
    # writes checkpoints 5 and 10 by itself, not 7
    run = run_job(
        CountRows, {"rows": 10}, crash=CrashAt(chunk=0, checkpoint=7), checkpoint_seconds=1
    )
    assert run.chunks[0].calls[1].started_from == 7


def test_a_crash_after_process_returned_redoes_the_work_since_the_last_durable_state():
    # Given two seconds per checkpoint: checkpoints 3, 6 and 9 are written (interval 5),
    # then process returns with state 10, and its worker dies before recording it done
    run = run_job(CountRows, {"rows": 10}, crash=CrashAt(chunk=0), checkpoint_seconds=2)

    crashed, resumed = run.chunks[0].calls
    assert (crashed.outcome, crashed.result["last"]) == ("crashed", 10)
    assert resumed.started_from == 9
    assert run.assert_done().results == [{"last": 10, "seen": [9]}]  # row 9 done twice


def test_a_crash_as_process_starts_still_counts_the_attempt():
    run = run_job(CountRows, {"rows": 10}, crash=CrashAt(chunk=0, checkpoint=0))
    crashed, resumed = run.chunks[0].calls
    assert (crashed.outcome, crashed.checkpoints) == ("crashed", [])
    assert (resumed.attempt, resumed.started_from) == (2, None)
    assert run.assert_done().chunks[0].attempt == 2


def test_a_failing_chunk_is_retried_after_its_backoff_then_poisoned():
    # Given chunk 1 of 3 raising on every attempt (3 attempts, backoff 5 s then 10 s)
    run = run_job(Failing, {"chunks": 3, "fail": [1]})

    # Then it was poisoned after three tries, the others were done, the job failed
    # without finalize, and run_job returned instead of waiting for ever
    poisoned = run.chunks[1]
    assert (poisoned.state, poisoned.attempt, poisoned.runs) == ("poisoned", 3, 3)
    assert [chunk.state for chunk in run.chunks] == ["done", "poisoned", "done"]
    assert run.state == "failed" and "1 chunk(s) poisoned" in (run.error or "")
    assert run.finalize is None and run.summary is None
    # each try came back after the backoff, on the fake clock the store reads
    first, second, third = (call.started_on for call in poisoned.calls)
    assert ((second - first).total_seconds(), (third - second).total_seconds()) == (5, 10)
    # the user's exceptions, each with its traceback, and the one recorded
    assert [str(error) for error in poisoned.exceptions] == ["chunk 1 cannot be read"] * 3
    assert all(isinstance(error, ValueError) for error in poisoned.exceptions)
    assert "in process" in poisoned.calls[0].traceback
    assert poisoned.error is not None and poisoned.error["type"] == "ValueError"
    assert "cannot be read" in poisoned.error["traceback"]
    with pytest.raises(AssertionError, match="chunk 1: poisoned, attempt 3, 3 run"):
        run.assert_done()


def test_a_chunk_that_dies_on_every_attempt_is_poisoned():
    run = run_job(Failing, {"chunks": 2, "fail": []}, crash=CrashAt(chunk=0, attempt=None))

    assert [call.outcome for call in run.chunks[0].calls] == ["crashed"] * 3
    assert run.chunks[0].state == "poisoned"
    assert run.chunks[0].error is not None
    assert "started 3 times without finishing" in run.chunks[0].error["message"]
    assert run.state == "failed"


def test_time_passing_in_checkpoints_renews_the_lease_up_to_max_chunk_seconds():
    # Given a chunk that never ends and a second per checkpoint: the lease (10 s) is
    # renewed as the keeper would, until max_chunk_seconds (60 s) stops the renewals
    run = run_job(Endless, None, checkpoint_seconds=1)

    first, second = run.chunks[0].calls
    assert isinstance(first.error, LeaseLost) and "max_chunk_seconds" in str(first.error)
    assert 60 <= first.passed <= 70
    assert second.started_from is not None and second.started_from >= 55  # resumed
    assert (run.chunks[0].state, run.state) == ("poisoned", "failed")


def test_a_crash_in_planning_runs_split_again_and_each_chunk_once():
    run = run_job(CountRows, {"rows": 25}, crash=CrashAt.planning(payloads=2))

    assert [call.outcome for call in run.calls if call.kind == "plan"] == ["crashed", "returned"]
    assert run.planning is not None and run.planning.attempt == 2
    assert [chunk.runs for chunk in run.assert_done().chunks] == [1, 1, 1]


def test_a_crash_in_planning_after_a_page_was_enqueued():
    # Given planning killed after its first page of 400 chunks was recorded and sent
    run = run_job(Tiny, {"chunks": 450}, crash=CrashAt.planning(payloads=420))

    # Then the first window of those chunks ran while planning waited for its lease (the
    # feeder has nothing more to send until planning says what it recorded); planning
    # ran split again from the start (its progress was not yet durable), recognised the
    # recorded page and sent the window's messages again: the duplicates were deleted
    # unrun
    plans = [call for call in run.calls if call.kind == "plan"]
    assert [call.passed for call in plans] == [420, 450]
    assert run.assert_done().total == 450
    assert run.results == list(range(450))
    assert {chunk.runs for chunk in run.chunks} == {1}
    first_chunk = next(i for i, call in enumerate(run.calls) if call.kind == "chunk")
    assert run.calls[first_chunk + Tiny.feed_window].kind == "plan"  # after the window


def test_planning_that_dies_every_time_fails_the_job():
    run = run_job(CountRows, {"rows": 5}, crash=CrashAt.planning(0, attempt=None))

    assert run.planning is not None
    assert (run.planning.state, run.planning.runs) == ("poisoned", CountRows.max_attempts)
    assert run.state == "failed" and run.error is not None and "plan poisoned" in run.error
    assert (run.total, run.chunks, run.finalize) == (None, (), None)


def test_finalize_crashed_at_a_result_runs_again_from_the_start():
    run = run_job(CountRows, {"rows": 25}, crash=CrashAt.finalizing(checkpoint=2))

    crashed, again = [call for call in run.calls if call.kind == "final"]
    assert crashed.outcome == "crashed"
    assert crashed.summary is not None and [i for i, _ in crashed.summary.results] == [0, 1]
    assert again.outcome == "returned" and run.summary is again.summary
    assert run.assert_done().finalize_result["rows"] == 25


def test_finalize_crashed_after_it_returned_runs_again():
    run = run_job(CountRows, {"rows": 25}, crash=CrashAt.finalizing())

    finals = [call for call in run.calls if call.kind == "final"]
    assert [call.outcome for call in finals] == ["crashed", "returned"]
    assert finals[0].result == finals[1].result == run.finalize_result
    assert run.assert_done().finalize is not None and run.finalize.attempt == 2


def test_a_job_without_chunks_goes_straight_to_finalize():
    run = run_job(CountRows, {"rows": 0})
    assert (run.assert_done().total, run.chunks, run.finalize_result["total"]) == (0, (), 0)


class Jittered(Failing):
    backoff = Backoff(first_seconds=5, jitter=0.5)


def test_runs_are_deterministic_jitter_and_all():
    def starts(seed: int) -> list[Any]:
        run = run_job(Jittered, {"chunks": 4, "fail": [1, 2]}, seed=seed)
        return [(call.kind, call.index, call.started_on) for call in run.calls]

    assert starts(7) == starts(7)
    assert starts(7) != starts(8)  # the jitter is real, drawn from the seed


def test_a_job_that_does_not_end_stops_after_max_rounds():
    with pytest.raises(JobDidNotFinish, match="max_rounds=3") as stopped:
        run_job(CountRows, {"rows": 100}, max_rounds=3)
    assert stopped.value.run.state == "running"
    assert [chunk.state for chunk in stopped.value.run.chunks][:3] == ["done", "done", "waiting"]


def test_the_store_is_removed_unless_a_directory_is_given(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert run_job(CountRows, {"rows": 5}).directory is None
    assert list((tmp_path / "tmp").iterdir()) == []

    kept = run_job(CountRows, {"rows": 5}, directory=tmp_path / "store")
    assert kept.directory == tmp_path / "store"
    with open_storage(str(tmp_path / "store")) as storage:
        assert CheckpointStore(storage).get_job("test-job").state == "done"


def test_run_job_checks_its_arguments():
    with pytest.raises(ValueError, match="checkpoint_seconds"):
        run_job(CountRows, {"rows": 5}, checkpoint_seconds=-1)


def test_crash_points_are_checked():
    with pytest.raises(ValueError, match="name the chunk"):
        CrashAt(checkpoint=1)
    with pytest.raises(ValueError, match="checkpoint must be"):
        CrashAt(chunk=0, checkpoint=-1)
    assert str(CrashAt(chunk=3, checkpoint=2)) == "crash of chunk 3 at checkpoint 2, attempt 1"
    assert str(CrashAt.planning(0, attempt=None)) == (
        "crash of planning after 0 payload(s), every attempt"
    )


# --------------------------------------------------------------------------- progress=


class SaysProgress(ChunkedJob):
    """Ten steps a chunk, saying how far it got at each, and nothing at the last."""

    checkpoint_interval_seconds = 5

    def split(self, params: Any) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> int:
        for step in range((chunk.state or 0) + 1, 11):
            chunk.checkpoint(step, progress=(step, 10) if step < 10 else None)
        return chunk.payload


def test_the_environment_records_the_progress_each_checkpoint_said():
    clock = FakeClock()
    env = ChunkEnvironment(
        SaysProgress, payload=0, clock=clock, on_checkpoint=lambda _: clock.advance(2)
    )
    env.run()

    assert env.progress == [Progress(step / 10, step, 10) for step in range(1, 10)] + [None]
    # durable every 5 s of 2 s steps (steps 4 and 7, then 10), the last write with the
    # last progress said (step 9's: the tenth checkpoint said none)
    assert env.durable == [4, 7, 10]
    assert env.durable_progress == Progress(0.9, 9, 10)


def test_a_bad_progress_fails_in_the_environment_as_on_a_worker():
    class Bad(ChunkedJob):
        def process(self, chunk: Chunk) -> None:
            chunk.checkpoint(1, progress=1.5)

    with pytest.raises(ValueError, match="progress must be a fraction from 0 to 1"):
        ChunkEnvironment(Bad).run()


def test_run_job_reports_the_progress_said_and_stored():
    run = run_job(SaysProgress, {"chunks": 2}, crash=CrashAt(chunk=1, checkpoint=4))

    run.assert_done()
    crashed, resumed = run.chunks[1].calls
    assert crashed.progress == [Progress(step / 10, step, 10) for step in range(1, 5)]
    assert resumed.started_from == 4 and resumed.progress[0] == Progress(0.5, 5, 10)
    assert run.chunks[0].progress == Progress(0.9, 9, 10)  # stored with the last state
    assert run.planning is not None and run.planning.progress is None


class Publishes(ChunkedJob):
    """Publishes its chunk's output, then checkpoints; finalize reports the publications."""

    def split(self, params: Any) -> Iterator[dict[str, int]]:
        yield {"n": 1}

    def process(self, chunk: Chunk) -> dict[str, Any]:
        before = chunk.published()
        chunk.publish("out/chunk-0", {"by": chunk.claim})
        chunk._control.record_spark_session("{}")
        chunk.checkpoint("published")
        taken_over = chunk.taken_over
        return {
            "claim": chunk.claim,
            "before": before,
            "from": taken_over.claim if taken_over else None,
        }

    def finalize(self, params: Any, summary: JobSummary) -> dict[str, Any]:
        return dict(summary.outputs())


def test_a_whole_job_publishes_through_the_runner_and_a_takeover_knows_the_dead_attempt():
    # Given the chunk's worker killed right after it published and checkpointed
    run = run_job(Publishes, {}, crash=CrashAt(chunk=0, checkpoint=1))

    # Then the next attempt saw that publication and whom it took over from, and the
    # publication finalize reads is the last attempt's
    crashed, resumed = run.chunks[0].calls
    assert (crashed.outcome, resumed.outcome) == ("crashed", "returned")
    result = run.chunks[0].result
    assert result["before"] == {"out/chunk-0": {"by": result["from"]}}
    assert result["from"] not in (None, result["claim"])
    assert run.assert_done().finalize_result == {0: {"out/chunk-0": {"by": result["claim"]}}}


def test_an_environment_publishes_fenced_and_passes_it_on():
    env = ChunkEnvironment(Publishes, payload={"n": 1})
    first = env.run()
    assert env.published() == {"out/chunk-0": {"by": first["claim"]}}
    assert env.spark_session == "{}"

    second = env.next_attempt()
    second.lose_lease()
    with pytest.raises(LeaseLost):
        second.run()  # its publication is refused: the chunk is no longer its own
    assert second.published() == env.published()
    with pytest.raises(LeaseLost):
        second.record_spark_session("{}")


# --------------------------------------------------------------------------- chunk.limit


class CallsApi(ChunkedJob):
    """Two requests to a shared API per chunk, each waiting for a unit of its rate."""

    queue = "harness-calls-api"
    limits = {"crm-api": "5/s"}

    def split(self, params: Any) -> Any:
        return [{"ids": [1, 2]}, {"ids": [3]}]

    def process(self, chunk: Chunk) -> Any:
        for _ in chunk.payload["ids"]:
            chunk.limit("crm-api")
        chunk.limit("crm-api", units=2)
        return len(chunk.payload["ids"])


def test_the_chunk_environment_records_what_chunk_limit_asked_and_takes_nothing():
    env = ChunkEnvironment(CallsApi, payload={"ids": [1, 2]})
    assert env.run() == 2
    assert env.limits_taken == [("crm-api", 1), ("crm-api", 1), ("crm-api", 2)]
    assert env.clock.sleeps == []  # nothing waited for a token


def test_chunk_limit_in_the_chunk_environment_names_an_unknown_resource_and_stops():
    class Typo(CallsApi):
        def process(self, chunk: Chunk) -> Any:
            chunk.limit("crm")

    with pytest.raises(JobDefinitionError, match=r"names no such resource \(it names: crm-api\)"):
        ChunkEnvironment(Typo, payload={"ids": []}).run()
    stopped = ChunkEnvironment(CallsApi, payload={"ids": [1]})
    stopped.stop()
    with pytest.raises(ChunkStopped):
        stopped.run()
    assert stopped.limits_taken == []


def test_a_whole_job_run_records_each_chunks_limit_calls():
    run = run_job(CallsApi, {})
    assert [call.limits for call in run.calls if call.kind == "chunk"] == [
        [("crm-api", 1), ("crm-api", 1), ("crm-api", 2)],
        [("crm-api", 1), ("crm-api", 2)],
    ]
