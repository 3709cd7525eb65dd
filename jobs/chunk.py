"""``Chunk``: one piece of a job as ``process`` sees it, and its way to checkpoint.

The runner (or the test harness in :mod:`jobs.testing`) supplies a :class:`ChunkControl`:
the chunk only offers its newest state and asks whether to go on.
"""

from __future__ import annotations

from typing import Any, Protocol


class ChunkControl(Protocol):
    """What a running chunk needs from whoever runs it."""

    def offer(self, state: Any) -> None:
        """Take the newest state; write it if a checkpoint interval has passed since the
        last write. Raises LeaseLost if the write is refused (someone else owns the chunk)."""
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

    def checkpoint(self, state: Any) -> None:
        """Record progress: ``state`` (msgpack-able) is where a re-run will resume.

        Cheap to call often: a write happens at most once per checkpoint interval and
        always holds the newest state; the newest state is also flushed when the chunk
        ends, fails or is stopped. This is the cancellation point: after flushing it
        raises :class:`~checkpoint.errors.LeaseLost` when the lease is lost (another worker
        may own the chunk now) or :class:`~jobs.errors.ChunkStopped` when the worker is
        stopping, so ``process`` needs no other check.
        """
        self.state = state
        self._control.offer(state)
        self._control.raise_if_stopped()

    @property
    def stopping(self) -> bool:
        """True once the chunk should stop: for loops that rarely checkpoint."""
        return self._control.stopping

    def __repr__(self) -> str:
        return f"Chunk(job_id={self.job_id!r}, index={self.index}, attempt={self.attempt})"
