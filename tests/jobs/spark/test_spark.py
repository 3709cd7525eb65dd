"""Spark inside chunks, on a real local SparkSession (started once for this module).

PySpark is imported at the top on purpose: without the ``spark`` extra this module fails
to collect, so a CI run that lost PySpark fails instead of silently skipping Spark.
"""

from __future__ import annotations

import datetime as dt
import queue
import time
from dataclasses import asdict
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pyspark  # noqa: F401  - a missing spark extra must fail here, never skip
import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

import jobs.spark.output_metrics
from jobs import Chunk, ChunkStopped, LeaseLost
from jobs.errors import MetricsUnavailable
from jobs.spark import (
    COMMIT_MARKER,
    EXACT_FORMATS,
    SparkChunkedJob,
    chunk_output_path,
    content_checksum,
    is_committed,
    observed_metrics,
    read_commit,
    write_chunk_output,
)
from jobs.spark.output_files import HadoopFiles, SparkFiles
from jobs.summary import JobSummary
from jobs.testing import ChunkEnvironment
from samples.migration.job import SPARK_CONF
from tests.jobs import output_races
from tests.jobs.output_races import OutputJob, attempts_of, chunk_of
from tests.jobs.spark_jobs import orders_frame, run_in_thread, spark_jobs

pytestmark = pytest.mark.spark

#: How long a cancelled Spark job may take to give up; its tasks would sleep for
#: SLEEP_SECONDS, so finishing well inside this shows they were cut short.
CANCEL_BOUND_SECONDS = 20
SLEEP_SECONDS = 600


class LocalSparkJob(SparkChunkedJob):
    # The settings of the run's one local session (tests/conftest.py): no UI, as other
    # test runs share this machine's ports, and few shuffle partitions for tiny data.
    spark_conf = SPARK_CONF


@pytest.fixture
def spark(local_spark):
    return local_spark


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
    thread, outcome = run_in_thread(env)
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


class SleepyFinalize(LocalSparkJob):
    """A finalize whose one Spark action would run for SLEEP_SECONDS."""

    def finalize(self, params: Any, summary: JobSummary) -> None:
        with self.job_group(summary) as group:
            RUNNING.put(group.id)
            self.spark.range(0, 2, numPartitions=2).rdd.map(
                lambda key: time.sleep(SLEEP_SECONDS) or key
            ).count()


def test_a_finalize_that_loses_its_lease_has_its_spark_job_cancelled(spark):
    # Given finalize busy in a long Spark action on its own thread, under a lease
    lease = ChunkEnvironment(SleepyFinalize, job_id="fenced")
    summary = JobSummary("fenced", 0, 0, lambda: iter(()), lease)
    thread, outcome = run_in_thread(
        SimpleNamespace(run=lambda: SleepyFinalize().finalize(None, summary))
    )
    group = RUNNING.get(timeout=60)
    assert group.startswith("chunkrunner-fenced-finalize-")
    _wait_for_job(spark, group)

    # When its lease is lost (another worker may run finalize now)
    asked_at = time.monotonic()
    lease.lose_lease()
    thread.join(CANCEL_BOUND_SECONDS)

    # Then its Spark job is cancelled at once and finalize ends with LeaseLost
    assert not thread.is_alive(), "the Spark job was not cancelled"
    assert time.monotonic() - asked_at < CANCEL_BOUND_SECONDS
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLost), outcome
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


def attempt() -> Chunk:
    """A chunk's first attempt, for a write outside ``process``."""
    return chunk_of(ChunkEnvironment(OutputJob, job_id="orders-1", index=3))


def test_a_chunk_output_is_published_and_renamed_into_place(spark, tmp_path):
    path = chunk_output_path(str(tmp_path / "out"), "orders-1", 3)
    env = ChunkEnvironment(OutputJob, job_id="orders-1", index=3)

    commit = write_chunk_output(orders_frame(spark, 0, 100), path, chunk=chunk_of(env))

    assert commit.attempt == env.claim and commit.path == path
    assert env.published() == {path: asdict(commit)}  # the fenced record readers follow
    assert read_commit(path) == commit
    assert spark.read.parquet(path).count() == 100
    assert output_races._leftovers(attempts_of(tmp_path / "out" / "orders-1" / "x")) == []


@pytest.mark.parametrize("kind", ["path", "file-uri"])
def test_writing_a_chunk_twice_replaces_it_and_commits_it(spark, tmp_path, kind):
    base = str(tmp_path / "out") if kind == "path" else (tmp_path / "out").as_uri()
    path = chunk_output_path(base, "orders-1", 3)
    orders = orders_frame(spark, 0, 100)
    env = ChunkEnvironment(OutputJob, job_id="orders-1", index=3)
    assert read_commit(path, spark=spark) is None  # nothing published yet

    first = write_chunk_output(orders, path, chunk=chunk_of(env))
    again_env = env.next_attempt()
    again = write_chunk_output(orders, path, chunk=chunk_of(again_env))  # a re-run

    back = spark.read.parquet(path)
    assert back.count() == 100 and back.distinct().count() == 100  # once, not twice
    assert (
        (first.rows, first.checksum)
        == (again.rows, again.checksum)
        == (100, content_checksum(orders))
    )
    assert again.attempt == again_env.claim != first.attempt
    assert is_committed(path, spark=spark) and read_commit(path, spark=spark) == again
    # The replaced publication (the attempt taken over from) went back to its attempt's
    # directory and was removed there.
    assert output_races._leftovers(attempts_of(tmp_path / "out" / "orders-1" / "x")) == []


@pytest.mark.parametrize("stage", ["late-write", "before-publish", "after-publish"])
@pytest.mark.parametrize("kind", ["path", "file-uri"])
def test_a_dead_attempt_never_touches_the_published_output(spark, tmp_path, stage, kind):
    # Given two attempts of one chunk, the first stalled at ``stage`` while the second
    # runs to the end (tests/jobs/output_races.py stages each step)
    out = tmp_path / "out" / "fenced" / "chunk-000003"
    path = str(out) if kind == "path" else out.as_uri()

    outcome = output_races.race(spark, path, attempts_of(out), stage, tmp_path)

    # Then the first attempt is stopped, and the path holds the second's rows, whole and
    # equal to a one-shot computation of them, marker and all; finalize leaves nothing
    output_races.check(outcome, path, stage)


def test_chunk_checksums_add_up_to_the_whole(spark, tmp_path):
    base = str(tmp_path / "out")
    commits = [
        write_chunk_output(
            orders_frame(spark, lo, hi), chunk_output_path(base, "j", index), chunk=attempt()
        )
        for index, (lo, hi) in enumerate([(0, 40), (40, 100)])
    ]

    assert sum(c.rows for c in commits) == 100
    whole = content_checksum(orders_frame(spark, 0, 100))
    assert sum(int(c.checksum) for c in commits) == int(whole)
    assert content_checksum(orders_frame(spark, 0, 99)) != whole


def test_a_failed_rewrite_leaves_the_published_output_as_it_was(spark, tmp_path):
    path = chunk_output_path(str(tmp_path / "out"), "j", 0)
    env = ChunkEnvironment(OutputJob, job_id="j")
    published = write_chunk_output(orders_frame(spark, 0, 10), path, chunk=chunk_of(env))
    failing = orders_frame(spark, 0, 10).withColumn(
        "order_id",
        F.when(F.col("order_id") == 5, F.raise_error(F.lit("bad row"))).otherwise(
            F.col("order_id")
        ),
    )

    with pytest.raises(Exception, match="bad row"):
        write_chunk_output(failing, path, chunk=chunk_of(env.next_attempt()))

    assert read_commit(path) == published and spark.read.parquet(path).count() == 10


def test_uri_outputs_go_through_the_hadoop_file_system(spark, tmp_path):
    path = chunk_output_path((tmp_path / "out").as_uri(), "j", 1)

    commit = write_chunk_output(
        orders_frame(spark, 0, 10), path, format="json", checksum=False, chunk=attempt()
    )

    assert commit.rows == 10 and commit.checksum is None
    assert read_commit(path, spark=spark) == commit
    assert (tmp_path / "out" / "j" / "chunk-000001" / COMMIT_MARKER).is_file()
    assert spark.read.schema(orders_frame(spark, 0, 1).schema).json(path).count() == 10


def test_spark_files_keep_text_as_datasets_and_move_nothing(spark, tmp_path):
    # What a Connect client does at a URI it has no file system for, on any session
    files = SparkFiles(spark)
    marker = (tmp_path / "out" / COMMIT_MARKER).as_uri()

    assert files.read_text(marker) is None and not files.exists(marker)
    files.write_text(marker, '{"rows": 1}')
    assert files.read_text(marker) == '{"rows": 1}' and files.exists(marker)
    files.remove(marker)  # an empty dataset: read as absent
    assert files.read_text(marker) is None
    assert not files.renames and not files.rename_dir(marker, marker + "2")
    assert files.names((tmp_path / "out").as_uri()) == []
    # and a classic session lists a folder that is not there as empty
    assert HadoopFiles(spark).names((tmp_path / "none").as_uri()) == []


# --------------------------------------------------------------------------- observed counts

#: One column of each kind a chunk's output may hold, the awkward values included.
TYPED_SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("text", T.StringType()),
        T.StructField("amount", T.DecimalType(12, 2)),
        T.StructField("day", T.DateType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("local_at", T.TimestampNTZType()),
        T.StructField("ratio", T.DoubleType()),
        T.StructField("flag", T.BooleanType()),
        T.StructField("raw", T.BinaryType()),
        T.StructField(
            "pair",
            T.StructType([T.StructField("x", T.IntegerType()), T.StructField("y", T.StringType())]),
        ),
        T.StructField("tags", T.ArrayType(T.StringType())),
    ]
)
TYPED_ROWS = [
    (
        1,
        "a",
        Decimal("1.50"),
        dt.date(2023, 4, 5),
        dt.datetime(2023, 4, 5, 10, 22, 0, 123456, tzinfo=dt.UTC),
        dt.datetime(2023, 1, 1, 1, 2, 3),
        1.5,
        True,
        b"\x00\x01",
        (1, "x"),
        ["p", None],
    ),
    (None,) * 11,
    (
        3,
        "",
        Decimal("-0.01"),
        dt.date(1500, 1, 1),
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        dt.datetime(1, 1, 1),
        float("nan"),
        False,
        b"",
        (None, None),
        [],
    ),
    (
        4,
        'multi\nline, "quoted"',
        Decimal("9999999999.99"),
        dt.date(9999, 12, 31),
        dt.datetime(2262, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2000, 2, 29),
        -0.0,
        None,
        None,
        (2, ""),
        [""],
    ),
]


def _typed(spark):
    return spark.createDataFrame(TYPED_ROWS, TYPED_SCHEMA)


@pytest.mark.parametrize("format", sorted(EXACT_FORMATS))
@pytest.mark.parametrize(
    "frame",
    [
        _typed,
        lambda spark: orders_frame(spark, 0, 300),  # ids, strings, doubles with nulls
        lambda spark: (
            orders_frame(spark, 0, 1000)
            .groupBy("region")
            .agg(  # a shuffle before
                F.sum("amount").alias("total"), F.count("*").alias("n")
            )
        ),
    ],
    ids=["every-type", "orders", "aggregated"],
)
def test_observed_counts_equal_the_output_read_back(spark, tmp_path, format, frame):
    df = frame(spark)
    observed_path, read_path = str(tmp_path / "observed"), str(tmp_path / "read")

    # When the same frame is written once observed, once read back after the write
    observed = write_chunk_output(df, observed_path, format, chunk=attempt())
    read = write_chunk_output(df, read_path, format, read_back=True, chunk=attempt())

    # Then both markers say the same, and so does the output read back by anyone
    back = spark.read.format(format).schema(df.schema).load(observed_path)
    assert observed == read_commit(observed_path)
    assert (observed.rows, observed.checksum) == (read.rows, read.checksum)
    assert (observed.rows, observed.checksum) == (back.count(), content_checksum(back))
    assert observed.checksum == content_checksum(df) != "0"


def test_an_empty_output_is_committed_with_no_rows(spark, tmp_path):
    empty = orders_frame(spark, 0, 10).where(F.col("order_id") < 0)

    for path, read_back in (("observed", False), ("read", True)):
        commit = write_chunk_output(
            empty, str(tmp_path / path), read_back=read_back, chunk=attempt()
        )
        assert (commit.rows, commit.checksum) == (0, "0") == (0, content_checksum(empty))
        assert is_committed(str(tmp_path / path))


def test_an_exact_format_is_written_in_one_spark_job_and_never_read_back(spark, tmp_path):
    orders = orders_frame(spark, 0, 100)  # no shuffle: one job writes it
    path = str(tmp_path / "out")

    jobs_observed = spark_jobs(spark, lambda: write_chunk_output(orders, path, chunk=attempt()))
    jobs_read_back = spark_jobs(
        spark, lambda: write_chunk_output(orders, path, read_back=True, chunk=attempt())
    )

    assert jobs_observed == 1
    assert jobs_read_back > jobs_observed  # the count and checksum pass over the files


def test_a_text_format_is_counted_as_read_back(spark, tmp_path):
    # Given a frame JSON cannot keep as it is (binary becomes base64 text)
    df = _typed(spark)
    path = str(tmp_path / "out")

    commit = write_chunk_output(df, path, format="json", chunk=attempt())

    # Then the marker describes what a reader gets, not the frame handed in
    back = spark.read.schema(df.schema).json(path)
    assert (commit.rows, commit.checksum) == (back.count(), content_checksum(back))
    assert commit.checksum != content_checksum(df)


def test_a_frame_spark_cannot_hash_fails_before_the_output_is_touched(spark, tmp_path):
    path = str(tmp_path / "out")
    committed = write_chunk_output(orders_frame(spark, 0, 10), path, chunk=attempt())
    maps = spark.createDataFrame([({"a": 1},)], "m map<string,int>")  # xxhash64 refuses maps

    with pytest.raises(Exception, match="HASH_MAP_TYPE"):
        write_chunk_output(maps, path, chunk=attempt())

    assert read_commit(path) == committed  # the earlier attempt's output stays committed
    counted = tmp_path / "counted"
    assert write_chunk_output(maps, str(counted), checksum=False, chunk=attempt()).rows == 1
    assert output_races._leftovers(attempts_of(tmp_path / "out")) == []  # nothing written


def test_metrics_spark_does_not_deliver_are_read_back(spark, tmp_path, monkeypatch):
    def undelivered(observation, timeout_seconds=0):
        raise MetricsUnavailable("dropped (simulated by the test)")

    monkeypatch.setattr(jobs.spark.output_metrics, "observed_metrics", undelivered)
    orders = orders_frame(spark, 0, 50)

    commit = write_chunk_output(orders, str(tmp_path / "out"), chunk=attempt())

    assert (commit.rows, commit.checksum) == (50, content_checksum(orders))


def test_observed_metrics_wait_for_an_action_only_so_long(spark):
    never_run = Observation()
    orders_frame(spark, 0, 5).observe(never_run, F.count(F.lit(1)))  # no action ever runs it

    asked_at = time.monotonic()
    with pytest.raises(MetricsUnavailable):
        observed_metrics(never_run, timeout_seconds=0.2)
    assert time.monotonic() - asked_at < 10
    with pytest.raises(MetricsUnavailable):
        observed_metrics(Observation())  # never attached to a frame


class SlowWrite(LocalSparkJob):
    """A chunk writing an output whose rows each take SLEEP_SECONDS."""

    def process(self, chunk: Chunk) -> None:
        slow = F.udf(lambda key: time.sleep(SLEEP_SECONDS) or key, "long", useArrow=False)
        with self.job_group(chunk) as group:
            RUNNING.put(group.id)
            frame = self.spark.range(0, 2, numPartitions=2).select(slow("id").alias("id"))
            write_chunk_output(frame, chunk.payload["path"], chunk=chunk)


def test_a_cancelled_write_is_left_uncommitted_and_a_rewrite_commits(spark, tmp_path):
    # Given a committed output, rewritten by a chunk whose write is slow
    path = str(tmp_path / "out")
    published = write_chunk_output(orders_frame(spark, 0, 10), path, chunk=attempt())
    env = ChunkEnvironment(SlowWrite, payload={"path": path})
    thread, outcome = run_in_thread(env)
    _wait_for_job(spark, RUNNING.get(timeout=60))

    # When the lease is lost mid-write
    env.lose_lease()
    thread.join(CANCEL_BOUND_SECONDS)

    # Then the write is cancelled and the output is not committed
    assert not thread.is_alive(), "the write was not cancelled"
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLost), outcome
    assert read_commit(path) == published  # what was published stays, untouched
    # and the next attempt's write commits what it wrote
    again = write_chunk_output(orders_frame(spark, 0, 7), path, chunk=chunk_of(env.next_attempt()))
    assert (again.rows, again.checksum) == (7, content_checksum(orders_frame(spark, 0, 7)))
