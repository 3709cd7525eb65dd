"""Spark jobs that ``runner start`` workers import in the Spark Connect tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from jobs import Chunk
from jobs.spark import SparkChunkedJob, write_chunk_output

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


class ReapedChunk(SparkChunkedJob):
    """One chunk writing its batch with ``write_chunk_output`` to ``params["output"]``:
    the first attempt's write is endless, a later attempt's (after a takeover) quick.
    What a SIGKILLed worker's replacement reaps."""

    lease_seconds = 10  # the migration sample's: the replacement claims 10 s after a kill

    def split(self, params: Any) -> Any:
        yield {}

    def process(self, chunk: Chunk) -> Any:
        import time

        from pyspark.sql import functions as F

        chunk.checkpoint("started")
        with self.job_group(chunk):
            frame = self.spark.range(0, 2, numPartitions=2)
            if chunk.attempt == 1:  # each of its two tasks sleeps: an endless write
                slow = F.udf(lambda key: time.sleep(SLEEP_SECONDS) or key, "long", useArrow=False)
                frame = frame.select(slow("id").alias("id"))
            commit = write_chunk_output(frame, chunk.params["output"], chunk=chunk)
        return {"rows": commit.rows, "attempt": commit.attempt}


def tagged_active_tasks(ui_url: str, fragment: str) -> int | None:
    """Tasks still running of the Connect server driver's jobs whose tags contain
    ``fragment`` (from its monitoring REST API), or None if no such job is known yet
    (or the API did not answer in time: a busy driver on a loaded machine).

    A stage is read until its last task has ended, killed ones too: a cancelled job is
    over at once, its tasks are not.
    """

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"{ui_url}/api/v1/applications{path}", timeout=30) as got:
            return json.load(got)

    try:
        app = get("")[0]["id"]
        jobs = [
            job
            for job in get(f"/{app}/jobs")
            if any(fragment in tag for tag in job.get("jobTags", []))
        ]
        if not jobs:
            return None
        active = 0
        for stage in {stage for job in jobs for stage in job["stageIds"]}:
            try:
                attempts = get(f"/{app}/stages/{stage}")
            except urllib.error.HTTPError:
                continue  # never submitted (a skipped stage)
            active += sum(attempt["numActiveTasks"] for attempt in attempts)
    except (OSError, ValueError):
        return None  # not answered (timed out, or not up yet): ask again
    return active
