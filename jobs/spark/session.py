"""One SparkSession per worker process, built on first use and shared by its chunks.

The session is either classic (the worker is a Spark driver: a JVM in the worker) or a
Spark Connect client (``SparkSettings.remote``: a gRPC client of a shared server, no JVM
in the worker). :func:`is_connect` tells which; the rest of ``jobs.spark`` works with
both.

Its own module so that :mod:`jobs.spark.chunk_output` (which needs a session for remote
paths) and :mod:`jobs.spark.job` (which imports chunk_output) both import it downward.
PySpark is imported only when a session is first wanted.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any

from jobs.spark.settings import DEFAULT_CONF, SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jobs.spark")

_MISSING_PYSPARK = (
    "Spark jobs need PySpark, the 'spark' extra: `make venv` installs it "
    "(pip install -e '.[spark]' in a clone)"
)

_session_lock = threading.Lock()
_session: SparkSession | None = None
_session_settings: SparkSettings | None = None
#: Set when the server was seen refusing the session as closed (released by an attempt
#: that took a chunk of this worker over): the next :func:`spark_session` builds anew.
_session_closed = False
_warned_settings: set[str] = set()
#: Set by pyspark when a Connect session is built, and left set after it stops; while
#: set, pyspark builds Connect objects (an ``Observation``, ...) even for a classic
#: session. Removed again by :func:`stop_spark` if it was not set before.
_CONNECT_MODE_ENV = "SPARK_CONNECT_MODE_ENABLED"
_connect_mode_was_set = False
#: Conf a Connect session cannot change that matters only to a driver the worker starts
#: itself (its UI, its own JVM): refused quietly. Other refused keys are warned about.
_DRIVER_ONLY_PREFIXES = ("spark.ui.", "spark.driver.", "spark.app.name", "spark.master")
#: Rows of the query that finds a Connect session's default parallelism: more than any
#: cluster's cores, so every partition of ``spark.range`` holds some.
_PARALLELISM_PROBE_ROWS = 1 << 20
_parallelism: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


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
    global _session, _session_settings, _session_closed
    settings = SparkSettings.for_job() if settings is None else settings
    with _session_lock:
        if _session is not None and not _session_closed and _is_alive(_session):
            if settings != _session_settings:
                _warn_other_settings(settings)
            return _session
        if _session is not None and _session_closed:
            _drop_closed(_session)
        _session_closed = False
        _session = _build_session(settings)
        _session_settings = settings
        return _session


def session_closed_on_server(spark: Any) -> bool:
    """Note that the server refused ``spark``'s session as closed; True if it is this
    process's session, which the next :func:`spark_session` then builds anew.

    A Connect session released on the server (by the reaper of an attempt that took a
    chunk of this worker over, while this worker was stalled) refuses every later call,
    but its client still looks open: without this, every later chunk would fail."""
    global _session_closed
    with _session_lock:
        if spark is None or spark is not _session:
            return False
        _session_closed = True
        return True


def _drop_closed(session: Any) -> None:
    # Stopped so that pyspark's builder makes a new one (it hands out its default
    # session while that is not stopped); the release it sends is refused or a no-op.
    try:
        session.stop()
    except Exception as error:  # noqa: BLE001 - the server already closed it
        log.debug("stopping a Connect session the server closed: %s", error)
    if not _connect_mode_was_set:
        os.environ.pop(_CONNECT_MODE_ENV, None)  # as stop_spark leaves it


def stop_spark() -> None:
    """Stop this process's SparkSession, if any; the next :func:`spark_session` builds
    a new one. For tests and orderly shutdown; workers need not call it.

    Stopping a Connect session ends it on the server and closes the client's channel;
    the server and its cluster go on serving others."""
    global _session, _session_settings, _session_closed
    with _session_lock:
        if _session is not None:
            if _session_closed:
                _drop_closed(_session)
            else:
                _session.stop()
            if is_connect(_session) and not _connect_mode_was_set:
                os.environ.pop(_CONNECT_MODE_ENV, None)
        _session = _session_settings = None
        _session_closed = False


def connect_session_text() -> str | None:
    """This process's Spark Connect session as JSON text, or None if it has none (no
    session yet, or a classic one).

    What an attempt records with its claim (``chunk.record_spark_session``) so that an
    attempt taking its chunk over can join the session and cut its work short:
    ``{"endpoint": "host:port", "session_id": ..., "user_id": ...}``. The endpoint is
    the URL's host and port only: its parameters may hold a token, never recorded.
    """
    with _session_lock:
        session, settings = _session, _session_settings
    if session is None or settings is None or settings.remote is None or not is_connect(session):
        return None
    connect: Any = session  # typed as the classic class
    endpoint = settings.remote.removeprefix("sc://").split("/", 1)[0]
    return json.dumps(
        {
            "endpoint": endpoint,
            "session_id": str(connect.session_id),
            "user_id": connect.client._user_id or "",
        },
        sort_keys=True,
    )


def connect_remote() -> str | None:
    """The Spark Connect URL this process's session was built with, or None (no session
    yet, or a classic one)."""
    with _session_lock:
        if _session is None or _session_settings is None or not is_connect(_session):
            return None
        return _session_settings.remote


def is_connect(spark: Any) -> bool:
    """True if ``spark`` is a Spark Connect session (a client of a remote server).

    Told by its class, so asking imports nothing (the Connect client needs grpcio,
    pandas and pyarrow, which a classic worker may not have)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks ``spark`` runs at once by default: its cluster's cores.

    Classic sessions ask their SparkContext. A Connect session has none, so it is
    measured once per session: the partitions of a ``spark.range`` (which Spark cuts
    into the default parallelism) that hold rows, one small query.
    """
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    known = _parallelism.get(spark)
    if known is None:
        from pyspark.sql import functions as F

        probe = spark.range(_PARALLELISM_PROBE_ROWS).select(F.spark_partition_id().alias("p"))
        known = _parallelism[spark] = max(1, probe.distinct().count())
    return known


def _is_alive(session: SparkSession) -> bool:
    # A session stopped elsewhere (user code, a test) must be rebuilt, not handed out
    # dead. SparkContext.stop() drops its Java context; a Connect session says so.
    if is_connect(session):
        connect: Any = session  # typed as the classic class, which has no is_stopped
        return not connect.is_stopped
    return session.sparkContext._jsc is not None


def _build_session(settings: SparkSettings) -> SparkSession:
    try:
        from pyspark.sql import SparkSession
    except ImportError as missing:
        raise ImportError(_MISSING_PYSPARK) from missing
    if settings.remote is not None:
        return _build_connect_session(settings)
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


def _build_connect_session(settings: SparkSettings) -> SparkSession:
    """A thin Spark Connect client of ``settings.remote``: no JVM in this process."""
    global _connect_mode_was_set
    try:
        from pyspark.errors import AnalysisException
        from pyspark.sql import SparkSession

        # The Connect client's own dependencies, checked before connecting.
        importlib.import_module("pyspark.sql.connect.session")
    except ImportError as missing:
        raise ImportError(
            _MISSING_PYSPARK + f" (the Connect client: grpcio, pandas, pyarrow): {missing}"
        ) from missing
    assert settings.remote is not None
    _connect_mode_was_set = _CONNECT_MODE_ENV in os.environ
    log.info("connecting to Spark Connect server %s", settings.remote)
    session = SparkSession.builder.remote(settings.remote).getOrCreate()
    refused = []
    # Set one by one, after connecting: the builder would set them all at once and
    # turn every refusal into a Python warning on stderr.
    for key, value in settings.conf.items():
        try:
            session.conf.set(key, value)
        except AnalysisException:
            refused.append(key)
    _log_refused_conf(settings, refused)
    return session


def _log_refused_conf(settings: SparkSettings, refused: list[str]) -> None:
    quiet = [key for key in refused if key in DEFAULT_CONF or key.startswith(_DRIVER_ONLY_PREFIXES)]
    if quiet:
        log.debug("not for a Connect session (the server's own driver decides): %s", quiet)
    loud = [key for key in refused if key not in quiet]
    if loud:
        log.warning(
            "Spark Connect server %s refused conf %s: a Connect session can change only "
            "runtime SQL conf; set these on the server when it starts",
            settings.remote,
            ", ".join(loud),
        )


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
