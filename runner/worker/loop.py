"""The worker loop of one process: receive, hand messages to chunk slots, stop cleanly.

One receive loop (this thread) and ``concurrency`` chunk slots (a thread each), as in
dramatiq's worker, with helpers on threads of their own: the lease keeper (a thread that
decides what is due and two small pools that renew and refresh, :mod:`runner.worker.leases.lease`),
the stop-order watcher, the finisher, the heartbeat and the slot keeper. Stopping is two-step:
the first request stops receiving and asks running chunks to stop at their next
checkpoint; the loop then waits for them, and for the finisher to mark done the chunks
that finished, up to ``stop_timeout_seconds`` in all.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import secrets
import socket
import threading
from dataclasses import dataclass

from checkpoint import layout, retries
from checkpoint.clock import Clock, SystemClock
from checkpoint.errors import BadRecord, ConfigurationError, StorageError
from checkpoint.lease_book import LeaseBook
from checkpoint.limits.book import LimitBook
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.storage import QueueMessage, Storage
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook
from jobs.job import ChunkedJob
from runner.worker.hooks import HookChain
from runner.worker.intake import takes_submissions
from runner.worker.job_cache import JobCache
from runner.worker.leases.lease import Lease, LeaseKeeper, first_lease_seconds, take_lease
from runner.worker.leases.sizes import LeaseSizes
from runner.worker.limits.admission import Admission
from runner.worker.limits.slot_keeper import SlotKeeper
from runner.worker.observing.heartbeat import BEAT_SECONDS, Heartbeat, Identity
from runner.worker.observing.logs import in_context, worker_ids
from runner.worker.observing.metrics_hooks import Metrics
from runner.worker.observing.recorder import SILENT, Recorder
from runner.worker.poison import PoisonRouter
from runner.worker.receiving.polling import own_queues, served_queues
from runner.worker.receiving.prefetch import RECEIVE_BATCH, Slots
from runner.worker.receiving.receive_order import Received, ReceiveOrder, receive_from
from runner.worker.stop_orders import StopOrderWatcher
from runner.worker.tasks.chunk_finisher import Finisher
from runner.worker.tasks.delivery import Context
from runner.worker.tasks.job_completion import Completion
from runner.worker.tasks.life import handle

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
        prefetch: messages received ahead of a free slot (leased and renewed while they
            wait). None: adapt to how long chunks take (:mod:`runner.worker.receiving.prefetch`):
            none for long chunks, so idle workers elsewhere can take the work, up to 64 for
            chunks of milliseconds, so one receive feeds many of them.
        poll_max_seconds: longest wait between receives while the queues are empty
            (waits start short and double up to this).
        burst: exit once no work is left for these job types.
        stop_timeout_seconds: on a stop request, how long running chunks get to reach
            their next checkpoint, and finished ones to be marked done, before the
            process exits anyway (one deadline for both).
        heartbeat_seconds: how often the worker's heartbeat record is written
            (:mod:`runner.worker.observing.heartbeat`).
    """

    concurrency: int = DEFAULT_CONCURRENCY
    prefetch: int | None = None
    poll_max_seconds: float = DEFAULT_POLL_MAX_SECONDS
    burst: bool = False
    stop_timeout_seconds: float = DEFAULT_STOP_TIMEOUT_SECONDS
    heartbeat_seconds: float = BEAT_SECONDS

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.prefetch is not None and self.prefetch < 0:
            raise ValueError("prefetch must be >= 0")
        if self.poll_max_seconds <= 0 or self.stop_timeout_seconds < 0:
            raise ValueError("poll_max_seconds must be > 0 and stop_timeout_seconds >= 0")
        if self.heartbeat_seconds <= 0:
            raise ValueError("heartbeat_seconds must be > 0")


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


def assemble(
    storage: Storage,
    job_classes: list[type[ChunkedJob]],
    clock: Clock,
    worker_id: str,
    recorder: Recorder = SILENT,
) -> Context:
    """The parts one worker's tasks share, each given what it uses. The keeper, the
    stop-order watcher and the finisher are not started: the loop starts them (a test may
    drive them by hand). ``recorder`` is told what happens (metrics)."""
    store = CheckpointStore(storage, clock)
    sizes = LeaseSizes(LeaseBook(storage.records), job_classes, clock)
    keeper = LeaseKeeper(storage.queues, clock, recorder=recorder, sizing=sizes)
    classes = {cls.job_type(): cls for cls in job_classes}
    recorder.leases_sized(list(classes), lambda job_type: sizes.seconds(classes[job_type]))
    job_cache = JobCache(store, clock)
    stop_orders = StopOrderWatcher(job_cache, clock)
    completion = Completion(store, storage.queues, classes, failed=stop_orders.job_changed)
    job_cache.on_read = completion.observe  # a job id's new incarnation: its total forgotten
    # The concerns on the points of a message's life, called in this order.
    metrics = () if recorder is SILENT else (Metrics(recorder),)  # off: no concern at all
    hooks = HookChain(*metrics, stop_orders)
    return Context(
        store=store,
        queues=storage.queues,
        keeper=keeper,
        clock=clock,
        worker_id=worker_id,
        job_classes=classes,
        by_queue=served_queues(job_classes, ()),
        poison=PoisonRouter(storage.queues, keeper, clock),
        completion=completion,
        finisher=Finisher(store, keeper, completion, clock, hooks),
        job_cache=job_cache,
        stop_orders=stop_orders,
        admission=Admission(
            LimitBook(storage.records, clock), clock, worker_id, job_classes, keeper.sizing.seconds
        ),
        lease_sizes=sizes,
        workers=WorkerBook(storage.records),
        hooks=hooks,
    )


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
        recorder: Recorder = SILENT,
    ):
        _check_queues(job_classes)
        self.clock = clock or SystemClock()
        self.settings = settings
        self.storage = storage
        self.context = assemble(
            storage, job_classes, self.clock, worker_id or new_worker_id(), recorder
        )
        self._classes = job_classes
        self._stop = threading.Event()
        self.admission = self.context.admission
        self.slot_keeper = SlotKeeper(self.admission, min(map(first_lease_seconds, job_classes)))
        #: When the last receive round took no message for want of tokens: the seconds
        #: until the next one is due (None: it was not the tokens).
        self._token_wait: float | None = None
        self._work: queue.SimpleQueue[tuple[str, QueueMessage, float, Lease] | None] = (
            queue.SimpleQueue()
        )
        # Messages received and not yet finished (running or waiting for a slot).
        self._outstanding = 0
        self._slots = Slots(settings.concurrency, settings.prefetch, self.context.chunk_times)
        self.prefetch, self._out_of_turn = self._slots.prefetch, self._slots.out_of_turn
        self._outstanding_changed = threading.Condition()
        # The queues served; _serve_also adds those of unfinished jobs submitted with
        # another queue count than their class has now.
        self._order = ReceiveOrder(
            self.context.by_queue,
            job_classes,
            self.clock,
            settings.poll_max_seconds,
            chunk_times=self.context.chunk_times,
        )
        identity = Identity(
            worker_id=self.worker_id,
            queues=self._order.job_queues(),
            job_types=tuple(cls.job_type() for cls in job_classes),
            concurrency=settings.concurrency,
        )
        self.heartbeat = Heartbeat(
            WorkerBook(storage.records),
            identity,
            self.context.running,
            self.clock,
            settings.heartbeat_seconds,
        )

    @property
    def worker_id(self) -> str:
        return self.context.worker_id

    def request_stop(self) -> None:
        """Stop receiving and ask running chunks to stop (idempotent; signal-safe: it
        only sets flags)."""
        self._stop.set()
        self.context.stopping.set()
        self.heartbeat.stopping()

    def run(self) -> int:
        """Serve until stopped; returns an exit code. Every line logged by its threads
        carries the worker id (:mod:`runner.worker.observing.logs`)."""
        with worker_ids(self.worker_id):
            return self._run()

    def _run(self) -> int:
        try:
            self._prepare()
        except StorageError:
            if self._stop.is_set():
                return EXIT_OK  # stopped while waiting for the store
            raise
        keeper = self.context.keeper
        keeper.start()
        self.context.lease_sizes.start()
        self.context.stop_orders.start()
        self.context.finisher.start()
        self.heartbeat.start()
        self.slot_keeper.start()
        slots = [
            threading.Thread(target=in_context(self._slot), name=f"chunk-{n + 1}", daemon=True)
            for n in range(self.settings.concurrency)
        ]
        for slot in slots:
            slot.start()
        try:
            self._serve()
        finally:
            self.request_stop()
            finished = self._drain(slots)
            keeper.stop()
            self.context.lease_sizes.stop()
            self.context.stop_orders.stop()
            self.heartbeat.stop()
            self.slot_keeper.stop()
        return EXIT_OK if finished else EXIT_STOP_TIMEOUT

    def _prepare(self) -> None:
        """Tables, container and queues, tried until they exist or the worker is
        stopped: a store out of reach at start-up is waited for (a line per try), never
        a reason to exit. The job catalogue is read for unfinished jobs whose queues
        their class no longer names (it was submitted with another ``queues``)."""
        budget = Budget(retries.START_UP, self.clock, stopping=self._stop)
        self.context.store.ensure(budget)
        try:
            self.admission.define(budget)
        except BadRecord as bad:  # still served: a take reading it skips the queue
            log.warning("a limit of these job types cannot be read: %s", bad)
        for served in self.context.by_queue:
            self._create(served, budget)
        self._serve_also(self.context.store.list_jobs(budget), budget)

    def _create(self, queue: str, budget: Budget) -> None:
        names = [queue, layout.poison_queue_of(queue)]
        if takes_submissions(self.context.by_queue, queue):
            names = [queue, self.context.by_queue[queue].rejected_queue()]
        elif layout.is_resume_queue(queue):
            # A resume queue has no poison queue of its own: a message from it is
            # poisoned into that of its chunk's queue (runner.worker.poison).
            names = [queue]
        for name in names:
            budget.call(functools.partial(self.storage.queues.create_queue, name))

    def _serve_also(self, jobs: list[JobRecord], budget: Budget) -> None:
        """Serve the queues of unfinished ``jobs`` of these types that their class does
        not name (submitted when it had another ``queues``): looked for at start, and by
        a burst worker at each check for remaining work."""
        served = self.context.by_queue
        added = {q: cls for q, cls in served_queues(self._classes, jobs).items() if q not in served}
        for name, cls in added.items():
            self._create(name, budget)
            self._order.serve(name, cls)
        if added:
            log.info("serving also %s: jobs were submitted to them", ", ".join(added))
            self.heartbeat.serving(self._order.job_queues())

    def _serve(self) -> None:
        idle_seconds = POLL_MIN_SECONDS
        while not self._stop.is_set():
            hand_back_in = self._hand_back()
            with self._outstanding_changed:
                if not self._slots.should_receive(self._outstanding):
                    self._outstanding_changed.wait(
                        min(0.5, 0.5 if hand_back_in is None else hand_back_in)
                    )
                    continue
                free = self._slots.capacity() - self._outstanding
            if self._receive(free):
                idle_seconds = POLL_MIN_SECONDS
                continue
            if (
                self.settings.burst
                and self._outstanding == 0
                and self.context.finisher.idle()
                and self._no_work_left()
            ):
                log.info("burst: no work left, exiting")
                return
            if self._token_wait is not None:
                # Limited, not idle: look again when the next token is due.
                self._stop.wait(min(self._token_wait, self.settings.poll_max_seconds))
                continue
            self._stop.wait(idle_seconds)
            idle_seconds = min(idle_seconds * 2, self.settings.poll_max_seconds)

    def _receive(self, free: int) -> int:
        """One receive round (:mod:`runner.worker.receiving.receive_order`): per job type, tokens
        and slots are taken once for up to 32 messages, then its resume queue and its
        queues are asked in order until they are had; ``free``: messages this process
        may still hold."""
        received, self._token_wait = 0, None
        for cls, queues in self._order.next_round():
            if free <= 0 or self._stop.is_set():
                break
            if self._outstanding >= self.settings.concurrency and self._out_of_turn.resting(cls):
                continue  # it handed a message back: another worker's to take
            # Tokens and slots first: a message received is leased and its dequeue
            # counted, so none is received that could not start (admission.py).
            admitted = self.admission.admit(cls, min(free, RECEIVE_BATCH))
            if admitted.count == 0:
                self._token_wait = _token_wait(self._token_wait, admitted.wait_seconds)
                continue
            batch: list[Received] = []
            # One length for the whole round: each lease must be what its receive gave.
            lease_seconds = self.context.keeper.sizing.seconds(cls)
            for name in queues:  # resumed work first: the resume queue, then the rest
                wanted = admitted.count - len(batch)
                if wanted <= 0 or self._stop.is_set():
                    break
                got = receive_from(self.storage.queues, self.clock, name, wanted, lease_seconds)
                self._order.asked(cls, name, len(got), wanted)
                batch += got
            self.admission.received(cls, admitted, [message for _, message, _ in batch])
            with self._outstanding_changed:
                self._outstanding += len(batch)
            out_of_turn, keeper = self._order.out_of_turn(cls), self.context.keeper
            for queue_name, message, received_at in batch:
                # Held at once, so a message waiting for a free slot is renewed too.
                of = self.context.by_queue[queue_name]
                lease = take_lease(keeper, queue_name, message, of, received_at, lease_seconds)
                if out_of_turn:
                    self._out_of_turn.wait(cls, message, lease, self.clock.monotonic())
                self._work.put((queue_name, message, received_at, lease))
            received += len(batch)
            free -= len(batch)
        return received

    def _hand_back(self) -> float | None:
        """:meth:`runner.worker.receiving.prefetch.OutOfTurn.hand_back`: seconds until the next."""
        return self._out_of_turn.hand_back(self.clock.monotonic(), self._release_unrun)

    def _release_unrun(self, lease: Lease, message: QueueMessage) -> None:
        self.context.keeper.release(lease, 0)
        self.admission.ended(message)
        with self._outstanding_changed:
            self._outstanding -= 1

    def _slot(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            queue, message, received_at, lease = item
            started, chunk_seconds = self.clock.monotonic(), None
            if not self._slots.begin(lease, started):
                continue  # handed back while it waited (_hand_back)
            try:
                if self._stop.is_set():
                    self.context.keeper.release(lease, 0)  # never started: hand it back
                else:
                    chunk_seconds = handle(self.context, queue, message, received_at, lease)
            except Exception:  # no message may kill the worker
                log.exception(
                    "handling message %s from %s failed; it will be retried", message.id, queue
                )
            finally:
                self.admission.ended(message)  # every ending passes here, once
                cls = self.context.by_queue[queue]
                job_type = cls.job_type() if chunk_seconds is not None else ""
                with self._outstanding_changed:
                    self._outstanding -= 1
                    slot_seconds = self.clock.monotonic() - started
                    if self._slots.end(job_type, chunk_seconds, slot_seconds, self._outstanding):
                        self._outstanding_changed.notify()

    def _no_work_left(self) -> bool:
        """Every job of these types has ended or waits on others, and their queues hold
        nothing at all (then a job type that had no job at all is named: see
        :func:`_say_what_was_found`).

        A job that waits on others is not waited for: it starts only when the last of
        them ends, whose hand-off sends its planning message before anything else, so a
        start under way is a message in these queues; one that waits on a failed job
        would keep a burst worker for ever."""
        types = {cls.job_type() for cls in self._classes}
        try:
            every = self.context.store.list_jobs()
            self._serve_also(every, self.context.store.budget())
            jobs = [job for job in every if job.job_type in types]
            if not all(job.ended or job.state == "waiting" for job in jobs):
                return False
            if not all(
                self.storage.queues.approximate_length(queue) == 0
                for queue in self.context.by_queue
            ):
                return False
        except StorageError as error:
            log.warning("checking for remaining work failed: %s", error)
            return False
        _say_what_was_found(self._classes, every, self.storage.description)
        return True

    def _drain(self, slots: list[threading.Thread]) -> bool:
        """Wait for the chunks, then the finisher: one ``stop_timeout_seconds`` for both."""
        for _ in slots:
            self._work.put(None)  # after any buffered work, which is released unrun
        deadline = self.clock.monotonic() + self.settings.stop_timeout_seconds
        if self._outstanding:
            timeout, waiting = self.settings.stop_timeout_seconds, self._outstanding
            log.info("stopping: waiting up to %.0f s for %d chunk(s)", timeout, waiting)
        for slot in slots:
            slot.join(max(0.0, deadline - self.clock.monotonic()))
        still = sum(slot.is_alive() for slot in slots)
        if still:
            log.warning("%d chunk(s) did not stop in time; their leases will lapse", still)
        # Finished chunks are marked done and their messages deleted before leaving, in
        # what the chunks left of the time (a stop takes one timeout, not one each).
        left = max(0.0, deadline - self.clock.monotonic())
        return self.context.finisher.stop(left) and not still


def _token_wait(current: float | None, wait_seconds: float) -> float | None:
    """The wait for tokens after a receive round: the shortest of those noted."""
    if wait_seconds <= 0:
        return current
    wait = max(wait_seconds, POLL_MIN_SECONDS)
    return min(wait, current or wait)


def _say_what_was_found(
    classes: list[type[ChunkedJob]], jobs: list[JobRecord], description: str
) -> None:
    """Warn of a job type with no job at all in the store: a burst that ends at once
    says nothing otherwise, and the cause is usually a job submitted as another
    ``module:Class``, or to another store."""
    for cls in classes:
        if any(job.job_type == cls.job_type() for job in jobs):
            continue
        others = sorted({job.job_type for job in jobs if job.queue == cls.queue})
        hint = f"; its queue's jobs were submitted as {', '.join(others)}" if others else ""
        log.warning(
            "burst: nothing to serve for %s: no job of this type in %s%s",
            cls.job_type(),
            description,
            hint,
        )


def _check_queues(job_classes: list[type[ChunkedJob]]) -> None:
    if not job_classes:
        raise ConfigurationError("name at least one job type to serve")
    seen: dict[str, str] = {}
    for cls in job_classes:
        for name in own_queues(cls):
            other = seen.setdefault(name, cls.job_type())
            if other != cls.job_type():
                raise ConfigurationError(
                    f"{other} and {cls.job_type()} share queue {name!r}; give each its own"
                )
