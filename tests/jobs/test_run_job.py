"""``jobs.testing.run_job``: a whole job through the runner's own code in this process,
with workers killed at chosen points and resumed, retries, poison, the report — and
the progress, publications and chunk.limit calls it reports."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.errors import LeaseLost
from checkpoint.records import Progress
from checkpoint.store import CheckpointStore
from jobs.backoff import Backoff
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.summary import JobSummary
from jobs.testing import CrashAt, JobDidNotFinish, JobRun, run_job
from runner.worker.tasks.plan import PAGE_CHUNKS
from tests.jobs.harness_jobs import CallsApi, CountRows, Publishes, SaysProgress


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
    # Adaptive, nothing learned yet: the lease is the class's lower bound.
    waited = (resumed.started_on - crashed.started_on).total_seconds()
    assert waited == CountRows.lease_bounds[0]
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


class CountRowsUnderALongLease(CountRows):
    """Renewed only once in 20 s: no renewal's refresh writes state 10 before the crash."""

    lease_seconds = 30


def test_a_crash_after_process_returned_redoes_the_work_since_the_last_durable_state():
    # Given two seconds per checkpoint: checkpoints 3, 6 and 9 are written (interval 5),
    # then process returns with state 10, and its worker dies before recording it done
    run = run_job(
        CountRowsUnderALongLease, {"rows": 10}, crash=CrashAt(chunk=0), checkpoint_seconds=2
    )

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
    # Given planning killed after its first page of chunks was recorded and sent
    total = PAGE_CHUNKS + 50
    run = run_job(Tiny, {"chunks": total}, crash=CrashAt.planning(payloads=PAGE_CHUNKS + 20))

    # Then the first window of those chunks ran while planning waited for its lease (the
    # feeder has nothing more to send until planning says what it recorded); planning
    # ran split again from the start (its progress was not yet durable), recognised the
    # recorded page and sent the window's messages again: the duplicates were deleted
    # unrun
    plans = [call for call in run.calls if call.kind == "plan"]
    assert [call.passed for call in plans] == [PAGE_CHUNKS + 20, total]
    assert run.assert_done().total == total
    assert run.results == list(range(total))
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


def test_run_job_reports_the_progress_said_and_stored():
    run = run_job(SaysProgress, {"chunks": 2}, crash=CrashAt(chunk=1, checkpoint=4))

    run.assert_done()
    crashed, resumed = run.chunks[1].calls
    assert crashed.progress == [Progress(step / 10, step, 10) for step in range(1, 5)]
    assert resumed.started_from == 4 and resumed.progress[0] == Progress(0.5, 5, 10)
    assert run.chunks[0].progress == Progress(0.9, 9, 10)  # stored with the last state
    assert run.planning is not None and run.planning.progress is None


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


def test_a_whole_job_run_records_each_chunks_limit_calls():
    run = run_job(CallsApi, {})
    assert [call.limits for call in run.calls if call.kind == "chunk"] == [
        [("crm-api", 1), ("crm-api", 1), ("crm-api", 2)],
        [("crm-api", 1), ("crm-api", 2)],
    ]
