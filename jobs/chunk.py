"""``Chunk``: one piece of a job as ``process`` sees it, and its way to checkpoint.

The runner (or the test harness in :mod:`jobs.testing`) supplies a :class:`ChunkControl`:
the chunk only offers its newest state and asks whether to go on.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, TypeGuard

from checkpoint import checks
from checkpoint.records import Progress

#: What ``progress=`` takes, said once for its error.
PROGRESS_RULE = "a fraction from 0 to 1, or (done, total) with 0 <= done <= total and total > 0"


class ChunkControl(Protocol):
    """What a running chunk needs from whoever runs it."""

    def offer(self, state: Any, progress: Progress | None = None) -> None:
        """Take the newest state (and how far the chunk got, if it says; None keeps the
        last said); write them if a checkpoint interval has passed since the last write.
        Raises LeaseLost if the write is refused (someone else owns the chunk)."""
        ...

    def raise_if_stopped(self) -> None:
        """Flush the newest state and raise LeaseLost or ChunkStopped if the chunk must
        stop (lease lost or expired, worker stopping); return otherwise."""
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
