"""A Spark job class and its chunks' job groups: :class:`SparkChunkedJob` (``self.spark``,
the worker process's session) and :class:`ChunkJobGroup`, a chunk's Spark work cut short
as soon as the chunk must stop. Imported from :mod:`jobs.spark`.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from checkpoint.errors import ConfigurationError, LeaseLost
from jobs.chunk import Chunk
from jobs.errors import ChunkStopped, JobDefinitionError
from jobs.job import ChunkedJob
from jobs.spark.interrupt import interrupter_for
from jobs.spark.reaper import claim_tag, prepare_attempt, session_released
from jobs.spark.session import is_connect, session_closed_on_server, spark_session
from jobs.spark.settings import SparkSettings, check_remote, conf_strings
from jobs.summary import JobSummary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: How often a chunk's job-group watcher asks ``chunk.stopping``.
STOP_POLL_SECONDS = 0.2


# --------------------------------------------------------------------------- job groups


class ChunkJobGroup:
    """A chunk's Spark work (or finalize's), cut short as soon as the chunk must stop.

    Use as a context manager on the chunk's own thread. Inside it every Spark action is
    marked as the chunk's: with a job group in a classic session, with an operation tag
    in a Spark Connect session (:mod:`jobs.spark.interrupt`). A daemon thread polls
    ``chunk.stopping`` every ``poll_seconds`` and, once it is true (lease lost, job
    cancelled or paused, worker stopping), cancels the group or interrupts the tag, so
    a running action fails within moments instead of running to the end; it cancels
    again at each poll until the block is left, so an action started after the first
    cancel (code that caught Spark's error and went on) is cut short too. On leaving, a
    cancelled group (or an error raised while the chunk must stop) becomes the chunk's
    proper stop exception: :class:`~checkpoint.errors.LeaseLost` or
    :class:`~jobs.errors.ChunkStopped` (the Spark error kept as its cause), raised by
    ``chunk.checkpoint(chunk.state)``, so the newest state is flushed exactly as at any
    checkpoint.

    Given finalize's ``summary`` instead of a chunk, it does the same for finalize:
    a finalize whose lease was lost (another worker may run it now) has its Spark work
    cancelled and leaves the block with LeaseLost.

    In a Connect session, entering the first block of an attempt also records the
    session with the chunk's claim and, if the chunk was taken over, cuts short what
    the previous attempt left running on the server (:mod:`jobs.spark.reaper`). A block
    whose work the server refused because its session was closed (released by such a
    reaper while this worker was stalled) hands the chunk back (``ChunkStopped``, no
    attempt spent) and the process's next :func:`spark_session` builds a new session.

    Attributes:
        id: the group id (or tag): unique per entry, so cancelling one attempt of a
            chunk never touches another attempt running in the same process.
        attempt_tag: the tag every Connect operation of this attempt of the chunk
            carries (``chunkrunner-claim-<claim>``): what a takeover interrupts.
        description: what Spark's UI shows for the group's jobs (classic sessions).
        cancelled: True once the watcher cancelled the group.
    """

    def __init__(
        self,
        spark: SparkSession,
        chunk: Chunk | JobSummary,
        description: str | None = None,
        *,
        poll_seconds: float = STOP_POLL_SECONDS,
    ):
        self._spark = spark
        self._chunk = chunk
        self._poll_seconds = poll_seconds
        unique = uuid.uuid4().hex[:8]
        if isinstance(chunk, JobSummary):
            # Finalize: no chunk record to record a Connect session with, so no
            # attempt tag either; a lost lease cancels it all the same.
            self.id = f"chunkrunner-{chunk.job_id}-finalize-{unique}"
            self.attempt_tag: str | None = None
            self.description = description or f"finalize of job {chunk.job_id}"
        else:
            self.id = f"chunkrunner-{chunk.job_id}-{chunk.index}-{chunk.attempt}-{unique}"
            self.attempt_tag = claim_tag(chunk.claim)
            self.description = description or (
                f"chunk {chunk.index} of job {chunk.job_id} (attempt {chunk.attempt})"
            )
        self._interrupter = interrupter_for(spark, self.id, self.description, self.attempt_tag)
        self.cancelled = False
        self._left = threading.Event()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> ChunkJobGroup:
        if self._chunk.stopping:
            _raise_stop(self._chunk, None)  # start no Spark work for a chunk that must stop
        if isinstance(self._chunk, Chunk) and is_connect(self._spark):
            # Before any Spark work of the attempt: the previous attempt's operations
            # would otherwise hold the cluster's cores (or write) alongside ours.
            prepare_attempt(self._spark, self._chunk)
        self._interrupter.enter()
        self._watcher = threading.Thread(target=self._watch, name=f"{self.id}-watch", daemon=True)
        self._watcher.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._left.set()
        if self._watcher is not None:
            self._watcher.join()
        self._interrupter.leave()
        if isinstance(exc, (LeaseLost, ChunkStopped)):
            return  # already the right exception (from a checkpoint inside)
        # A cancelled group means work inside was cut short, even if the code inside
        # swallowed Spark's error: never let the chunk carry on as if it completed.
        if self.cancelled or (exc is not None and self._chunk.stopping):
            _raise_stop(self._chunk, exc)
        if (
            isinstance(exc, Exception)
            and is_connect(self._spark)
            and session_released(self._spark, exc)
        ):
            # Not the chunk's failure, and no attempt spent: this worker's session was
            # released on the server (it looked gone to a chunk's new owner).
            session_closed_on_server(self._spark)
            raise ChunkStopped(
                "the Spark Connect session was closed on the server (released by an attempt "
                "that took a chunk of this worker over); handed back, a new session follows"
            ) from exc

    def cancel(self) -> None:
        """Cancel the group's running jobs now (also called by the watcher)."""
        self.cancelled = True
        self._interrupter.cancel()

    def _watch(self) -> None:
        while not self._left.wait(self._poll_seconds):
            if not self._chunk.stopping:
                continue
            if not self.cancelled:
                log.info("%s must stop: cancelling %s", self.description, self.id)
            try:
                self.cancel()
            except Exception as error:  # noqa: BLE001 - e.g. a session the server closed
                self.cancelled = True
                log.debug("cancelling %s failed: %s", self.id, error)


def _raise_stop(chunk: Chunk | JobSummary, cause: BaseException | None) -> None:
    """Raise the chunk's stop exception (flushing the newest state as a checkpoint does;
    finalize has none to flush)."""
    try:
        if isinstance(chunk, JobSummary):
            chunk.raise_if_stopped()
        else:
            chunk.checkpoint(chunk.state)
    except (LeaseLost, ChunkStopped) as stop:
        raise stop from cause
    # Unreachable while stopping stays true (it never turns false); if a control
    # misbehaves, still do not report cut-short work as a success.
    if cause is not None:
        raise cause
    raise ChunkStopped("chunk's Spark job group was cancelled")


def job_group(
    chunk: Chunk | JobSummary,
    description: str | None = None,
    *,
    spark: SparkSession | None = None,
) -> ChunkJobGroup:
    """A :class:`ChunkJobGroup` for ``chunk`` (or finalize's ``summary``) on ``spark``
    (this process's session if None).

    For jobs that do not derive from :class:`SparkChunkedJob`.
    """
    return ChunkJobGroup(spark_session() if spark is None else spark, chunk, description)


# --------------------------------------------------------------------------- the base class


class SparkChunkedJob(ChunkedJob):
    """A :class:`~jobs.job.ChunkedJob` whose chunks do their work on Spark.

    ``self.spark`` is the worker process's SparkSession (built on first use, shared by
    every chunk and every task of the process); wrap a chunk's Spark work in
    ``with self.job_group(chunk):`` so a lost lease or a stopping worker cancels it.
    ``split`` and ``finalize`` may use ``self.spark`` too.

    Class attributes (besides ChunkedJob's):
        spark_remote: a Spark Connect URL (``sc://host:15002``): the worker is a thin
            client of that server instead of a driver. ``RUNNER_SPARK_REMOTE``
            (``runner start --spark-remote``) overrides it, and a master named in the
            environment replaces it.
        spark_master: the master URL; None for ``local[*]``. ``RUNNER_SPARK_MASTER``
            (``runner start --spark-master``) overrides it.
        spark_conf: extra Spark conf, e.g. ``{"spark.sql.shuffle.partitions": 8}``;
            ``RUNNER_SPARK_CONF`` (JSON) entries override it key by key.

    The first job class to build the session decides its settings: a worker serving
    several Spark job types should give them the same ones.
    """

    spark_master: ClassVar[str | None] = None
    spark_remote: ClassVar[str | None] = None
    spark_conf: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        master = cls.spark_master
        if master is not None and (not isinstance(master, str) or not master.strip()):
            raise JobDefinitionError(
                f"{cls.__qualname__}.spark_master must be a master URL or None, not {master!r}"
            )
        if master is not None and cls.spark_remote is not None:
            raise JobDefinitionError(
                f"{cls.__qualname__} sets both spark_master and spark_remote: a worker is "
                "either a Spark driver or a Spark Connect client"
            )
        try:
            if cls.spark_remote is not None:
                check_remote(cls.spark_remote, f"{cls.__qualname__}.spark_remote")
            conf_strings(cls.spark_conf, f"{cls.__qualname__}.spark_conf")
        except ConfigurationError as error:
            raise JobDefinitionError(str(error)) from error

    @property
    def spark(self) -> SparkSession:
        """The worker process's SparkSession (built on first use)."""
        return spark_session(SparkSettings.for_job(type(self)))

    def job_group(self, chunk: Chunk | JobSummary, description: str | None = None) -> ChunkJobGroup:
        """The chunk's Spark job group; use as ``with self.job_group(chunk):`` in
        ``process``, and as ``with self.job_group(summary):`` in ``finalize``."""
        return ChunkJobGroup(self.spark, chunk, description)
