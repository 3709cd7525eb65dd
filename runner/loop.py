"""The worker loop of one process: receive, hand messages to chunk slots, stop cleanly.

One receive loop (this thread), ``concurrency`` chunk slots (a thread pool) and one
lease keeper (its own thread), as in dramatiq's worker. Stopping is two-step: the first
request stops receiving and asks running chunks to stop at their next checkpoint; the
loop then waits for them up to ``stop_timeout_seconds``.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.clock import Clock, SystemClock
from jobs.errors import StorageError
from jobs.job import ChunkedJob
from runner.lease import LeaseKeeper
from runner.tasks import Context, handle

log = logging.getLogger(__name__)

#: Exit codes of ``runner start`` (documented in docs/cli.md).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_STOP_TIMEOUT = 3
EXIT_FORCED = 130

DEFAULT_CONCURRENCY = 1
DEFAULT_POLL_MAX_SECONDS = 1.0
POLL_MIN_SECONDS = 0.02
DEFAULT_STOP_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class WorkerSettings:
    """How one worker process runs.

    Attributes:
        concurrency: chunks run at once in this process (threads).
        poll_max_seconds: longest wait between receives while the queues are empty
            (waits start short and double up to this).
        burst: exit once no work is left for these job types.
        stop_timeout_seconds: on a stop request, how long running chunks get to reach
            their next checkpoint before the process exits anyway.
    """

    concurrency: int = DEFAULT_CONCURRENCY
    poll_max_seconds: float = DEFAULT_POLL_MAX_SECONDS
    burst: bool = False
    stop_timeout_seconds: float = DEFAULT_STOP_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.poll_max_seconds <= 0 or self.stop_timeout_seconds < 0:
            raise ValueError("poll_max_seconds must be > 0 and stop_timeout_seconds >= 0")


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


class WorkerLoop:
    """Serves the queues of ``job_classes`` from one process until stopped (or, in burst
    mode, until no work is left)."""

    def __init__(
        self,
        storage: Storage,
        job_classes: list[type[ChunkedJob]],
        settings: WorkerSettings = WorkerSettings(),
        clock: Clock | None = None,
        worker_id: str | None = None,
    ):
        _check_queues(job_classes)
        self.clock = clock or SystemClock()
        self.settings = settings
        self.storage = storage
        store = CheckpointStore(storage, self.clock)
        keeper = LeaseKeeper(storage.queues, self.clock)
        self.context = Context(
            store,
            storage.queues,
            keeper,
            self.clock,
            worker_id or new_worker_id(),
            {cls.job_type(): cls for cls in job_classes},
        )
        self._classes = job_classes
        self._stop = threading.Event()

    @property
    def worker_id(self) -> str:
        return self.context.worker_id

    def request_stop(self) -> None:
        """Stop receiving and ask running chunks to stop (idempotent; signal-safe: it
        only sets flags)."""
        self._stop.set()
        self.context.stopping.set()

    def run(self) -> int:
        """Serve until stopped; returns an exit code."""
        self._prepare()
        keeper = self.context.keeper
        keeper.start()
        pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="chunk")
        inflight: set[Future[None]] = set()
        try:
            self._serve(pool, inflight)
        finally:
            self.request_stop()
            finished = self._drain(inflight)
            keeper.stop()
            pool.shutdown(wait=False, cancel_futures=True)
        return EXIT_OK if finished else EXIT_STOP_TIMEOUT

    def _prepare(self) -> None:
        self.context.store.ensure()
        for cls in self._classes:
            self.storage.queues.create_queue(cls.queue)
            self.storage.queues.create_queue(cls.poison_queue())

    def _serve(self, pool: ThreadPoolExecutor, inflight: set[Future[None]]) -> None:
        idle_seconds = POLL_MIN_SECONDS
        while not self._stop.is_set():
            inflight.difference_update([f for f in inflight if f.done()])
            free = self.settings.concurrency - len(inflight)
            if free <= 0:
                wait(inflight, timeout=0.5, return_when=FIRST_COMPLETED)
                continue
            received = self._receive(pool, inflight, free)
            if received:
                idle_seconds = POLL_MIN_SECONDS
                continue
            if self.settings.burst and not inflight and self._no_work_left():
                log.info("burst: no work left, exiting")
                return
            self._stop.wait(idle_seconds)
            idle_seconds = min(idle_seconds * 2, self.settings.poll_max_seconds)

    def _receive(self, pool: ThreadPoolExecutor, inflight: set[Future[None]], free: int) -> int:
        received = 0
        for cls in self._classes:
            if free <= 0 or self._stop.is_set():
                break
            # Taken before the call: the lease can only have started later than this.
            received_at = self.clock.monotonic()
            try:
                batch = self.storage.queues.receive(
                    cls.queue, max_messages=min(free, 32), visibility_seconds=cls.lease_seconds
                )
            except StorageError as error:
                log.warning("receiving from %s failed: %s", cls.queue, error)
                continue
            for message in batch:
                inflight.add(pool.submit(self._handle, cls.queue, message, received_at))
            received += len(batch)
            free -= len(batch)
        return received

    def _handle(self, queue: str, message, received_at: float) -> None:  # type: ignore[no-untyped-def]
        try:
            handle(self.context, queue, message, received_at)
        except Exception:  # no message may kill the worker
            log.exception(
                "handling message %s from %s failed; it will be retried", message.id, queue
            )

    def _no_work_left(self) -> bool:
        """Every job of these types has ended and their queues hold nothing at all."""
        types = {cls.job_type() for cls in self._classes}
        try:
            jobs = [job for job in self.context.store.list_jobs() if job.job_type in types]
            if any(job.state not in ("done", "failed") for job in jobs):
                return False
            return all(
                self.storage.queues.approximate_length(cls.queue) == 0 for cls in self._classes
            )
        except StorageError as error:
            log.warning("checking for remaining work failed: %s", error)
            return False

    def _drain(self, inflight: set[Future[None]]) -> bool:
        pending = {f for f in inflight if not f.done()}
        if not pending:
            return True
        log.info(
            "stopping: waiting up to %.0f s for %d running chunk(s)",
            self.settings.stop_timeout_seconds,
            len(pending),
        )
        _, still = wait(pending, timeout=self.settings.stop_timeout_seconds)
        if still:
            log.warning("%d chunk(s) did not stop in time; their leases will lapse", len(still))
        return not still


def _check_queues(job_classes: list[type[ChunkedJob]]) -> None:
    from jobs.errors import ConfigurationError

    if not job_classes:
        raise ConfigurationError("name at least one job type to serve")
    seen: dict[str, str] = {}
    for cls in job_classes:
        other = seen.setdefault(cls.queue, cls.job_type())
        if other != cls.job_type():
            raise ConfigurationError(
                f"{other} and {cls.job_type()} share queue {cls.queue!r}; give each its own"
            )
