"""Cancel and pause reach a worker's running tasks within 2 s, whatever their lease.

One thread per worker process, apart from the lease keeper: a lease of 30 s is renewed
only at 21 s, and a chunk shorter than that would otherwise run to its end on a
cancelled job. For each job with tasks running here, the thread asks the worker's
:class:`~runner.worker.job_cache.JobCache` about the job every :data:`CHECK_SECONDS`, by a
record at most :data:`MAX_AGE_SECONDS` old: one job-record read per worker and job
about once a second, however many of the job's chunks run, and shared with the
worker's deliveries of that job. A job found cancelled, deleted (or being deleted), or
paused without ``drain``, has each of its running tasks told at once: ``chunk.stopping``
turns true, a Spark chunk's job group is cancelled by its watcher within 0.2 s (as on a
lost lease), and the chunk's next checkpoint saves the newest state and raises
``JobCancelled`` or ``JobPaused`` (a deleted job's: raises ``JobDeleted``, writing
nothing; its message is deleted).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from checkpoint.clock import Clock
from checkpoint.records import JobRecord
from runner.worker.hooks import Hooks, Running
from runner.worker.job_cache import JobCache
from runner.worker.leases.lease import KEEPER_STOP_SECONDS
from runner.worker.observing.logs import in_context

log = logging.getLogger(__name__)

#: Seconds between two looks at one job's state while it has tasks running here.
CHECK_SECONDS = 1.0
#: A job record read this recently (by a delivery, say) answers a look without a read:
#: a cancel is then seen at most CHECK_SECONDS + MAX_AGE_SECONDS after it was recorded
#: (and a read's time).
MAX_AGE_SECONDS = 0.5


class Stoppable(Protocol):
    """A running task, as the watcher tells it to stop
    (:class:`runner.worker.tasks.control.TaskControl`)."""

    def stop_for(self, order: str) -> bool:
        """The task's job wants it stopped (``order``: "deleted", "cancelled" or
        "paused"); True if this is news to the task."""


class StopOrderWatcher(Hooks):
    """Tells a worker's running tasks when their job is cancelled or paused: the job
    control concern on the hooks of a message's life (a task is watched from
    :meth:`started` to :meth:`left`)."""

    def __init__(
        self,
        job_cache: JobCache,
        clock: Clock,
        check_seconds: float = CHECK_SECONDS,
        max_age_seconds: float = MAX_AGE_SECONDS,
    ):
        self._job_cache = job_cache
        self._clock = clock
        self.check_seconds = check_seconds
        self._max_age_seconds = max_age_seconds
        self._guard = threading.Lock()
        #: The tasks running here, by job, and when each job was last looked at.
        self._running: dict[str, list[Stoppable]] = {}
        self._looked_at: dict[str, float] = {}
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def started(self, job: JobRecord, running: Running, resumed: bool) -> None:
        self._watch(job.job_id, running)

    def left(self, job: JobRecord, running: Running) -> None:
        self._unwatch(job.job_id, running)

    @contextmanager
    def watching(self, job_id: str, task: Stoppable) -> Iterator[None]:
        """``task`` of ``job_id`` runs in this block and is told if the job stops."""
        self._watch(job_id, task)
        try:
            yield
        finally:
            self._unwatch(job_id, task)

    def _watch(self, job_id: str, task: Stoppable) -> None:
        with self._guard:
            # A job's first look comes MAX_AGE_SECONDS after its first task started: the
            # record its delivery went by may have been up to FRESH_SECONDS old then.
            first_look = self._clock.monotonic() - self.check_seconds + self._max_age_seconds
            self._looked_at.setdefault(job_id, first_look)
            self._running.setdefault(job_id, []).append(task)

    def _unwatch(self, job_id: str, task: Stoppable) -> None:
        with self._guard:
            tasks = self._running[job_id]
            tasks.remove(task)
            if not tasks:
                del self._running[job_id], self._looked_at[job_id]

    def job_changed(self, job: JobRecord) -> None:
        """This worker wrote ``job`` (failed it past its tolerated failures): its next
        delivery of the job, and its running tasks, act on it now, not after a look."""
        self._job_cache.note(job)
        if job.stop_order is not None:
            self._tell(job.job_id, job.stop_order)

    def check_due(self) -> float:
        """Look at every job due for a look; return seconds until the next is due."""
        now = self._clock.monotonic()
        with self._guard:
            due = [job for job, at in self._looked_at.items() if now - at >= self.check_seconds]
        for job_id in due:
            order = self._job_cache.stop_order(job_id, self._max_age_seconds)  # never raises
            with self._guard:
                if job_id in self._looked_at:
                    self._looked_at[job_id] = self._clock.monotonic()
            if order is not None:
                self._tell(job_id, order)
        with self._guard:
            upcoming = min(self._looked_at.values(), default=None)
        if upcoming is None:
            return self.check_seconds
        return max(0.0, upcoming + self.check_seconds - self._clock.monotonic())

    def _tell(self, job_id: str, order: str) -> None:
        with self._guard:
            tasks = list(self._running.get(job_id, ()))
        told = sum(task.stop_for(order) for task in tasks)
        if told:  # once per task: a chunk may take a while to reach its checkpoint
            log.info("job %s is %s: stopping its %d running task(s) here", job_id, order, told)

    # ----------------------------------------------------------------- thread

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=in_context(self._run), name="stop-order-watcher", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                wait = self.check_due()
            except Exception:  # the watcher must outlive any one bad look
                log.exception("stop-order watcher pass failed")
                wait = self.check_seconds
            # Real waits, as the lease keeper's: a FakeClock would spin through passes.
            self._stopped.wait(min(max(wait, 0.05), self.check_seconds))

    def stop(self) -> None:
        """Stop the thread (idempotent)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(KEEPER_STOP_SECONDS)
