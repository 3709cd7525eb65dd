"""The worker around a chunk that ``ChunkEnvironment`` (:mod:`jobs.chunk_environment`)
simulates: its lease, lost when the test says so, after a number of checkpoints, or once
the chunk runs past ``max_chunk_seconds``; its stop (SIGTERM), now or after a number of
checkpoints; and the checkpoint writes it makes, coalesced as a real worker's are
(:mod:`checkpoint.coalescing`) and fenced by that lease.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from checkpoint.clock import Clock
from checkpoint.coalescing import CheckpointCoalescer
from checkpoint.codec import round_trip
from checkpoint.errors import LeaseLost
from checkpoint.records import Progress
from jobs.errors import ChunkStopped
from jobs.job import ChunkedJob


class SimulatedWorker:
    """The lease and stop signal of one attempt at a chunk.

    Args:
        clock: the clock ``max_chunk_seconds`` is measured on.
        job_class: whose ``max_chunk_seconds`` caps the attempt (None: no cap).
        lock: the environment's lock, held while the lease is lost (a checkpoint or a
            publication under it sees the lease either kept or lost, never half).
    """

    def __init__(self, clock: Clock, job_class: type[ChunkedJob], lock: threading.RLock):
        self._clock = clock
        self._job_class = job_class
        self._lock = lock
        self._lost = threading.Event()
        self.lost_reason = ""
        self._stopping = threading.Event()
        self._passed = 0
        self._lose_after: int | None = None
        self._stop_after: int | None = None
        self._started_at: float | None = None  # until the chunk runs

    def start(self) -> None:
        """The chunk runs from now (``max_chunk_seconds`` counts from here)."""
        self._started_at = self._clock.monotonic()

    def lose_lease(self, reason: str) -> None:
        """Lose the lease now (the first reason given stands)."""
        with self._lock:
            if not self._lost.is_set():
                self.lost_reason = reason
                self._lost.set()

    def lose_lease_after(self, checkpoints: int) -> None:
        """Lose the lease once the chunk got past ``checkpoints`` checkpoints."""
        self._lose_after = checkpoints
        self.apply_schedule()

    def stop(self) -> None:
        """Stop the worker now."""
        self._stopping.set()

    def stop_after(self, checkpoints: int) -> None:
        """Stop the worker once the chunk got past ``checkpoints`` checkpoints."""
        self._stop_after = checkpoints
        self.apply_schedule()

    @property
    def lost(self) -> bool:
        """True once the lease is lost (as last checked: see :meth:`check_deadline`)."""
        return self._lost.is_set()

    @property
    def stopping(self) -> bool:
        """True once the worker is stopping."""
        return self._stopping.is_set()

    def passed_checkpoint(self, state: Any, hook: Callable[[Any], None] | None) -> None:
        """The chunk got past one more checkpoint, of ``state``: tell the test's
        ``hook``, then lose the lease or stop if it is time (:meth:`apply_schedule`)."""
        with self._lock:
            self._passed += 1
        if hook is not None:
            hook(state)
        self.apply_schedule()

    def apply_schedule(self) -> None:
        """Lose the lease, or stop, if the chunk got past as many checkpoints as the
        test asked for."""
        with self._lock:
            passed = self._passed
        if self._lose_after is not None and passed >= self._lose_after:
            self.lose_lease(f"lease lost after {self._lose_after} checkpoint(s) (simulated)")
        if self._stop_after is not None and passed >= self._stop_after:
            self.stop()

    def raise_if_stopping(self, flush: Callable[[], None]) -> None:
        """Raise LeaseLost (writing nothing) if the lease is lost; ``flush`` the newest
        state and raise ChunkStopped if the worker is stopping."""
        self.check_deadline()
        if self.lost:
            # Not flushed: the chunk may be someone else's now.
            raise LeaseLost(self.lost_reason)
        if self.stopping:
            flush()
            raise ChunkStopped("worker is stopping; progress saved, chunk released")

    def check_deadline(self) -> None:
        """Lose the lease if the chunk has run past ``max_chunk_seconds``."""
        # The worker's lease keeper stops renewing past max_chunk_seconds (at its next
        # renewal, so a real chunk may run a little longer than this).
        cap = self._job_class.max_chunk_seconds
        started = self._started_at
        if cap is not None and started is not None and self._clock.monotonic() - started >= cap:
            self.lose_lease(f"ran past max_chunk_seconds ({cap:g} s); lease not renewed")


class SimulatedCheckpoints:
    """The durable states of one attempt, written as a worker writes them: at most once
    per interval, coalesced to the newest, and never once the lease is lost.

    Args:
        clock: the clock the interval is measured on.
        interval_seconds: least time between two writes.
        worker: whose lease fences each write.
    """

    def __init__(self, clock: Clock, interval_seconds: float, worker: SimulatedWorker):
        self.durable: list[Any] = []
        self._coalescer = CheckpointCoalescer(clock, interval_seconds)
        self._worker = worker

    def claimed(self) -> None:
        """The attempt starts: its claim is a write, the interval counts from it."""
        self._coalescer.restart()

    def offer(self, state: Any, progress: Progress | None) -> None:
        """Keep the newest state; write it if an interval passed since the last write.
        Raises LeaseLost if one was due but the lease is lost."""
        due = self._coalescer.offer(state, progress)
        self._worker.check_deadline()
        if due:
            self._write()

    def flush(self) -> None:
        """Write the newest state if it is not written yet (raises LeaseLost as offer)."""
        if self._coalescer.unwritten:
            self._write()

    @property
    def progress_written(self) -> Progress | None:
        """The progress written with the last durable state."""
        return self._coalescer.progress_written

    def _write(self) -> None:
        if self._worker.lost:
            raise LeaseLost(self._worker.lost_reason)  # a fenced write: refused
        # Encoded now, as the worker encodes at write time (not when it was offered).
        self.durable.append(round_trip(self._coalescer.newest, "checkpoint state"))
        self._coalescer.wrote()
