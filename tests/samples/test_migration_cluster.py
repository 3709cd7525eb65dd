"""``make demo-cluster`` at a small size: the migration on a loopback Spark cluster.

One run of :func:`samples.migration.demo.run_cluster_demo` for the module: a master, two
1-core workers and a Spark Connect server (the session's shared cluster, the demo's
shape: tests/shared_cluster.py); two runner workers as Connect clients; one runner
worker *and* one Spark worker SIGKILLed mid-run; the chunk resumed; the output checked
against a one-shot run (a local driver in this process). Everything the demo started is
stopped by it; the cluster, one worker short, is stopped after the module.

PySpark (with its Connect client) and Java are required: a missing one fails, never skips.
"""

from __future__ import annotations

from pathlib import Path

import pyspark  # noqa: F401  - a missing spark extra must fail here, never skip
import pytest

from jobs.spark import ATTEMPTS_DIR, COMMIT_MARKER, read_commit, stop_spark
from samples.migration.cluster import LoopbackCluster
from samples.migration.demo import DemoOptions, DemoResult, run_cluster_demo

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.timeout(900)]

ROWS = 60_000
FILES = 6  # chunks of 4 and 2 files, a batch per file: room to kill between checkpoints

Run = tuple[DemoResult, list[str], Path]


@pytest.fixture(scope="module")
def demo(
    tmp_path_factory: pytest.TempPathFactory, loopback_cluster_to_damage: LoopbackCluster
) -> Run:
    workdir = tmp_path_factory.mktemp("migration-cluster")
    said: list[str] = []
    try:
        result = run_cluster_demo(
            DemoOptions(None, ROWS, FILES, timeout_seconds=600),
            workdir,
            say=said.append,
            cluster=loopback_cluster_to_damage,
        )
    except BaseException:
        print("\n".join(said))  # what it did so far, and the workers' log tails
        raise
    finally:
        stop_spark()  # the one-shot check's local session
    return result, said, workdir


def test_the_cluster_demo_equals_the_one_shot_run(demo: Run):
    result, said, _ = demo
    assert result.verdict.ok, "\n".join(said)
    assert "VERDICT: the chunked, crash-resumed migration equals the one-shot run" in said
    assert result.summary["rows_in"] == result.generated.rows == ROWS
    # And the output names the cluster, the workers' Connect remote and the one-shot's driver
    text = "\n".join(said)
    assert "Spark cluster: master spark://127.0.0.1:" in text
    assert "Spark Connect server sc://127.0.0.1:" in text
    assert text.count("--spark-remote sc://127.0.0.1:") == 3  # two workers and the replacement
    assert "(a classic driver in this process, master local[*])" in text


def test_a_runner_worker_and_a_spark_worker_were_killed(demo: Run):
    result, said, _ = demo
    crash, spark_kill = result.crash, result.spark_kill
    # Then a runner worker was SIGKILLed holding a chunk past its first checkpoint
    assert crash is not None, "\n".join(said)
    assert 1 <= crash.batch < crash.of
    assert result.exit_codes[crash.worker] == -9
    assert all(code == 0 for name, code in result.exit_codes.items() if name != crash.worker)
    # And a Spark worker with its executor, which the master then listed dead
    assert spark_kill is not None
    assert len(spark_kill.pids) >= 2  # the Worker JVM and the server's executor on it
    assert len(spark_kill.alive_before) == 2 and len(spark_kill.alive_after) == 1
    assert spark_kill.noticed_seconds is not None
    assert any("Lost executor" in line for line in spark_kill.log_lines), spark_kill.log_lines
    assert [pid for pid in spark_kill.pids if running(pid)] == []


def running(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_killed_chunk_resumed_from_its_checkpoint(demo: Run):
    result, said, _ = demo
    crash = result.crash
    assert crash is not None, "\n".join(said)
    (line,) = [chunk for chunk in result.summary["per_chunk"] if chunk["index"] == crash.chunk]
    assert line["attempt"] >= 2
    assert crash.batch <= line["resumed_at_batch"] <= line["of"]
    others = [chunk for chunk in result.summary["per_chunk"] if chunk["index"] != crash.chunk]
    assert all(chunk["resumed_at_batch"] == 0 for chunk in others)


def test_no_stray_output_beside_the_committed_batches(demo: Run):
    # The killed client's last query ran in the server, not in the client: whatever it
    # wrote went to its attempt's own directory, never published, and swept by finalize
    result, _, workdir = demo
    outputs = result.manifest["outputs"]
    assert len(outputs) == 2 * FILES
    assert all(read_commit(entry["path"]).attempt == entry["attempt"] for entry in outputs)
    root = workdir / "output" / result.job_id
    on_disk = {str(path.parent) for path in root.rglob(COMMIT_MARKER)}
    assert on_disk == {entry["path"] for entry in outputs}
    assert {path.parent for path in root.rglob("*.parquet")} <= {Path(p) for p in on_disk}
    assert not list(root.rglob(ATTEMPTS_DIR))
