"""One SparkSession per worker process, built on first use and shared by its chunks.

Its own module so that :mod:`jobs.chunk_output` (which needs a session for remote
paths) and :mod:`jobs.spark` (which imports chunk_output) both import it downward.
PySpark is imported only when a session is first wanted.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from jobs.spark_settings import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jobs.spark")

_MISSING_PYSPARK = "Spark jobs need PySpark: pip install 'chunkrunner[spark]'"

_session_lock = threading.Lock()
_session: SparkSession | None = None
_session_settings: SparkSettings | None = None
_warned_settings: set[str] = set()


def spark_session(settings: SparkSettings | None = None) -> SparkSession:
    """This worker process's SparkSession, built on first use and reused after.

    Chunk threads asking at once wait for one build rather than starting two JVMs. A
    later caller asking for other settings gets the existing session (a process has
    one SparkContext) and a warning.

    Args:
        settings: how to build it; :meth:`SparkSettings.for_job` with no job class if
            None (the environment over the defaults).

    Raises:
        ImportError: PySpark is not installed.
        ConfigurationError: bad settings in the environment.
    """
    global _session, _session_settings
    settings = SparkSettings.for_job() if settings is None else settings
    with _session_lock:
        if _session is not None and _is_alive(_session):
            if settings != _session_settings:
                _warn_other_settings(settings)
            return _session
        _session = _build_session(settings)
        _session_settings = settings
        return _session


def stop_spark() -> None:
    """Stop this process's SparkSession, if any; the next :func:`spark_session` builds
    a new one. For tests and orderly shutdown; workers need not call it."""
    global _session, _session_settings
    with _session_lock:
        if _session is not None:
            _session.stop()
        _session = _session_settings = None


def _is_alive(session: SparkSession) -> bool:
    # SparkContext.stop() drops its Java context; a session stopped elsewhere (user
    # code, a test) must be rebuilt, not handed out dead.
    return session.sparkContext._jsc is not None


def _build_session(settings: SparkSettings) -> SparkSession:
    try:
        from pyspark.sql import SparkSession
    except ImportError as missing:
        raise ImportError(_MISSING_PYSPARK) from missing
    if settings.master.startswith("local"):
        # The JVM picks its bind address from the host name (and warns) unless told;
        # only for local masters: a cluster's executors must reach the driver.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
    for key, value in settings.conf.items():
        builder = builder.config(key, value)
    py4j_log = logging.getLogger("py4j")
    if py4j_log.level == logging.NOTSET:
        # py4j logs every gateway connection at INFO; a worker logging at INFO would
        # drown in it. Left alone if the user configured it.
        py4j_log.setLevel(logging.WARNING)
    log.info("starting SparkSession (master %s)", settings.master)
    return builder.getOrCreate()


def _warn_other_settings(settings: SparkSettings) -> None:
    key = repr(settings)
    if key not in _warned_settings:
        _warned_settings.add(key)
        log.warning(
            "SparkSession already running with %r; not rebuilt for %r "
            "(one session per worker process)",
            _session_settings,
            settings,
        )
