"""Helpers of the Spark tests: how many Spark jobs a piece of code runs (for tests that
check nothing is read twice), a chunk run on a thread, a small orders frame."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

#: The local properties a job group sets on the calling thread.
_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def spark_jobs(spark: Any, action: Callable[[], Any]) -> int:
    """The number of Spark jobs ``action`` ran on ``spark``.

    Job ids are given in sequence, so the jobs between two one-job probes are counted,
    whatever job groups ``action`` sets itself (a chunk's own group, for one). No other
    thread may run Spark jobs meanwhile.
    """
    before = _probe(spark)
    action()
    return _probe(spark) - before - 1


def _probe(spark: Any) -> int:
    """Run one single-task job; its id."""
    context = spark.sparkContext
    group = f"probe-{uuid.uuid4().hex}"
    context.setJobGroup(group, "counting Spark jobs")
    try:
        context.parallelize([0], 1).count()
    finally:
        for key in _GROUP_PROPERTIES:
            context.setLocalProperty(key, None)  # None clears
    # The status tracker hears of jobs through the asynchronous listener bus.
    context._jsc.sc().listenerBus().waitUntilEmpty()
    (job,) = context.statusTracker().getJobIdsForGroup(group)
    return job


def run_in_thread(env: Any) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``env.run()`` (a ChunkEnvironment) on a thread; what it raises lands in the
    returned list."""
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            env.run()
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def orders_frame(spark: Any, first: int, last: int) -> Any:
    """Orders ``first`` to ``last`` (exclusive): ids, a region string, amounts with nulls."""
    from pyspark.sql import functions as F

    return spark.range(first, last).select(
        F.col("id").alias("order_id"),
        (F.col("id") % 7).cast("string").alias("region"),
        F.when(F.col("id") % 5 == 0, None).otherwise(F.col("id") * 1.5).alias("amount"),
    )
