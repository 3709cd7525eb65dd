"""Checkpoint coalescing: at most one write of a running chunk's state per interval.

``chunk.checkpoint`` may be called in a tight loop. Each call only hands the coalescer
the newest state (a memory store, not a round trip); a write is due once the checkpoint
interval has passed since the last one. Offers are coalesced: only the newest unwritten
state is kept, so a write stores what the chunk said last, never a backlog, and a flush
(on success, failure or stop) writes that newest state if it is not written yet.

The runner's ``TaskControl`` (:mod:`runner.worker.tasks.control`) and the test harness users get,
``ChunkEnvironment`` (:mod:`jobs.chunk_environment`), both keep their states here, so
the harness cannot drift from the runner. Each makes its own writes (a fenced write of
the task record; a list of durable states) and tells the coalescer when one was made.
Called coalescing, not throttling: it limits nothing a user set, and a throttled
request is Azure's refusal (:class:`~checkpoint.errors.Throttled`).
Not locked: its owner calls it under the owner's own lock.
"""

from __future__ import annotations

from typing import Any

from checkpoint.clock import Clock
from checkpoint.records import Progress

_NOTHING: Any = object()


class CheckpointCoalescer:
    """The newest unwritten state of one running task, and when it is due to be written.

    Args:
        clock: its monotonic time measures the interval.
        interval_seconds: least time between two writes.
    """

    def __init__(self, clock: Clock, interval_seconds: float):
        self._clock = clock
        self.interval_seconds = interval_seconds
        self._newest: Any = _NOTHING
        self._progress: Progress | None = None
        self._progress_written: Progress | None = None
        self._written_at = clock.monotonic()

    def restart(self) -> None:
        """Count the interval from now: the task was claimed (the claim is a write)."""
        self._written_at = self._clock.monotonic()

    def offer(self, state: Any, progress: Progress | None = None) -> bool:
        """Keep ``state`` as the newest, in place of any unwritten one, and ``progress``
        (None keeps the last said). Returns whether a write is due now."""
        self._newest = state
        if progress is not None:
            self._progress = progress
        return self.due

    @property
    def due(self) -> bool:
        """True once an interval has passed since the last write (or the claim)."""
        return self._clock.monotonic() - self._written_at >= self.interval_seconds

    @property
    def unwritten(self) -> bool:
        """True while a state offered since the last write of one is not written."""
        return self._newest is not _NOTHING

    @property
    def newest(self) -> Any:
        """The newest unwritten state.

        Raises:
            LookupError: every state offered is written (see :attr:`unwritten`).
        """
        if self._newest is _NOTHING:
            raise LookupError("no unwritten checkpoint state")
        return self._newest

    @property
    def progress(self) -> Progress | None:
        """How far the task last said it got (None: it has not said)."""
        return self._progress

    @property
    def progress_written(self) -> Progress | None:
        """The progress said up to the last write of a state (None: none said by then)."""
        return self._progress_written

    def unwritten_progress(self) -> Progress | None:
        """The progress said last if it changed since the last write of a state, to go
        with the next one; else None."""
        if self._progress is not None and self._progress != self._progress_written:
            return self._progress
        return None

    def wrote(self, state: bool = True) -> None:
        """A write was made now. With ``state``, it stored the newest state (forgotten
        from now on) and the progress said so far; without, other fields alone."""
        self._written_at = self._clock.monotonic()
        if state:
            self._newest = _NOTHING
            self._progress_written = self._progress

    def postpone(self) -> None:
        """A due write failed (not the lease: the store's trouble): the state is kept,
        and the next write is due an interval from now."""
        self._written_at = self._clock.monotonic()
