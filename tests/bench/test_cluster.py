"""The cluster benchmark still runs: its report from fake rounds, and its crash runs for
real at a tiny size in local mode.

The report tests use fake timings. The Spark test kills a chunkrunner worker mid-run,
restarts it, and checks the output against the one-shot run's: the bench's own code, on
``local[*]`` (no cluster: the cluster and its Connect server are the benchmark's, and
tests/samples/test_spark_cluster.py tests the launcher). The Structured Streaming driver's crash
run is `make bench`'s; tests/bench/test_streaming.py tests how its run is checked.
Nothing here asserts a time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from samples.migration.generate import Generated
from samples.migration.layout import MigrationParams
from tests.bench import cluster, cluster_report, crash, migration, migration_child
from tests.bench.cluster_report import Round
from tests.bench.crash import Crashed, KillPoint
from tests.bench.migration_report import Timed
from tests.bench.rss import ProcessPeak, TreePeaks
from tests.bench.spark_target import spark_target
from tests.bench.streaming import Streamed

MIB = 1024


def _timed(seconds: float, python_mib: int = 150, jvm_mib: int = 0) -> Timed:
    root = ProcessPeak(1, "python", "python runner start", python_mib * MIB, seconds / 10)
    jvm = (
        {
            2: ProcessPeak(
                2, "java", "java org.apache.spark.deploy.SparkSubmit", jvm_mib * MIB, seconds
            )
        }
        if jvm_mib
        else {}
    )
    return Timed(seconds, TreePeaks(root, jvm, (python_mib + jvm_mib) * MIB))


def _round(number: int, chunked: float, plain: float) -> Round:
    return Round(
        number,
        chunked=_timed(chunked),
        plain=_timed(plain),
        warm_up=_timed(plain * 1.5),
        streamed=Streamed(
            _timed(plain * 1.3, 50, 1200),
            [{"batch": n, "started": 0.0, "seconds": 4.0 + n} for n in range(8)],
        ),
        local=_timed(chunked * 1.2, 55, 1240),
        first_batch_seconds=4.0,
        local_first_batch_seconds=11.0,
        first_checkpoint_seconds=6.0,
        local_first_checkpoint_seconds=17.0,
    )


def _data() -> migration.Input:
    made = Generated(
        "orders-v1", tuple(f"f{n}" for n in range(24)), 2_000_000, 339_000_000, 1_700_000, 8_000
    )
    return migration.Input("/tmp/store", made, {"files_per_batch": 3}, 8, 8)


def test_target_is_the_ratio_of_medians_and_says_by_how_much_it_is_missed():
    met = [_round(1, 42.0, 40.0), _round(2, 40.0, 41.0), _round(3, 60.0, 39.0)]
    assert "1.05x: met." in cluster_report.target_line(met)
    missed = [_round(1, 48.0, 40.0)]
    assert "1.20x: **not met** (by 9%)" in cluster_report.target_line(missed)


def test_report_has_every_table_and_says_how_it_was_measured():
    rounds = [_round(1, 44.0, 40.0), _round(2, 46.0, 41.0)]
    point = Crashed(_timed(70.0), 30.0, 4, 1, 5.5, "chunk 4 attempt 2 resumed at batch 0 of 1")
    text = "\n".join(
        cluster_report.report(
            _data(), rounds, {"chunked": point}, "Load: ...", "`python -m x`", "Machine: ...", 3
        )
    )
    assert text.startswith("Machine: ...\nLoad: ...\nCommand: `python -m x`. 2 round(s)")
    assert "through the same Connect server" in text and "**8 chunks**" in text
    assert "`runner start --workers 2 --prefetch 0 --burst` (2 worker processes)" in text
    assert "client sessions share compiled code" in text
    # The worker's memory: a Connect client has no JVM, a local worker has one
    assert "| Connect client (`RUNNER_SPARK_REMOTE`), no JVM | 150 (150-150) | 0 (0-0) |" in text
    assert "| local mode (`local[*]`, its own JVM) | 55 (55-55) | 1,240 (1,240-1,240) |" in text
    assert "| Connect client, warm shared server | 4.0 (4.0-4.0) | 6.0 (6.0-6.0) |" in text
    # Streaming against ours, per round and the medians; its slowest and median batch
    assert "| 1 | 44.0 | 52.0 | 1.18x | 57.2 | 11.0 / 7.5 |" in text
    assert "| **median** | **45.0** | **52.7** | **1.17x** | | |" in text
    # The crash against the side's own uninterrupted median
    assert (
        "| chunked through Connect, a worker SIGKILLed | 45.0 | 70.0 | +25.0 | 30.0 "
        "| 4 of 8 | 1 | 5.5 |"
    ) in text
    assert "SIGKILLed: chunk 4 attempt 2 resumed at batch 0 of 1." in text
    assert "checked too: every staged file read by exactly one committed micro-batch" in text
    # What a restart does to the stream's micro-batches: only under a streaming crash
    assert cluster_report.STREAMING_RESTART not in text
    streamed = Crashed(_timed(90.0), 40.0, 2, 0, 0.0, "2 committed, 2 planned and 3 ...")
    text = "\n".join(
        cluster_report.report(
            _data(), rounds, {"chunked": point, "streaming": streamed}, "", "", "", 2
        )
    )
    assert text.endswith("2 planned and 3 ....\n\n" + cluster_report.STREAMING_RESTART)


def test_first_batch_comes_from_the_worker_log(tmp_path: Path):
    log = tmp_path / "worker-1.log"
    log.write_text(
        "2026-11-25 19:24:26,912 INFO runner.worker.supervisor: worker serving\n"
        "a line without a stamp\n"
        "2026-11-25 19:24:35,412 INFO samples.migration.job: chunk 0 batch 1 of 1: 5001 "
        "rows in, 4148 out, 18 rejected (7.9 s)\n"
        "2026-11-25 19:24:39,000 INFO samples.migration.job: chunk 1 batch 1 of 1: 5001 "
        "rows in, 4097 out, 19 rejected (3.2 s)\n"
    )
    first, to_checkpoint = cluster.first_batch(tmp_path)
    assert first == 7.9 and to_checkpoint == pytest.approx(8.5)
    assert crash.batch_seconds(log) == [7.9, 3.2]


def test_the_command_is_make_bench_only_for_the_runs_make_bench_makes():
    assert cluster.command_line(cluster.parse_args([])) == (
        "`make bench` (`python -m tests.bench.cluster --rows 2000000 --runs 3`)"
    )
    large = ["--rows", "8000000", "--runs", "2", "--no-streaming", "--no-local", "--no-crash"]
    assert cluster.command_line(cluster.parse_args(large)).startswith("`make bench` (")
    assert cluster.command_line(cluster.parse_args(["--quick", "--no-crash"])) == (
        "`python -m tests.bench.cluster --rows 100000 --runs 1 --no-crash`"
    )
    # Runs other than the setting say so, and are never called make bench's
    other = ["--workers", "1", "--isolate-sessions", "--connect-conf", '{"a": "b"}']
    assert cluster.command_line(cluster.parse_args(other)) == (
        "`python -m tests.bench.cluster --rows 2000000 --runs 3 --isolate-sessions "
        '--workers 1 --connect-conf \'{"a": "b"}\'`'
    )


def test_an_isolated_server_is_said_to_compile_per_session():
    text = "\n".join(
        cluster_report.report(
            _data(), [_round(1, 44.0, 40.0)], {}, "", "", "", 1, workers=1, isolated_sessions=True
        )
    )
    assert "(1 worker process)" in text and "forces per-session artifact isolation" in text


def test_spark_target_sets_and_restores_the_environment(monkeypatch):
    monkeypatch.setenv("RUNNER_SPARK_MASTER", "local[1]")
    monkeypatch.delenv("RUNNER_SPARK_REMOTE", raising=False)
    with spark_target(RUNNER_SPARK_REMOTE="sc://127.0.0.1:1", RUNNER_SPARK_MASTER=None):
        assert os.environ["RUNNER_SPARK_REMOTE"] == "sc://127.0.0.1:1"
        assert "RUNNER_SPARK_MASTER" not in os.environ
    assert os.environ["RUNNER_SPARK_MASTER"] == "local[1]"
    assert "RUNNER_SPARK_REMOTE" not in os.environ


@pytest.mark.spark
@pytest.mark.timeout(900)  # Spark processes one after another; ~1 min unloaded
def test_a_sigkilled_worker_resumes_and_matches_the_one_shot_run(tmp_path: Path, local_spark):
    # The streaming side's crash run is left to `make bench` (which checks its output
    # too). Its "micro-batch short" here once was a kill between the file source's log
    # and the offsets log: the restart merged two micro-batches, every file read once
    # (tests/bench/test_streaming.py). This test keeps to our own side. The one-shot run
    # and the check are the bench's own functions, on this process's local session
    # rather than in child processes of their own (two JVM starts fewer: `make bench`
    # runs the children).
    # Given a tiny input (24 files, 8 chunks of 3), its one-shot run
    data = migration.prepare(tmp_path, 2_400, 3)
    rundir = tmp_path / "run"
    rundir.mkdir()
    params = MigrationParams.of(data.params)
    with spark_target(RUNNER_STORAGE=data.store):
        migration_child.one_shot(params, rundir / "one-shot")

    # When a chunkrunner worker is SIGKILLed after 2 batches, a second one finishes
    point = KillPoint(after_batches=2, delay_seconds=0.0)
    chunked, job_id = crash.run_chunked_crash(data, rundir, point)

    # Then at most one batch was redone, and the output equals the one-shot's
    assert chunked.committed >= 2 and chunked.redone <= 1
    with spark_target(RUNNER_STORAGE=data.store):
        found = migration_child.check(params, job_id, rundir / "one-shot")
    assert found["ok"], "\n".join(found["lines"])
    assert found["summary"] == {
        "chunks": data.chunks,
        "rows_in": data.generated.rows,
        "rows_out": data.generated.orders,
        "rows_rejected": data.generated.rejects,
    }
