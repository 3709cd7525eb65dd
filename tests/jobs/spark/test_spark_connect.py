"""Spark inside chunks through Spark Connect: the worker a thin client of a real server.

The server is a loopback cluster's Spark Connect server (a standalone master, two 1-core
Spark workers, a Connect server attached to the master, all on 127.0.0.1): the test
session's shared cluster (tests/shared_cluster.py). Each test talks to it as a worker
does: :func:`jobs.spark.spark_session` with a remote, no JVM in this process for the
session.

PySpark is imported at the top on purpose: without the ``spark`` extra this module fails
to collect, so a CI run that lost PySpark fails instead of silently skipping Spark.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyspark  # noqa: F401  - a missing spark extra must fail here, never skip
import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F

import jobs.spark.chunk_output
from jobs import Chunk, ChunkStopped, LeaseLost
from jobs.chunk import Takeover
from jobs.errors import MetricsUnavailable
from jobs.spark import (
    COMMIT_MARKER,
    REMOTE_ENV,
    SparkChunkedJob,
    SparkSettings,
    chunk_output_path,
    content_checksum,
    default_parallelism,
    finalize_outputs,
    is_connect,
    observed_metrics,
    read_commit,
    spark_session,
    stop_spark,
    write_chunk_output,
)
from jobs.spark.chunk_output import attempt_path
from jobs.spark.output_files import LocalFiles, SparkFiles, files_for
from jobs.spark.reaper import reap
from jobs.spark.session import connect_session_text
from jobs.summary import JobSummary
from jobs.testing import ChunkEnvironment
from samples.migration.cluster import LoopbackCluster
from tests.e2e.processes import ROOT, Worker, runner_command, wait_until
from tests.jobs import output_races
from tests.jobs.connect_jobs import ReapedChunk, endless_action, tagged_active_tasks
from tests.jobs.output_races import OutputJob, attempts_of, chunk_of
from tests.jobs.spark_jobs import orders_frame, run_in_thread
from tests.shared_cluster import connect_ui_url

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

#: How long an interrupted Spark action may take to give up; it would otherwise run
#: for hours (a sum over 10^13 rows), so ending well inside this shows it was cut short.
CANCEL_BOUND_SECONDS = 30
#: A session connected to the server, as a worker's; its conf says what it may change.
CONF = {"spark.sql.shuffle.partitions": "3", "spark.ui.enabled": "false"}


# `loopback_cluster` is the session's shared cluster (tests/conftest.py).


@pytest.fixture(scope="module")
def driver_ui(loopback_cluster: LoopbackCluster) -> str:
    """The Connect server's driver UI: its REST API shows whether a job's tasks ended."""
    return connect_ui_url(loopback_cluster)


@pytest.fixture(scope="module")
def connect_remote(loopback_cluster: LoopbackCluster) -> str:
    assert loopback_cluster.remote_url is not None
    return loopback_cluster.remote_url


@pytest.fixture(scope="module")
def settings(connect_remote: str):
    """The module's Connect settings; its session stopped at the end."""
    yield SparkSettings(remote=connect_remote, conf={**CONF})
    stop_spark()


@pytest.fixture
def spark(settings: SparkSettings):
    """This process's Connect session (built again if a test stopped it)."""
    return spark_session(settings)


# --------------------------------------------------------------------------- the session


def test_a_remote_makes_a_thin_connect_client_with_the_runtime_conf(spark, settings):
    assert is_connect(spark)
    assert spark.conf.get("spark.sql.shuffle.partitions") == "3"  # runtime conf: applied
    assert spark.range(5).count() == 5
    assert spark_session(settings) is spark


def test_default_parallelism_is_the_clusters_cores(spark, loopback_cluster):
    cores = loopback_cluster.workers * loopback_cluster.cores_per_worker
    assert default_parallelism(spark) == cores


def test_conf_the_server_refuses_is_named_once_unless_only_a_drivers(caplog):
    from jobs.spark import session as module

    settings = SparkSettings(remote="sc://example:1")
    with caplog.at_level(logging.DEBUG, logger="jobs.spark"):
        module._log_refused_conf(
            settings, ["spark.ui.enabled", "spark.ui.showConsoleProgress", "spark.executor.memory"]
        )

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "spark.executor.memory" in warnings[0]
    assert "spark.ui.enabled" not in warnings[0]


WORKER_PROBE = """
import json, os, sys
from jobs.spark import SparkSettings, default_parallelism, is_connect, spark_session, stop_spark
import pyspark
spark = spark_session(SparkSettings.for_job())
rows = spark.range(1000).count()
children = []
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            children.append(open(f"/proc/{entry}/comm").read().strip())
print(json.dumps({"connect": is_connect(spark), "rows": rows, "children": children,
                  "gateway": pyspark.SparkContext._gateway is not None}))
stop_spark()
"""


def test_a_worker_with_a_remote_runs_no_jvm(connect_remote):
    # Given a fresh process configured as `runner start --spark-remote` leaves a worker
    env = {**os.environ, REMOTE_ENV: connect_remote}
    env.pop("RUNNER_SPARK_MASTER", None)

    # When it builds its session and runs a query
    done = subprocess.run(
        [sys.executable, "-c", WORKER_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )

    # Then the query ran on the server, and the worker started no JVM of its own
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"connect": True, "rows": 1000, "children": [], "gateway": False}


def test_stopping_a_connect_session_leaves_classic_objects_classic(spark, settings):
    # pyspark marks the process as Connect when a remote session is built and never
    # unmarks it; stop_spark must, or a later classic session's Observation is Connect's.
    assert os.environ.get("SPARK_CONNECT_MODE_ENABLED") == "1"
    stop_spark()

    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    assert type(Observation()).__module__ == "pyspark.sql.observation"
    # and the next session asked for is a new, live one
    again = spark_session(settings)
    assert again is not spark and again.range(2).count() == 2


# --------------------------------------------------------------------------- tags


class RemoteJob(SparkChunkedJob):
    """A Spark job whose session is the module's (the first built decides)."""


SEEN: list[dict[str, Any]] = []
RUNNING: queue.Queue[str] = queue.Queue()


class TaggedCount(RemoteJob):
    def process(self, chunk: Chunk) -> int:
        with self.job_group(chunk) as group:
            rows = self.spark.range(chunk.payload["rows"]).count()
            SEEN.append({"group": group.id, "tags": set(self.spark.getTags())})
        SEEN.append({"after": set(self.spark.getTags())})
        return rows


def test_a_chunks_spark_work_carries_its_own_tag(spark):
    SEEN.clear()
    env = ChunkEnvironment(TaggedCount, payload={"rows": 7}, job_id="tags", index=2)

    assert env.run() == 7

    inside, after = SEEN
    assert inside["group"].startswith("chunkrunner-tags-2-1-")
    # and the attempt's own tag, which a takeover interrupts
    assert inside["tags"] == {inside["group"], f"chunkrunner-claim-{env.claim}"}
    assert json.loads(env.spark_session or "{}")["session_id"] == spark.session_id
    assert after["after"] == set()  # the tag is gone once the chunk left the block


class EndlessAction(RemoteJob):
    """A chunk whose Spark action would run for hours; its error swallowed when
    ``swallow`` (as careless code would)."""

    def process(self, chunk: Chunk) -> str:
        chunk.checkpoint("started")
        with self.job_group(chunk) as group:
            RUNNING.put(group.id)
            try:
                endless_action(self.spark)
            except Exception:
                if not chunk.payload["swallow"]:
                    raise
        return "finished"


@pytest.mark.parametrize(
    "trigger, swallow, expected",
    [
        ("stop", False, ChunkStopped),
        # Even when process swallows the interruption, leaving the block raises.
        ("lose_lease", True, LeaseLost),
    ],
)
def test_a_chunk_that_must_stop_has_its_tagged_operation_interrupted(
    spark, trigger, swallow, expected
):
    # Given a chunk busy in a Spark action that would run for hours
    env = ChunkEnvironment(EndlessAction, payload={"swallow": swallow})
    thread, outcome = run_in_thread(env)
    RUNNING.get(timeout=60)
    time.sleep(3)  # the action reaches the server

    # When the worker stops, or the lease is lost, mid-action
    asked_at = time.monotonic()
    getattr(env, trigger)()
    thread.join(CANCEL_BOUND_SECONDS)

    # Then the action is interrupted and the chunk ends with the stop exception
    assert not thread.is_alive(), "the Spark Connect operation was not interrupted"
    assert time.monotonic() - asked_at < CANCEL_BOUND_SECONDS
    assert len(outcome) == 1 and isinstance(outcome[0], expected), outcome
    assert env.durable == (["started"] if trigger == "stop" else [])
    # and the session goes on serving other chunks: the cluster's cores are free again
    assert spark.range(3).count() == 3


# --------------------------------------------------------------------------- chunk output


def test_chunk_output_on_a_shared_path_is_observed_and_committed(spark, tmp_path):
    # Loopback: the server's executors and this client share the file system.
    path = chunk_output_path(str(tmp_path / "out"), "orders-1", 3)
    orders = orders_frame(spark, 0, 100)
    env = ChunkEnvironment(OutputJob, job_id="orders-1", index=3)

    first = write_chunk_output(orders, path, chunk=chunk_of(env))
    again = write_chunk_output(orders, path, chunk=chunk_of(env.next_attempt()))

    assert (first.rows, first.checksum) == (again.rows, again.checksum)
    assert first.rows == 100 and first.checksum == content_checksum(orders) != "0"
    assert spark.read.parquet(path).count() == 100
    assert read_commit(path) == again and (Path(path) / COMMIT_MARKER).is_file()
    assert again.path == path  # renamed into place by the client (a shared folder)


def test_a_connect_client_renames_file_urls_and_leaves_other_uris_to_spark(spark, tmp_path):
    # A file:// URL must be a folder the client shares with the cluster, as a plain path
    assert isinstance(files_for((tmp_path / "x").as_uri(), spark), LocalFiles)
    assert isinstance(files_for("abfss://c@a.dfs.core.windows.net/x", spark), SparkFiles)
    path = chunk_output_path((tmp_path / "out").as_uri(), "j", 2)
    env = ChunkEnvironment(OutputJob, job_id="j", index=2)

    commit = write_chunk_output(orders_frame(spark, 0, 5), path, chunk=chunk_of(env))

    assert commit.path == path and read_commit(path, spark=spark) == commit
    assert spark.read.parquet(path).count() == 5


@pytest.mark.parametrize("stage", ["late-write", "before-publish", "after-publish"])
def test_a_dead_attempt_never_touches_the_published_output(spark, tmp_path, stage):
    # Given two attempts of one chunk through the Connect server, the first stalled at
    # ``stage`` while the second runs to the end (tests/jobs/output_races.py)
    out = tmp_path / "out" / "fenced" / "chunk-000003"

    outcome = output_races.race(spark, str(out), attempts_of(out), stage, tmp_path)

    # Then the path holds the second's rows only, equal to a one-shot computation
    output_races.check(outcome, str(out), stage)


def test_a_uri_without_a_file_system_is_published_by_its_marker(spark, tmp_path, monkeypatch):
    # Given a URI the client cannot reach (abfss:// on a real cluster; here a file://
    # URL reached through Spark only, as such a URI would be)
    monkeypatch.setattr(
        jobs.spark.chunk_output, "files_for", lambda path, session: SparkFiles(spark)
    )
    path = chunk_output_path((tmp_path / "out").as_uri(), "j", 1)
    env = ChunkEnvironment(OutputJob, job_id="j", index=1)

    commit = write_chunk_output(orders_frame(spark, 0, 10), path, chunk=chunk_of(env))

    # Then the rows stay in the attempt's directory, which the marker (a text dataset
    # under _COMMITTED/, invisible to readers) names
    assert commit.path == attempt_path(path, env.claim) and commit.rows == 10
    assert read_commit(path, spark=spark) == commit
    assert (tmp_path / "out" / "j" / "chunk-000001" / COMMIT_MARKER).is_dir()
    assert spark.read.parquet(commit.path).count() == 10

    # When a rewrite fails midway, the published output stays as it was
    failing = orders_frame(spark, 0, 10).withColumn(
        "order_id",
        F.when(F.col("order_id") == 5, F.raise_error(F.lit("bad row"))).otherwise(
            F.col("order_id")
        ),
    )
    second = env.next_attempt()
    with pytest.raises(Exception, match="bad row"):
        write_chunk_output(failing, path, chunk=chunk_of(second))
    assert read_commit(path, spark=spark) == commit

    # and a later attempt's write replaces it, the attempt before it emptied
    third = second.next_attempt()
    replaced = write_chunk_output(orders_frame(spark, 0, 4), path, chunk=chunk_of(third))
    assert read_commit(path, spark=spark) == replaced and replaced.rows == 4
    assert spark.read.parquet(replaced.path).count() == 4
    outputs = [(1, third.published())]
    summary = JobSummary("j", 2, 2, lambda: iter(()), _outputs=lambda: iter(outputs))
    assert list(finalize_outputs(summary, spark=spark)) == [(1, path, replaced)]


def test_observed_metrics_come_with_the_action(spark, tmp_path):
    seen = Observation()
    observed = orders_frame(spark, 0, 20).observe(seen, F.count(F.lit(1)).alias("rows"))

    with pytest.raises(MetricsUnavailable):
        observed_metrics(seen)  # no action has run it yet
    observed.write.parquet(str(tmp_path / "out"))

    assert observed_metrics(seen) == {"rows": 20}


# --------------------------------------------------------------------------- a worker


class ConnectRunner:
    """``runner`` commands on a store in ``tmp_path``, and ``runner start --burst``
    workers of ``job`` as Spark Connect clients of ``remote`` (each its own process
    group, its output in ``<name>.log``)."""

    def __init__(self, tmp_path: Path, remote: str, job: str):
        self.tmp_path, self.remote, self.job = tmp_path, remote, job
        self.env = {
            **os.environ,
            "RUNNER_STORAGE": str(tmp_path / "store"),
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("RUNNER_SPARK_MASTER", None)

    def __call__(self, *args: str) -> str:
        return subprocess.run(
            [*runner_command(), *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout

    def start(self, name: str) -> Worker:
        log_path = self.tmp_path / f"{name}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [
                    *runner_command(),
                    "start",
                    self.job,
                    "--burst",
                    "--prefetch",
                    "0",
                    "--spark-remote",
                    self.remote,
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return Worker(name, process, log_path)


def test_a_sigtermed_connect_worker_interrupts_its_chunk_and_hands_it_back(
    spark, connect_remote, tmp_path
):
    # Given a `runner start --spark-remote` worker whose chunk is inside an endless action
    runner = ConnectRunner(tmp_path, connect_remote, "tests.jobs.connect_jobs:EndlessChunk")
    job_id = runner("submit", runner.job, "--params", "{}").strip()
    worker = runner.start("connect-worker")
    try:
        wait_until(
            lambda: "chunk 0 of" in worker.log() or not worker.alive(),
            "the chunk to start",
            timeout=120,
            explain=worker.tail,
        )
        wait_until(
            lambda: json.loads(runner("status", job_id, "--json"))["running"],
            "the chunk's checkpoint",
            timeout=60,
            explain=worker.tail,
        )
        time.sleep(3)  # its action runs on the cluster by now

        # When the worker gets SIGTERM
        sent_at = worker.send(signal.SIGTERM)

        # Then it interrupts the action, hands the chunk back and exits 0 promptly
        assert worker.wait_exit(60) == 0, worker.tail()
        assert time.time() - sent_at < 30, worker.tail()
    finally:
        worker.kill_all()
    assert "cancelling chunkrunner-" in worker.log(), worker.tail()
    status = json.loads(runner("status", job_id, "--json"))
    assert status["chunks"]["done"] == 0 and not status["running"], status
    # and the cluster's cores are free again: nothing of the chunk runs on
    assert spark.range(3).count() == 3


# --------------------------------------------------------------------------- the reaper


def test_a_sigkilled_connect_workers_action_is_reaped_by_its_replacement(
    spark, connect_remote, driver_ui, tmp_path
):
    # Given a `runner start --spark-remote` worker whose chunk is in a long batch write
    runner = ConnectRunner(tmp_path, connect_remote, "tests.jobs.connect_jobs:ReapedChunk")
    job, start = runner.job, runner.start

    output = tmp_path / "out" / "chunk-000000"  # a folder the server's executors share
    job_id = runner("submit", job, "--params", json.dumps({"output": str(output)})).strip()
    first_attempt = f"Tag_chunkrunner-{job_id}-0-1-"  # its operations' job tags hold it
    dead, replacement = start("dead"), None
    try:
        wait_until(
            lambda: tagged_active_tasks(driver_ui, first_attempt) == 2 or not dead.alive(),
            "the action's two tasks to run",
            timeout=180,
            explain=dead.tail,
        )

        # When it is SIGKILLed and a replacement starts at once
        killed_at = time.monotonic()
        dead.kill_all()
        replacement = start("replacement")

        # Then the dead action's tasks end within the lease and 10 s
        wait_until(
            lambda: tagged_active_tasks(driver_ui, first_attempt) == 0,
            "the dead action's tasks to end",
            timeout=180,
            explain=replacement.tail,
        )
        ended_after = time.monotonic() - killed_at
        assert replacement.wait_exit(120) == 0, replacement.tail()
    finally:
        dead.kill_all()
        if replacement is not None:
            replacement.kill_all()
    print(f"SIGKILL to the dead action's last task: {ended_after:.1f} s")
    assert ended_after <= ReapedChunk.lease_seconds + 10, replacement.tail()
    # and the replacement logged what it interrupted before its own Spark work
    assert "chunk 0 of " + job_id + ": reaped the previous attempt: interrupted" in (
        replacement.log()
    ), replacement.tail()
    status = json.loads(runner("status", job_id, "--json"))
    assert status["chunks"]["done"] == 1, status
    # and only the replacement's write is published: the dead one's directory is gone
    published = read_commit(str(output))
    assert published is not None and published.rows == 2, published
    assert [entry.name for entry in attempts_of(output).iterdir()] == []
    assert spark.read.parquet(str(output)).count() == 2


def test_a_released_session_is_refused_and_its_worker_hands_back_and_reconnects(
    spark, settings, connect_remote
):
    # Given this process's session with a chunk inside a long action (a stalled worker's)
    env = ChunkEnvironment(EndlessAction, payload={"swallow": False})
    thread, outcome = run_in_thread(env)
    RUNNING.get(timeout=60)
    time.sleep(3)  # the action reaches the server
    recorded = connect_session_text()
    assert recorded is not None and env.spark_session == recorded

    # When a takeover that finds this worker gone reaps the session
    reaped = reap(
        Takeover("elsewhere:1:x", "some-claim", recorded, owner_gone=True), connect_remote
    )

    # Then its operation was interrupted and the session released
    assert reaped is not None and reaped.released and len(reaped.interrupted) == 1
    assert reaped.still_running == ()
    # and the chunk is handed back, not failed
    thread.join(CANCEL_BOUND_SECONDS)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ChunkStopped), outcome
    # and the old session's next call is refused by the server
    with pytest.raises(Exception, match="INVALID_HANDLE.SESSION_CLOSED"):
        spark.range(3).count()
    # and the process's next session is a new one that works
    again = spark_session(settings)
    assert again is not spark and again.range(3).count() == 3
