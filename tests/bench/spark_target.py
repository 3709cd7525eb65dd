"""Which Spark the bench's child processes use: ``RUNNER_SPARK_*`` set for a while.

The bench starts its workers and one-shot runs as processes that inherit its
environment (:class:`samples.migration.processes.Runner` passes ``os.environ`` on), so
the Spark they use is chosen there: a Connect server (``RUNNER_SPARK_REMOTE``), a
cluster's master as a classic driver (``RUNNER_SPARK_MASTER``), or ``local[*]``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from samples.migration.cluster import LoopbackCluster

REMOTE_ENV, MASTER_ENV = "RUNNER_SPARK_REMOTE", "RUNNER_SPARK_MASTER"
#: Neither set: the job's own master, ``local[*]``.
LOCAL: dict[str, str | None] = {REMOTE_ENV: None, MASTER_ENV: None}


def connect(cluster: LoopbackCluster) -> dict[str, str | None]:
    """Through the cluster's Connect server: the worker is a client, no JVM of its own."""
    return {REMOTE_ENV: cluster.remote_url, MASTER_ENV: None}


def classic(cluster: LoopbackCluster) -> dict[str, str | None]:
    """A classic driver (its own JVM) on the cluster's master."""
    return {REMOTE_ENV: None, MASTER_ENV: cluster.master_url}


@contextmanager
def spark_target(**env: str | None) -> Iterator[None]:
    """Every process started inside gets these variables (None: unset); restored after."""
    saved = {key: os.environ.get(key) for key in env}
    try:
        for key, value in env.items():
            _set(key, value)
        yield
    finally:
        for key, value in saved.items():
            _set(key, value)


def _set(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
