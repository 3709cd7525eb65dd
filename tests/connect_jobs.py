"""Spark jobs that ``runner start`` workers import in the Spark Connect tests."""

from __future__ import annotations

from typing import Any

from jobs import Chunk
from jobs.spark import SparkChunkedJob

#: How long each task of :func:`endless_action` would sleep.
SLEEP_SECONDS = 600


def endless_action(spark: Any) -> None:
    """Run an action whose two tasks would each sleep :data:`SLEEP_SECONDS`.

    Each task sleeps in a Python UDF: killing a task kills its Python worker, so a
    cancel ends it at once (a tight JVM loop, a ``range`` with arithmetic, would ignore
    the kill: docs/spark.md). One stage, no shuffle: an interrupt that lands while the
    server still plans an action with a shuffle can leave the shuffle's map stage, which
    adaptive query execution submits a moment later, running (docs/spark.md).
    """
    import time

    from pyspark.sql import functions as F

    slow = F.udf(lambda key: time.sleep(SLEEP_SECONDS) or key, "long", useArrow=False)
    frame = spark.range(0, 2, numPartitions=2).select(slow("id").alias("id"))
    frame.write.format("noop").mode("overwrite").save()


class EndlessChunk(SparkChunkedJob):
    """One chunk whose one Spark action would run for hours: a worker must stop it."""

    lease_seconds = 60  # long: a handed-back chunk is visible at once only if released

    def split(self, params: Any) -> Any:
        yield {}

    def process(self, chunk: Chunk) -> Any:
        chunk.checkpoint("started")
        with self.job_group(chunk):
            endless_action(self.spark)
