"""How many Spark jobs a piece of code runs: for tests that check nothing is read twice."""

from __future__ import annotations

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
