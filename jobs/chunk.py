"""``Chunk``: one piece of a job as ``process`` sees it, and its way to checkpoint.

The runner (or the test harness in :mod:`jobs.testing`) supplies a :class:`ChunkControl`:
the chunk only offers its newest state and asks whether to go on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard

from checkpoint import checks
from checkpoint.records import Progress

#: What ``progress=`` takes, said once for its error.
PROGRESS_RULE = "a fraction from 0 to 1, or (done, total) with 0 <= done <= total and total > 0"


@dataclass(frozen=True)
class Takeover:
    """The attempt a chunk was taken over from, as its record stood when claimed.

    An attempt that died, stalled past its lease or handed the chunk back may still
    have work running elsewhere (a Spark Connect operation outlives its client): the
    new attempt uses this to find it and cut it short.

    Attributes:
        owner: the worker id that leased the chunk (``host:pid:hex``), or "" if unknown.
        claim: that attempt's claim token (:attr:`Chunk.claim`), or "" if unknown.
        spark_session: the Spark Connect session it recorded (JSON text of
            :class:`jobs.spark.reaper.ConnectSession`), or None if it recorded none.
        owner_gone: True if that worker's heartbeat says it is gone (or stopped), so
            nothing of it can be legitimately running any more.
    """

    owner: str
    claim: str
    spark_session: str | None = None
    owner_gone: bool = False


class ChunkControl(Protocol):
    """What a running chunk needs from whoever runs it."""

    @property
    def claim(self) -> str:
        """The token of the claim this attempt runs under: unique to it, never reused."""
        ...

    @property
    def taken_over(self) -> Takeover | None:
        """The attempt this one took the chunk over from, or None (a first claim, or
        one whose last holder recorded nothing)."""
        ...

    def publish(self, name: str, record: Mapping[str, Any]) -> None:
        """Record, by a write conditional on the chunk's record (fenced like a
        checkpoint, and made now, not coalesced), that this attempt's output ``name``
        is the one readers follow, described by ``record`` (msgpack-able). Raises
        LeaseLost, writing nothing, if the chunk is no longer this attempt's."""
        ...

    def published(self) -> dict[str, Any]:
        """Every output published for this chunk so far (by any attempt), by name."""
        ...

    def record_spark_session(self, session: str) -> None:
        """Record with the claim the Spark Connect session this attempt's Spark work
        runs in (JSON text), so an attempt taking the chunk over can reap that work.
        A fenced write, skipped if the same session is already recorded."""
        ...

    def offer(self, state: Any, progress: Progress | None = None) -> None:
        """Take the newest state (and how far the chunk got, if it says; None keeps the
        last said); write them if a checkpoint interval has passed since the last write.
        Raises LeaseLost if the write is refused (someone else owns the chunk)."""
        ...

    def raise_if_stopped(self) -> None:
        """Flush the newest state and raise LeaseLost or ChunkStopped if the chunk must
        stop (lease lost or expired, worker stopping); return otherwise."""
        ...

    def limit(self, name: str, units: int) -> None:
        """Take ``units`` tokens of the job class's resource ``name`` (its ``limits``),
        shared by every worker, waiting until they are there; raise as
        :meth:`raise_if_stopped` if the chunk must stop meanwhile, and
        JobDefinitionError if the class names no such resource."""
        ...

    @property
    def stopping(self) -> bool:
        """True once the chunk should stop at its next checkpoint."""
        ...


class Chunk:
    """One chunk of a job, handed to :meth:`ChunkedJob.process`.

    Attributes:
        job_id: the job this chunk belongs to.
        index: position of the chunk in ``split``'s output, from 0.
        payload: what ``split`` yielded for it.
        params: the job's parameters, as submitted.
        state: the newest state given to :meth:`checkpoint`; at the start, the last
            durable state of an earlier attempt, or None.
        attempt: 1 on the first claim, then 2, 3, ... (a crash counts; a graceful stop
            or a hand-back for storage trouble does not).
        claim: the token of this attempt's claim: unique to it, so it names what the
            attempt alone writes (its output directory, its Spark operations' tag).
        taken_over: the attempt this one took the chunk over from, or None.
    """

    def __init__(
        self,
        *,
        job_id: str,
        index: int,
        payload: Any,
        params: Any,
        state: Any,
        attempt: int,
        control: ChunkControl,
    ):
        self.job_id = job_id
        self.index = index
        self.payload = payload
        self.params = params
        self.state = state
        self.attempt = attempt
        self._control = control

    @property
    def claim(self) -> str:
        return self._control.claim

    @property
    def taken_over(self) -> Takeover | None:
        return self._control.taken_over

    def publish(self, name: str, record: Mapping[str, Any]) -> None:
        """Make this attempt's output ``name`` the published one, fenced.

        A write conditional on the chunk's record, as a checkpoint's, made at once: it
        succeeds only while this attempt still holds the chunk, so an attempt that lost
        it (a stalled or dead worker, a lost lease) can never publish over the attempt
        that took over. :func:`jobs.spark.chunk_output.write_chunk_output` calls it; call it
        yourself for output of your own.

        Args:
            name: what was written (a path, a table name); the same name published
                again replaces the earlier record.
            record: what readers need to find and trust it (msgpack-able), e.g. the
                attempt's directory, its rows and checksum.

        Raises:
            LeaseLost: the chunk is no longer this attempt's; nothing was published.
        """
        self._control.publish(name, record)

    def published(self) -> dict[str, Any]:
        """Every output published for this chunk (by this or an earlier attempt)."""
        return self._control.published()

    def record_spark_session(self, session: str) -> None:
        """Record with the claim the Spark Connect session this attempt's Spark work
        runs in (JSON text of :func:`jobs.spark.session.connect_session_text`), so an
        attempt taking the chunk over can cut that work short. :mod:`jobs.spark` does
        it before the attempt's first Spark work; a fenced write, skipped if the same
        session is recorded already.

        Raises:
            LeaseLost: the chunk is no longer this attempt's; nothing was recorded.
        """
        self._control.record_spark_session(session)

    def checkpoint(self, state: Any, progress: float | tuple[float, float] | None = None) -> None:
        """Record progress: ``state`` (msgpack-able) is where a re-run will resume.

        Cheap to call often: a write happens at most once per checkpoint interval and
        always holds the newest state; the newest state is also flushed when the chunk
        ends, fails or is stopped. This is the cancellation point: after flushing it
        raises :class:`~checkpoint.errors.LeaseLost` when the lease is lost (another worker
        may own the chunk now) or :class:`~jobs.errors.ChunkStopped` when the worker is
        stopping, so ``process`` needs no other check.

        Args:
            state: where a re-run resumes.
            progress: how far the chunk got, for ``runner status``: a fraction from 0
                to 1, or ``(done, total)`` (``(430, 1000)``). Written with the state, in
                the same write; None keeps what was last said.

        Raises:
            ValueError: ``progress`` is none of those (nothing is recorded).
        """
        told = None if progress is None else progress_of(progress)
        self.state = state
        self._control.offer(state, told)
        self._control.raise_if_stopped()

    def limit(self, name: str, units: int = 1) -> None:
        """Wait for ``units`` of the shared resource ``name`` before using it.

        ``name`` is a key of the job class's ``limits`` (``{"orders-db": "50/s"}``):
        a rate every worker of every job type naming it shares. Call it once per unit
        of work on that resource (a query, a request); it returns once the units are
        taken, at once while the rate allows. Like :meth:`checkpoint` it is a
        cancellation point: waiting, it stops the chunk when the lease is lost, the
        job is cancelled or paused, or the worker stops.

        Raises:
            JobDefinitionError: the class names no resource ``name``.
            ValueError: ``units`` is not a whole number >= 1.
            LeaseLost, ChunkStopped: the chunk must stop (as at a checkpoint).
        """
        checks.whole(units, "chunk.limit units", lowest=1)
        self._control.limit(name, units)

    @property
    def stopping(self) -> bool:
        """True once the chunk should stop: for loops that rarely checkpoint."""
        return self._control.stopping

    def __repr__(self) -> str:
        return f"Chunk(job_id={self.job_id!r}, index={self.index}, attempt={self.attempt})"


def progress_of(value: object) -> Progress:
    """``chunk.checkpoint``'s ``progress=`` as a :class:`~checkpoint.records.Progress`.

    Raises:
        ValueError: ``value`` is not :data:`PROGRESS_RULE`.
    """
    if _finite(value) and 0 <= value <= 1:
        return Progress(float(value))
    if isinstance(value, (tuple, list)) and len(value) == 2:
        done, total = value
        if _finite(done) and _finite(total) and 0 <= done <= total and total > 0:
            return Progress(done / total, done, total)
    raise ValueError(f"progress must be {PROGRESS_RULE}, not {value!r}")


def _finite(value: object) -> TypeGuard[int | float]:
    return checks.is_number(value) and math.isfinite(value)
