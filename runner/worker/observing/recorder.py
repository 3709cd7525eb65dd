"""What the engine tells whoever measures it: a :class:`Recorder`, silent unless metrics
are on.

The engine tells a recorder what happens through the metrics concern on the hooks of a
message's life (:mod:`runner.worker.observing.metrics_hooks`: a chunk starts, is done, fails, a
checkpoint is written) and from the lease keeper (a lease is renewed or lost), and knows
nothing of what records them:
:data:`SILENT` records nothing, :class:`runner.worker.observing.metrics.PrometheusRecorder` keeps
Prometheus metrics. Calls are cheap and never raise into the engine's work; they only
observe, after the fact, what the engine decided.

Each event names the job type and, for a task's events, the task's kind: a recorder
chooses what it counts (the Prometheus one counts chunks; planning and finalize run once
a job and would only blur the chunk rates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from checkpoint.records import TaskKind


class Recorder(Protocol):
    """Events of one worker process (thread-safe: its threads all call it)."""

    def task_started(self, job_type: str, kind: TaskKind, resumed: bool) -> None:
        """A claimed task's attempt starts running here (``resumed``: from the state an
        earlier attempt left)."""
        ...

    def task_left(self, job_type: str, kind: TaskKind) -> None:
        """That attempt ended here, however (no longer running in this process)."""
        ...

    def chunk_done(self, job_type: str, seconds: float) -> None:
        """A chunk was marked done (its attempt ran ``seconds``)."""
        ...

    def task_failed(self, job_type: str, kind: TaskKind) -> None:
        """An attempt failed and the task will be retried after its backoff."""
        ...

    def task_poisoned(self, job_type: str, kind: TaskKind) -> None:
        """A task was marked poisoned."""
        ...

    def task_handed_back(self, job_type: str, kind: TaskKind) -> None:
        """A task was handed back unfailed (the worker stopping, the job paused or
        cancelled, the store's trouble), its attempt given back."""
        ...

    def lease_renewed(self, job_type: str, late_seconds: float) -> None:
        """A message's lease was renewed, its answer ``late_seconds`` after the renewal
        was due (a slow store, a stalled worker)."""
        ...

    def lease_lost(self, job_type: str) -> None:
        """A message's lease was lost (each lease once)."""
        ...

    def leases_sized(self, job_types: Iterable[str], lease_seconds: Callable[[str], int]) -> None:
        """Once, as the worker is assembled: its job types, and what tells the lease a
        message of one gets now (fixed, or sized by the workers: it changes)."""
        ...

    def checkpoint_written(self, job_type: str, seconds: float) -> None:
        """A task's newest state was written (the write took ``seconds``)."""
        ...

    def checkpoint_failed(self, job_type: str, seconds: float) -> None:
        """Writing it failed for the store's trouble; the next checkpoint tries again."""
        ...


class Silent:
    """The recorder when metrics are off: every event is dropped."""

    def task_started(self, job_type: str, kind: TaskKind, resumed: bool) -> None: ...

    def task_left(self, job_type: str, kind: TaskKind) -> None: ...

    def chunk_done(self, job_type: str, seconds: float) -> None: ...

    def task_failed(self, job_type: str, kind: TaskKind) -> None: ...

    def task_poisoned(self, job_type: str, kind: TaskKind) -> None: ...

    def task_handed_back(self, job_type: str, kind: TaskKind) -> None: ...

    def lease_renewed(self, job_type: str, late_seconds: float) -> None: ...

    def lease_lost(self, job_type: str) -> None: ...

    def leases_sized(
        self, job_types: Iterable[str], lease_seconds: Callable[[str], int]
    ) -> None: ...

    def checkpoint_written(self, job_type: str, seconds: float) -> None: ...

    def checkpoint_failed(self, job_type: str, seconds: float) -> None: ...


SILENT: Recorder = Silent()
