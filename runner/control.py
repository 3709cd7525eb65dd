"""The runner's side of a running task: throttled, fenced checkpoints and the stop signal.

Checkpoints are coalesced: ``offer`` keeps only the newest state and writes it when a
checkpoint interval has passed since the last write, so calling ``chunk.checkpoint``
in a tight loop costs a memory store, not a round trip. Every write is conditional on
the ETag of the previous one (fencing): if anyone else wrote the record, the write
fails, the lease is marked lost and ``LeaseLost`` is raised.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from checkpoint.records import TaskRecord
from checkpoint.store import CheckpointStore
from jobs.clock import Clock
from jobs.errors import ChunkStopped, Conflict, LeaseLost, NotFound
from runner.lease import Lease

_NOTHING = object()


class TaskControl:
    """Checkpoints and stop signal of one task held under one lease.

    Args:
        store: where the task record lives.
        task: the record as claimed (its ETag fences every later write).
        lease: the message lease the task runs under.
        interval_seconds: least time between two checkpoint writes.
        worker_stopping: set when the worker is shutting down.
    """

    def __init__(
        self,
        store: CheckpointStore,
        task: TaskRecord,
        lease: Lease,
        clock: Clock,
        interval_seconds: float,
        worker_stopping: threading.Event,
    ):
        self._store = store
        self._clock = clock
        self._interval = interval_seconds
        self._worker_stopping = worker_stopping
        self._lock = threading.Lock()
        self.task = task
        self.lease = lease
        self._newest: Any = _NOTHING
        self._written_at = clock.monotonic()
        self.writes = 0

    # ----------------------------------------------------------------- ChunkControl

    def offer(self, state: Any) -> None:
        with self._lock:
            self._newest = state
            if self._clock.monotonic() - self._written_at >= self._interval:
                self._write_locked()

    def raise_if_stopped(self) -> None:
        now = self._clock.monotonic()
        if self.lease.expired(now):
            # Not flushed: the chunk may be someone else's now, and a paused worker must
            # stop without waiting for the store to tell it so.
            raise LeaseLost(self.lease.why_lost(now))
        if self._worker_stopping.is_set():
            self.flush()
            raise ChunkStopped("worker is stopping; progress saved, chunk released")

    @property
    def stopping(self) -> bool:
        return self._worker_stopping.is_set() or self.lease.expired(self._clock.monotonic())

    # ----------------------------------------------------------------- runner side

    @property
    def newest_state(self) -> Any:
        """The newest offered state, or the state the task started from."""
        if self._newest is _NOTHING:
            return self._store.value(self.task.properties, "progress")
        return self._newest

    @property
    def has_unwritten_state(self) -> bool:
        return self._newest is not _NOTHING

    def flush(self) -> None:
        """Write the newest state now if it was not written yet."""
        with self._lock:
            if self._newest is not _NOTHING:
                self._write_locked()

    def write(self, changes: dict[str, Any], values: dict[str, Any] | None = None) -> TaskRecord:
        """A fenced write of other fields (state, error, ...) with the newest state."""
        with self._lock:
            values = dict(values or {})
            if self._newest is not _NOTHING:
                values.setdefault("progress", self._newest)
            self._fenced(changes, values)
            self._newest = _NOTHING
            return self.task

    def on_renewed(self, lease: Lease) -> None:
        """Keep the record's ``lease_until`` fresh for status and duplicate detection,
        writing at most once per half lease."""
        if self._clock.monotonic() - self._written_at < lease.lease_seconds / 2:
            return
        try:
            with self._lock:
                values = {} if self._newest is _NOTHING else {"progress": self._newest}
                self._fenced({}, values)
                self._newest = _NOTHING
        except LeaseLost:
            pass  # the lease is marked lost; the chunk learns at its next checkpoint

    def _write_locked(self) -> None:
        state, self._newest = self._newest, _NOTHING
        self._fenced({}, {"progress": state})

    def _fenced(self, changes: dict[str, Any], values: dict[str, Any]) -> None:
        if self.lease.lost.is_set():
            raise LeaseLost(self.lease.why_lost(self._clock.monotonic()))
        changes = {"lease_until": self._lease_until(), **changes}
        try:
            self.task = self._store.write_task(self.task, changes, values)
        except (Conflict, NotFound) as fenced:
            self.lease.lose("another worker took over the chunk (its record changed)")
            raise LeaseLost(
                f"task record of {self.task.kind} {self.task.index} changed: fenced"
            ) from fenced
        self._written_at = self._clock.monotonic()
        self.writes += 1

    def _lease_until(self) -> datetime:
        remaining = max(0.0, self.lease.visible_at - self._clock.monotonic())
        return self._clock.now() + timedelta(seconds=remaining)
