"""Spark inside chunks, on a real local SparkSession (started once for this module).

PySpark is imported at the top on purpose: without the ``spark`` extra this module fails
to collect, so a CI run that lost PySpark fails instead of silently skipping Spark.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pyspark  # noqa: F401  - a missing spark extra must fail here, never skip
import pytest
from pyspark.sql import functions as F

from jobs import Chunk, ChunkStopped, LeaseLost
from jobs.spark import (
    COMMIT_MARKER,
    SparkChunkedJob,
    SparkSettings,
    chunk_output_path,
    content_checksum,
    is_committed,
    read_commit,
    spark_session,
    stop_spark,
    write_chunk_output,
)
from jobs.testing import ChunkEnvironment

pytestmark = pytest.mark.spark

#: How long a cancelled Spark job may take to give up; its tasks would sleep for
#: SLEEP_SECONDS, so finishing well inside this shows they were cut short.
CANCEL_BOUND_SECONDS = 20
SLEEP_SECONDS = 600


class LocalSparkJob(SparkChunkedJob):
    spark_master = "local[2]"
    # No UI: other test runs share this machine's ports; few shuffle partitions: tiny data.
    spark_conf = {"spark.ui.enabled": False, "spark.sql.shuffle.partitions": 2}


@pytest.fixture(scope="module")
def spark():
    session = spark_session(SparkSettings.for_job(LocalSparkJob))
    yield session
    stop_spark()


# --------------------------------------------------------------------------- session, groups

SEEN: list[dict[str, Any]] = []


class CountKeys(LocalSparkJob):
    def process(self, chunk: Chunk) -> int:
        with self.job_group(chunk) as group:
            rows = self.spark.range(chunk.payload["lo"], chunk.payload["hi"]).count()
            context = self.spark.sparkContext
            SEEN.append(
                {
                    "session": self.spark,
                    "group": group.id,
                    "property": context.getLocalProperty("spark.jobGroup.id"),
                    "jobs": list(context.statusTracker().getJobIdsForGroup(group.id)),
                }
            )
        return rows


def test_every_chunk_shares_the_session_and_has_its_own_job_group(spark):
    # Given two chunks run one after the other, each by a fresh job instance (as a worker)
    SEEN.clear()
    first = ChunkEnvironment(CountKeys, payload={"lo": 0, "hi": 10}, job_id="keys", index=0)
    second = ChunkEnvironment(CountKeys, payload={"lo": 10, "hi": 15}, job_id="keys", index=1)

    # When they run
    assert (first.run(), second.run()) == (10, 5)

    # Then both used the one session, each inside its own group that ran their job
    assert SEEN[0]["session"] is spark and SEEN[1]["session"] is spark
    assert SEEN[0]["group"] != SEEN[1]["group"]
    for number, seen in enumerate(SEEN):
        assert seen["group"].startswith(f"chunkrunner-keys-{number}-1-")
        assert seen["property"] == seen["group"]
        assert seen["jobs"], "the chunk's Spark job ran in its group"
    # and the group is cleared from the thread once the chunk left it
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None


RUNNING: queue.Queue[str] = queue.Queue()


class SleepyJob(LocalSparkJob):
    """A chunk whose one Spark action would run for SLEEP_SECONDS."""

    def process(self, chunk: Chunk) -> str:
        chunk.checkpoint("started")
        with self.job_group(chunk) as group:
            RUNNING.put(group.id)
            slow = self.spark.range(0, 2, numPartitions=2).rdd.map(
                lambda key: time.sleep(SLEEP_SECONDS) or key
            )
            try:
                slow.count()
            except Exception:
                if not chunk.payload["swallow"]:
                    raise
        return "finished"


def _wait_for_job(spark, group: str) -> None:
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while not tracker.getJobIdsForGroup(group):
        assert time.monotonic() < deadline, "the chunk's Spark job never started"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "trigger, swallow, expected",
    [
        ("stop", False, ChunkStopped),
        # Even when process swallows Spark's error, the group's exit raises.
        ("lose_lease", True, LeaseLost),
    ],
)
def test_a_chunk_that_must_stop_has_its_spark_job_cancelled(spark, trigger, swallow, expected):
    # Given a chunk busy in a long Spark action on its own thread
    env = ChunkEnvironment(SleepyJob, payload={"swallow": swallow})
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            env.run()
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _wait_for_job(spark, RUNNING.get(timeout=60))

    # When the worker stops, or the lease is lost, mid-action
    asked_at = time.monotonic()
    getattr(env, trigger)()
    thread.join(CANCEL_BOUND_SECONDS)

    # Then the action is cancelled at once and the chunk ends with the stop exception
    assert not thread.is_alive(), "the Spark job was not cancelled"
    assert time.monotonic() - asked_at < CANCEL_BOUND_SECONDS
    assert len(outcome) == 1 and isinstance(outcome[0], expected), outcome
    # a stop flushes the newest state; a lost lease writes nothing more
    assert env.durable == (["started"] if trigger == "stop" else [])
    # and the session goes on serving other chunks
    assert spark.range(3).count() == 3


class NeverStarts(LocalSparkJob):
    entered = False

    def process(self, chunk: Chunk) -> None:
        with self.job_group(chunk):
            NeverStarts.entered = True


def test_a_chunk_already_stopping_starts_no_spark_work(spark):
    env = ChunkEnvironment(NeverStarts)
    env.stop()

    with pytest.raises(ChunkStopped):
        env.run()
    assert not NeverStarts.entered


# --------------------------------------------------------------------------- chunk output


def _orders(spark, first: int, last: int):
    return spark.range(first, last).select(
        F.col("id").alias("order_id"),
        (F.col("id") % 7).cast("string").alias("region"),
        F.when(F.col("id") % 5 == 0, None).otherwise(F.col("id") * 1.5).alias("amount"),
    )


def test_writing_a_chunk_twice_replaces_it_and_commits_it(spark, tmp_path):
    path = chunk_output_path(str(tmp_path / "out"), "orders-1", 3)
    orders = _orders(spark, 0, 100)

    first = write_chunk_output(orders, path)
    again = write_chunk_output(orders, path)  # a re-run of the same chunk

    back = spark.read.parquet(path)
    assert back.count() == 100 and back.distinct().count() == 100  # once, not twice
    assert first == again and first.rows == 100
    assert first.checksum == content_checksum(orders)
    assert is_committed(path) and read_commit(path) == first


def test_chunk_checksums_add_up_to_the_whole(spark, tmp_path):
    base = str(tmp_path / "out")
    commits = [
        write_chunk_output(_orders(spark, lo, hi), chunk_output_path(base, "j", index))
        for index, (lo, hi) in enumerate([(0, 40), (40, 100)])
    ]

    assert sum(c.rows for c in commits) == 100
    assert sum(int(c.checksum) for c in commits) == int(content_checksum(_orders(spark, 0, 100)))
    assert content_checksum(_orders(spark, 0, 99)) != content_checksum(_orders(spark, 0, 100))


def test_a_failed_write_leaves_the_chunk_uncommitted(spark, tmp_path):
    path = chunk_output_path(str(tmp_path / "out"), "j", 0)
    write_chunk_output(_orders(spark, 0, 10), path)
    failing = _orders(spark, 0, 10).withColumn(
        "order_id",
        F.when(F.col("order_id") == 5, F.raise_error(F.lit("bad row"))).otherwise(
            F.col("order_id")
        ),
    )

    with pytest.raises(Exception, match="bad row"):
        write_chunk_output(failing, path)

    assert not is_committed(path)


def test_uri_outputs_go_through_the_hadoop_file_system(spark, tmp_path):
    path = chunk_output_path((tmp_path / "out").as_uri(), "j", 1)

    commit = write_chunk_output(_orders(spark, 0, 10), path, format="json", checksum=False)

    assert commit.rows == 10 and commit.checksum is None
    assert read_commit(path, spark=spark) == commit
    assert (tmp_path / "out" / "j" / "chunk-000001" / COMMIT_MARKER).is_file()
    assert spark.read.schema(_orders(spark, 0, 1).schema).json(path).count() == 10
