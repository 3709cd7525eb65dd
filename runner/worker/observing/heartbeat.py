"""A worker's heartbeat: its record in the workers table, rewritten every few seconds.

One thread per worker process writes it every :data:`BEAT_SECONDS` (an upsert of a few
hundred bytes: 12 writes a minute) with what the worker runs now (:class:`RunningTasks`),
sooner when it starts tasks of a job its last beat did not name (but never two beats
within :data:`MIN_GAP_SECONDS`), and once more when the worker stops
(``stopped``), so ``runner status`` can show idle workers and tell a worker that exited
from one that vanished. One chunk following another of the same job waits for the beat
when due: a worker of quick chunks wrote a beat a second before (0.01 requests per
trivial chunk on Azurite), 12 a minute now. Beats never hold up work:
a failed one is not retried in place (the next one writes the newest record anyway), and
nothing else waits for them. About every :data:`SWEEP_SECONDS` the thread also removes
records of workers gone for an hour (:meth:`checkpoint.workers.WorkerBook.remove_stale`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime

from checkpoint import retries
from checkpoint.clock import Clock
from checkpoint.errors import StorageError
from checkpoint.workers import WorkerBook, WorkerRecord, WorkerState
from runner.worker.leases.lease import KEEPER_STOP_SECONDS
from runner.worker.observing.logs import TaskIds, in_context

log = logging.getLogger(__name__)

#: Seconds between two beats; a worker is shown gone after three missed ones.
BEAT_SECONDS = 5.0
#: Least seconds between two beats when the running tasks change in between.
MIN_GAP_SECONDS = 1.0
#: Seconds between two sweeps of stale records (the first one at start).
SWEEP_SECONDS = 300.0


class RunningTasks:
    """What a worker runs right now (thread-safe): the tasks between claim and end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[int, tuple[str, str]] = {}  # key -> (JOB#INDEX or JOB:kind, JOB)
        self._next = 0
        #: Called (outside the lock) when a task starts or ends: the heartbeat's wake-up.
        self.on_change: Callable[[], None] = lambda: None

    @contextmanager
    def running(self, ids: TaskIds) -> Iterator[None]:
        """The task counts as running in this block."""
        where = f"#{ids.index}" if ids.kind == "chunk" else f":{ids.kind}"
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._tasks[key] = (f"{ids.job_id}{where}", ids.job_id)
        self.on_change()
        try:
            yield
        finally:
            with self._lock:
                del self._tasks[key]
            self.on_change()

    def now(self) -> tuple[str, ...]:
        """``JOB#INDEX`` (or ``JOB:plan``, ``JOB:final``) of each running task."""
        with self._lock:
            return tuple(label for label, _ in self._tasks.values())

    def shape(self) -> frozenset[str]:
        """The jobs of the running tasks: what a beat sooner than due is for (a chunk
        following another of its job, or its feed step, changes nothing here)."""
        with self._lock:
            return frozenset(job_id for _, job_id in self._tasks.values())


@dataclass(frozen=True)
class Identity:
    """Who a worker is and what it serves (what its heartbeat says besides its tasks)."""

    worker_id: str
    queues: tuple[str, ...]
    job_types: tuple[str, ...]
    concurrency: int
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)


class Heartbeat:
    """Writes one worker's heartbeat on a thread of its own once started.

    Args:
        book: the workers table.
        identity: who the worker is.
        running: what it runs (read at each beat).
        clock: wall time for the record, monotonic for the sweeps, waits between beats.
        beat_seconds: how often to write.
    """

    def __init__(
        self,
        book: WorkerBook,
        identity: Identity,
        running: RunningTasks,
        clock: Clock,
        beat_seconds: float = BEAT_SECONDS,
    ):
        self._book = book
        self._identity = identity
        self._running = running
        self._clock = clock
        self.beat_seconds = beat_seconds
        self._started_on: datetime = clock.now()
        self._state: WorkerState = "serving"
        self._stop = threading.Event()
        self._wake = threading.Event()  # set to beat at once (a stop, a changed state)
        self._thread: threading.Thread | None = None
        self._failing = False
        self._swept_at: float | None = None
        self.beats = 0
        #: The state and task shape the last beat wrote (None: none written yet).
        self._written: tuple[WorkerState, frozenset[str]] | None = None
        running.on_change = self._wake.set

    def record(self) -> WorkerRecord:
        """The heartbeat as it would be written now."""
        tasks = self._running.now()
        return WorkerRecord(
            worker_id=self._identity.worker_id,
            host=self._identity.host,
            pid=self._identity.pid,
            queues=self._identity.queues,
            job_types=self._identity.job_types,
            concurrency=self._identity.concurrency,
            tasks=tasks,
            running=len(tasks),
            state=self._state,
            started_on=self._started_on,
            seen_on=self._clock.now(),
            beat_seconds=self.beat_seconds,
        )

    def serving(self, queues: tuple[str, ...]) -> None:
        """Say these queues are served (known once the job catalogue was read)."""
        self._identity = replace(self._identity, queues=queues)

    def beat(self) -> bool:
        """Write the heartbeat once, now; False if it could not be written (logged once
        per outage, not per beat)."""
        shape = (self._state, self._running.shape())
        try:
            self._book.beat(self.record(), retries.once(self._clock))
        except StorageError as error:
            if not self._failing:
                log.warning(
                    "heartbeat not written (trying every %g s): %s", self.beat_seconds, error
                )
            self._failing = True
            return False
        if self._failing:
            log.info("heartbeat written again")
        self._failing = False
        self._written = shape
        self.beats += 1
        return True

    def sweep(self) -> None:
        """Remove records of workers gone for long, if a sweep is due."""
        now = self._clock.monotonic()
        if self._swept_at is not None and now - self._swept_at < SWEEP_SECONDS:
            return
        self._swept_at = now
        try:
            removed = self._book.remove_stale(self._clock.now(), retries.once(self._clock))
        except StorageError as error:
            log.debug("removing stale heartbeats failed: %s", error)
            return
        if removed:
            log.info("removed %d heartbeat record(s) of workers gone for an hour", removed)

    def stopping(self) -> None:
        """The worker was asked to stop: say so at the next beat (and now)."""
        if self._state == "serving":
            self._state = "stopping"
            self._wake.set()  # written now, not at the next beat

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=in_context(self._run), name="heartbeat", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread and write the last heartbeat, ``stopped`` (idempotent)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(KEEPER_STOP_SECONDS)
        if self._state != "stopped":
            self._state = "stopped"
            self.beat()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self.beat()
            self.sweep()
            # Real waits, as the lease keeper's: a FakeClock would spin through beats.
            self._wait_for_news(time.monotonic())

    def _wait_for_news(self, beaten_at: float) -> None:
        """Until the next beat is due: ``beat_seconds`` after the last, or sooner (at
        least MIN_GAP_SECONDS after it) once what a beat says has changed."""
        while not self._stop.is_set():
            left = self.beat_seconds - (time.monotonic() - beaten_at)
            if left <= 0 or not self._wake.wait(left):
                return
            self._stop.wait(MIN_GAP_SECONDS - (time.monotonic() - beaten_at))
            self._wake.clear()  # before looking: a change from now on wakes it again
            if self._news():
                return
            # Only which chunks of the same jobs, or fewer jobs: the beat when due says it.

    def _news(self) -> bool:
        """Whether a beat sooner than due has news: the worker's state changed, or it runs
        tasks of a job the last beat did not name. Tasks ending are not news: a worker
        of quick chunks is between two of them (its claim's round trip) most of the
        time, and every look would find it idle."""
        if self._written is None:
            return True
        state, jobs = self._written
        return self._state != state or not self._running.shape() <= jobs
