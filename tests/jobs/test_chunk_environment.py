"""``jobs.testing.ChunkEnvironment``: one chunk's ``process`` as a worker runs it —
checkpoints and their durability on a FakeClock, simulated lease loss and worker stop,
failures, the next attempt, planning and finalize, progress, publications, chunk.limit.
That it behaves exactly as the runner's TaskControl: test_chunk_environment_parity.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from checkpoint.clock import FakeClock
from checkpoint.errors import CodecError, LeaseLost
from checkpoint.records import Progress
from jobs.chunk import Chunk, ChunkControl
from jobs.errors import ChunkStopped, JobDefinitionError
from jobs.job import ChunkedJob
from jobs.summary import JobSummary
from jobs.testing import ChunkEnvironment
from tests.jobs.harness_jobs import CallsApi, CountRows, Publishes, SaysProgress, count_rows_env


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
    env = count_rows_env()
    assert env.run() == {"last": 10, "seen": list(range(10))}
    assert env.result == {"last": 10, "seen": list(range(10))}
    assert env.checkpoints == list(range(1, 11))


def test_durable_checkpoints_follow_the_interval_then_the_final_flush():
    # Given one checkpoint per second and a 5 s interval (the claim counts as a write)
    env = count_rows_env()
    env.run()
    # Then the checkpoint offered at 5 s was written, and the newest at the end
    assert env.durable == [6, 10]
    assert env.durable_state == 10


def test_a_zero_interval_makes_every_checkpoint_durable():
    env = count_rows_env(checkpoint_interval_seconds=0)
    env.run()
    assert env.durable == list(range(1, 11))


def test_no_time_passing_means_only_the_final_flush_is_durable():
    env = count_rows_env(on_checkpoint=None)
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
    env = count_rows_env()
    env.run()
    with pytest.raises(RuntimeError, match="next_attempt"):
        env.run()


def test_it_is_a_chunk_control():
    control: ChunkControl = count_rows_env()
    assert control.stopping is False


# --------------------------------------------------------------------------- lease loss


def test_lose_lease_after_n_checkpoints_raises_at_the_next_one_without_writing():
    env = count_rows_env()
    env.lose_lease_after(3)
    with pytest.raises(LeaseLost, match="simulated"):
        env.run()
    assert env.checkpoints == [1, 2, 3, 4]  # the fourth was offered, then refused
    assert env.durable == []  # nothing written after the loss, nor flushed
    assert env.durable_state is None
    assert env.result is None


def test_losing_the_lease_after_durable_writes_keeps_only_those():
    env = count_rows_env()
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

    env = count_rows_env(clock, on_checkpoint=at_checkpoint)
    with pytest.raises(LeaseLost, match="another worker claimed it"):
        env.run()
    assert env.checkpoints[-1] == 6
    assert env.durable == []


def test_lease_lost_before_the_start_stops_the_first_checkpoint():
    env = count_rows_env()
    env.lose_lease_after(0)
    assert env.stopping is True
    with pytest.raises(LeaseLost):
        env.run()
    assert env.checkpoints == [1]


def test_a_lost_lease_refuses_a_due_write_from_offer_itself():
    env = count_rows_env(checkpoint_interval_seconds=0)
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
    env = count_rows_env()
    env.stop_after(3)
    with pytest.raises(ChunkStopped):
        env.run()
    assert env.checkpoints == [1, 2, 3, 4]
    assert env.durable == [4]  # flushed before stopping, although no interval passed
    assert env.durable_state == 4


def test_stop_from_a_callback():
    clock = FakeClock()
    env = count_rows_env(
        clock, on_checkpoint=lambda state: env.stop() if state == 7 else clock.advance(1)
    )
    with pytest.raises(ChunkStopped):
        env.run()
    assert env.durable == [6, 8]


def test_stop_before_the_start_stops_at_the_first_checkpoint():
    env = count_rows_env()
    env.stop_after(0)
    assert env.stopping is True
    with pytest.raises(ChunkStopped):
        env.run()
    assert env.durable == [1]


def test_a_lost_lease_wins_over_a_stop():
    env = count_rows_env()
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
    first = count_rows_env()
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
    first = count_rows_env()
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


# --------------------------------------------------------------------------- progress=


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


# --------------------------------------------------------------------------- publish


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
