"""Leases on received messages, and the one keeper per worker process that renews them.

A lease is renewed through UpdateMessage at 70 % of its length (earlier in a lease under
10 s: :func:`renew_after_seconds`); each renewal returns a new pop receipt and the lease
always keeps the newest (the older one stops working at once). Renewal runs off the
chunks' threads, so a chunk busy in pure Python still has its lease renewed: the GIL is
handed over every few milliseconds, far inside any lease.

The keeper's own thread only decides what is due. Each renewal is made on a small pool
(:data:`RENEWAL_THREADS`), and what follows one (the ``on_renewed`` hook: the task
record's refresh) on a second pool (:data:`REFRESH_THREADS`): a renewal
or a refresh that is slow (a delayed reply, a store that hangs) holds up only its own
lease, never the others' renewals. A lease is handed to the pool once at a time.

A lease is *lost* when a renewal is refused (someone else received the message, or it
is gone), when renewals keep failing until the lease runs out, or when it is simply
past its end (the process was paused): the chunk then stops at its next checkpoint.
Past ``max_seconds`` a lease is no longer renewed, so a hung chunk frees its message.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from checkpoint import retries
from checkpoint.clock import Clock
from checkpoint.errors import LeaseLost, StorageError
from checkpoint.retries import Budget
from checkpoint.storage import QueueMessage, QueueStore
from jobs.job import ChunkedJob
from runner.worker.leases.pool import DaemonPool
from runner.worker.observing.logs import in_context
from runner.worker.observing.recorder import SILENT, Recorder

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Renew when this fraction of the lease has passed (the seeds' 70%) ...
RENEW_FRACTION = 0.7
#: ... but leave at least this long for the renewal (seconds): one UpdateMessage slowed
#: down and retried once inside the SDK took 3 s under injected faults, more than 30 % of
#: a short lease (1.5 s of 5 s) ...
RENEW_MARGIN_SECONDS = 3.0
#: ... and never renew before this fraction has passed (an UpdateMessage per half lease).
RENEW_EARLIEST_FRACTION = 0.5
#: After a failed renewal (service busy, unreachable), retry after this fraction.
RETRY_FRACTION = 0.1
#: Renewals made at once. A renewal is one UpdateMessage call, milliseconds when the
#: store is well: four threads keep a slow or hanging call from holding up the rest.
RENEWAL_THREADS = 4
#: Refreshes after renewals (``Lease.on_renewed``) made at once, off the renewals' pool.
REFRESH_THREADS = 2
#: Longest wait between two passes of the keeper's thread (seconds, real time).
MAX_PASS_SECONDS = 1.0
#: How long stopping waits for the keeper's thread, and for each of the worker's other
#: helper threads (stop-order watcher, heartbeat, slot keeper), before giving up on it: a
#: thread stuck in a call to a store that does not answer must not keep the worker
#: from exiting (they are daemons: the process ends without them). Real seconds.
KEEPER_STOP_SECONDS = 10.0

#: Held while a lease is marked lost: the renewal (under the lease's own lock), the
#: finisher and a delete can find it lost at once. One lock for every lease, not one
#: each: losses are rare, and a lock per message would cost more than the flag.
_LOSING = threading.Lock()


class Sizing(Protocol):
    """What sizes adaptive leases (:class:`runner.worker.leases.sizes.LeaseSizes`)."""

    def seconds_of(self, job_type: str) -> int | None:
        """The lease of ``job_type`` now; None: a lease keeps the length it was given."""
        ...

    def renewed(self, job_type: str, late_seconds: float) -> None:
        """A renewal was answered ``late_seconds`` after it was due."""
        ...

    def lost(self, job_type: str, lease_seconds: int) -> None:
        """A lease of ``lease_seconds`` was lost before its work ended."""
        ...

    def seconds(self, job_class: type[ChunkedJob]) -> int:
        """The lease a message of ``job_class`` gets now (whole seconds)."""
        ...


def first_lease_seconds(job_class: type[ChunkedJob]) -> int:
    """The lease a message of ``job_class`` gets before anything is learned: its fixed
    ``lease_seconds``, or the lower bound of an adaptive one (its shortest, too)."""
    return job_class.lease_seconds or job_class.lease_bounds[0]


class FixedLeases:
    """The sizing of a keeper that learns nothing: every class its fixed lease, an
    adaptive one its lower bound."""

    def seconds_of(self, job_type: str) -> int | None:
        return None

    def renewed(self, job_type: str, late_seconds: float) -> None: ...

    def lost(self, job_type: str, lease_seconds: int) -> None: ...

    def seconds(self, job_class: type[ChunkedJob]) -> int:
        return first_lease_seconds(job_class)


def renew_after_seconds(lease_seconds: float) -> float:
    """When a lease is renewed, counted from its start: at 70 % of a lease of 10 s or
    more; in a shorter one at :data:`RENEW_MARGIN_SECONDS` before its end, but not before
    half of it (a 5 s lease at 2.5 s, an 8 s lease at 5 s)."""
    with_margin = lease_seconds - RENEW_MARGIN_SECONDS
    usual = lease_seconds * RENEW_FRACTION
    return max(lease_seconds * RENEW_EARLIEST_FRACTION, min(usual, with_margin))


def end_margin_seconds(lease_seconds: float) -> float:
    """What a lease keeps for one last call before it runs out: its renewal, or the hand
    back of a lease whose pop receipt was lost (the state's write, which may be slowed
    and retried just as much): 30 % of a lease of 10 s or more, 3 s or half of a
    shorter one."""
    return lease_seconds - renew_after_seconds(lease_seconds)


@dataclass(eq=False)
class Lease:
    """A received message kept invisible for ``lease_seconds`` at a time.

    Times are on the monotonic clock. ``pop_receipt`` is always the newest; read it,
    and act on the message, only through :meth:`LeaseKeeper.finish`.
    """

    queue: str
    message_id: str
    pop_receipt: str
    lease_seconds: int
    acquired_at: float
    visible_at: float
    max_seconds: float | None = None
    on_renewed: Callable[[Lease], None] | None = None
    #: For a task that cannot hand back (finalize: no state to resume from): once the
    #: pop receipt is lost, ``on_record(lease, until)`` holds the task by its record
    #: alone up to ``until`` (monotonic), a fenced write, in place of the renewals.
    on_record: Callable[[Lease, float], None] | None = None
    next_renewal_at: float = 0.0
    #: When the renewal now scheduled was due (monotonic), failed tries not counted: a
    #: renewal's lateness is counted from here.
    due_at: float = 0.0
    lost_reason: str | None = None
    #: Set once, never cleared (a plain flag: an Event per message cost more than the
    #: rest of leasing it, and nobody waits on it).
    lost: bool = False
    active: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The chunk finished and its message is the finisher's to delete
    #: (runner.worker.tasks.chunk_finisher).
    handed_over: bool = False
    #: A renewal was applied but its answer lost, so the newest pop receipt is unknown:
    #: the message can be neither renewed nor deleted, only left to reappear.
    receipt_lost: bool = False
    #: When the renewal now in flight was sent (monotonic), or None.
    renewing_since: float | None = None
    #: The job type of the queue the message is in, and what is told of its renewals
    #: and of its loss.
    job_type: str = ""
    recorder: Recorder = SILENT
    #: Sizes the lease of an adaptive job type (None: fixed, nothing learned).
    sizing: Sizing | None = None

    def lose(self, reason: str, learned: bool = True) -> None:
        """Mark the lease lost for ``reason`` (the first reason given stays); told to
        the recorder once, however many threads find it lost at once, and to the
        sizing unless ``learned`` is False (a loss no longer lease would have saved:
        ``max_chunk_seconds``, the message deleted by someone)."""
        with _LOSING:
            if self.lost_reason is None:
                self.lost_reason = reason
            if self.lost:
                return
            self.lost = True
        self.recorder.lease_lost(self.job_type)
        if learned and self.sizing is not None:
            self.sizing.lost(self.job_type, self.lease_seconds)

    def schedule(self, started: float) -> None:
        """The lease runs from ``started`` (monotonic): its end and next renewal."""
        self.visible_at = started + self.lease_seconds
        self.next_renewal_at = self.due_at = started + renew_after_seconds(self.lease_seconds)

    def resized(self) -> None:
        """Take the adaptive lease of the job type now, for the renewal about to be made
        (a running chunk picks a new lease up here, not only new messages)."""
        if self.sizing is not None:
            seconds = self.sizing.seconds_of(self.job_type)
            if seconds is not None:
                self.lease_seconds = seconds

    def renewed(self, pop_receipt: str, started: float, answered: float) -> None:
        """A renewal sent at ``started`` was answered with ``pop_receipt`` at ``answered``
        (monotonic)."""
        self.pop_receipt = pop_receipt
        late_seconds = answered - self.due_at
        # Counted from before the call: the service's clock started no earlier.
        self.schedule(started)
        self.recorder.lease_renewed(self.job_type, late_seconds)
        if self.sizing is not None:
            self.sizing.renewed(self.job_type, late_seconds)

    def follow(self, queue: str, copy: QueueMessage, sent_at: float) -> tuple[str, str, str] | None:
        """Hold ``copy`` (just sent to ``queue``, hidden for a lease from ``sent_at``,
        monotonic) in place of the message leased so far; return the old message's queue,
        id and newest pop receipt, for its delete. None if the old one cannot be
        deleted (its receipt was lost: it comes back and is found a duplicate), and
        nothing changes if this lease is lost already."""
        assert copy.pop_receipt is not None, "a sent message comes with its pop receipt"
        with self.lock:
            if self.lost:
                return None
            old = (self.queue, self.message_id, self.pop_receipt)
            known = not self.receipt_lost
            self.queue, self.message_id, self.pop_receipt = queue, copy.id, copy.pop_receipt
            self.receipt_lost = False
            self.schedule(sent_at)
        return old if known else None

    def expired(self, now: float) -> bool:
        """True once the lease is lost or has run out (judged locally, no round trip)."""
        return self.lost or now >= self.visible_at

    def renewal_pending(self, now: float) -> bool:
        """True while the lease has run out locally but a renewal sent before its end is
        still waiting for its answer, for at most the lease's end margin: that answer
        says whether the message stayed ours (a renewal the service applies in time
        keeps it, however late the answer), so the task waits for it, not guesses."""
        since = self.renewing_since
        return (
            not self.lost
            and since is not None
            and since < self.visible_at
            and now < self.visible_at + end_margin_seconds(self.lease_seconds)
        )

    def wait_for_renewal(self, now: float) -> None:
        """Wait (real time, bounded as :meth:`renewal_pending` says) for the renewal in
        flight to be answered; the renewal holds the lease's lock while it waits."""
        if not self.renewal_pending(now):
            return
        bound = self.visible_at + end_margin_seconds(self.lease_seconds) - now
        if self.lock.acquire(timeout=bound):
            self.lock.release()

    def must_hand_back(self, now: float) -> bool:
        """True once a lease that cannot be renewed is close to running out: the task
        should save its state and stop while the record is still its own."""
        if not self.receipt_lost or self.on_record is not None:
            return False  # renewable, or leased on its record from now on
        return now >= self.visible_at - end_margin_seconds(self.lease_seconds)

    def budget(self, policy: retries.RetryPolicy, clock: Clock) -> Budget:
        """Retries of ``policy`` for as long as this lease lasts (renewals extend it)."""
        return Budget(policy, clock, deadline=lambda: self.visible_at)

    def why_lost(self, now: float) -> str:
        if self.lost_reason:
            return self.lost_reason
        return f"lease of message {self.message_id} ran out before it was renewed"


class LeaseKeeper:
    """Renews every lease of one worker process: its thread decides what is due,
    a small pool renews, a second one refreshes (see the module's docstring).

    Args:
        queues: the queues the leased messages are in.
        clock: monotonic time for the leases (waits between passes are real time).
        renewal_threads: renewals made at once.
        refresh_threads: ``on_renewed`` hooks run at once.
        recorder: told of each lease's renewals and loss (metrics), or silent.
        sizing: sizes adaptive leases, told of their renewals' lateness and losses.
    """

    def __init__(
        self,
        queues: QueueStore,
        clock: Clock,
        renewal_threads: int = RENEWAL_THREADS,
        refresh_threads: int = REFRESH_THREADS,
        recorder: Recorder = SILENT,
        sizing: Sizing | None = None,
    ):
        self._queues, self._clock, self._recorder = queues, clock, recorder
        self.sizing: Sizing = sizing or FixedLeases()  # None: every lease keeps its length
        self._leases: set[Lease] = set()
        self._guard = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_pass_at = float("inf")  # until the first pass: wake on every new lease
        # Threads start on first use (daemons: a call hanging at exit is dropped).
        self._renewals = DaemonPool(renewal_threads, "lease-renewal")
        self._refreshes = Refreshes(refresh_threads)
        #: Leases handed to the renewal pool and not back yet (under ``_guard``).
        self._renewing: set[Lease] = set()

    # ----------------------------------------------------------------- leasing

    def lease(
        self,
        queue: str,
        message: QueueMessage,
        lease_seconds: int,
        *,
        received_at: float,
        max_seconds: float | None = None,
        on_renewed: Callable[[Lease], None] | None = None,
        job_type: str = "",
    ) -> Lease:
        """Start renewing a message received at ``received_at`` (monotonic); its
        renewals and its loss are told to the keeper's recorder under ``job_type``."""
        assert message.pop_receipt is not None, "only a received message can be leased"
        lease = Lease(
            queue,
            message.id,
            message.pop_receipt,
            lease_seconds,
            acquired_at=received_at,
            visible_at=received_at + lease_seconds,
            max_seconds=max_seconds,
            on_renewed=on_renewed,
            job_type=job_type,
            recorder=self._recorder,
            sizing=self.sizing,
        )
        lease.schedule(received_at)
        with self._guard:
            self._leases.add(lease)
            # Wake the keeper only if this lease is due before it would wake anyway.
            wake = lease.next_renewal_at < self._next_pass_at
        if wake:
            self._wake.set()
        return lease

    def finish(self, lease: Lease, action: Callable[[str], None], doing: str) -> bool:
        """Stop renewing ``lease`` and run ``action(newest pop receipt)`` on its message.

        The lease's lock keeps a renewal from rotating the receipt meanwhile. Returns
        False if the lease was lost (nothing done), the action found it gone, or the
        store did not answer while the lease lasted: then the message comes back when
        the lease runs out, and whoever receives it finds the task's record as this
        worker left it. ``doing`` names the action for that warning ("deleting").
        """
        with self._guard:
            self._leases.discard(lease)
        with lease.lock:
            lease.active = False
            if lease.lost or lease.receipt_lost:
                return False  # not ours to act on, or no receipt to act with
            try:
                action(lease.pop_receipt)
            except LeaseLost as lost:
                _refused_at_the_end(lease, lost, self._clock.monotonic())
                return False
            except StorageError as error:
                what = "%s message %s failed: %s; it comes back when its lease runs out"
                log.warning(what, doing, lease.message_id, error)
                return False
        return True

    def delete(self, lease: Lease) -> bool:
        """Delete the leased message (the task is done or moved), retried while the lease
        lasts (a delete applied with its answer lost comes back as a lost lease)."""
        budget = lease.budget(retries.MESSAGE, self._clock)
        return self.finish(
            lease,
            lambda receipt: budget.call(
                lambda: self._queues.delete(lease.queue, lease.message_id, receipt)
            ),
            "deleting",
        )

    def delete_many(self, leases: list[Lease]) -> None:
        """Delete the leased messages, one call per queue (their tasks are done).

        Each lease is made inactive under its lock first, so no renewal can rotate its
        receipt once it is read; a lease found lost is left alone, as in :meth:`finish`.
        """
        with self._guard:
            self._leases.difference_update(leases)
        by_queue: dict[str, list[Lease]] = {}
        for lease in leases:
            with lease.lock:
                lease.active = False
                if not lease.lost:
                    by_queue.setdefault(lease.queue, []).append(lease)
        for queue, batch in by_queue.items():
            try:
                errors = self._delete_leased(queue, batch)
            except StorageError as error:
                log.warning("deleting %d message(s) from %s failed: %s", len(batch), queue, error)
                continue
            for lease, failure in zip(batch, errors, strict=True):
                if isinstance(failure, LeaseLost):
                    _refused_at_the_end(lease, failure, self._clock.monotonic())
                elif failure is not None:
                    log.warning("deleting message %s failed: %s", lease.message_id, failure)

    def _delete_leased(self, queue: str, leases: list[Lease]) -> list[StorageError | None]:
        # Retried while the leases last; a delete applied with its answer lost is sent
        # again by the SDK and then finds the message gone: LeaseLost, harmless.
        first_to_lapse = min(leases, key=lambda lease: lease.visible_at)
        budget = first_to_lapse.budget(retries.MESSAGE, self._clock)
        pairs = [(lease.message_id, lease.pop_receipt) for lease in leases]
        return budget.call(lambda: self._queues.delete_many(queue, pairs))

    def release(self, lease: Lease, visibility_seconds: int = 0) -> bool:
        """Stop leasing; the message becomes visible after ``visibility_seconds``."""

        budget = lease.budget(retries.MESSAGE, self._clock)

        def update(receipt: str) -> None:
            budget.call(
                lambda: self._queues.update(
                    lease.queue, lease.message_id, receipt, visibility_seconds=visibility_seconds
                )
            )

        return self.finish(lease, update, "releasing")

    def drop(self, lease: Lease) -> None:
        """Stop renewing without touching the message (it is someone else's now)."""
        with self._guard:
            self._leases.discard(lease)
        with lease.lock:
            lease.active = False

    def leased(self) -> list[Lease]:
        with self._guard:
            return list(self._leases)

    # ----------------------------------------------------------------- renewing

    def renew_due(self) -> float:
        """Renew every lease that is due and wait for those renewals and the refreshes
        they queued; return seconds until the next one is due. What the keeper's thread
        does, made in the caller's time: for a test on a fake clock, and
        :mod:`jobs.testing`."""
        for renewal in self.start_due():
            refresh = renewal.result()
            if refresh is not None:
                refresh.result()
        return self.until_next_due()

    def start_due(self) -> list[Future[Future[None] | None]]:
        """Hand every due lease that is not being renewed already to the renewal pool.

        Returns the renewals started; each one's result is the refresh it queued, if any.
        """
        now = self._clock.monotonic()
        with self._guard:
            due = [
                lease
                for lease in self._leases
                if not lease.lost and lease not in self._renewing and now >= lease.next_renewal_at
            ]
            self._renewing.update(due)
        return [_submit(self._renewals, self._renew_in_pool, lease) for lease in due]

    def until_next_due(self) -> float:
        """Seconds until the next renewal is due, of the leases not being renewed now (a
        renewal that ends wakes the keeper if its lease is due sooner than its pass)."""
        with self._guard:
            upcoming = [
                lease.next_renewal_at
                for lease in self._leases
                if not lease.lost and lease not in self._renewing
            ]
        return max(0.0, min(upcoming) - self._clock.monotonic()) if upcoming else 3600.0

    def _renew_in_pool(self, lease: Lease) -> Future[None] | None:
        refresh = None
        try:
            # Stopped: the refresh pool takes no more work, and nobody waits for it.
            if self._renew(lease) and not self._stopped.is_set():
                refresh = self._refreshes.queue(lease)
        except Exception:  # a bug: logged, tried again later, the other leases unharmed
            log.exception("renewing message %s failed", lease.message_id)
            lease.next_renewal_at = self._clock.monotonic() + lease.lease_seconds * RETRY_FRACTION
        finally:
            with self._guard:
                self._renewing.discard(lease)
                wake = not lease.lost and lease.next_renewal_at < self._next_pass_at
            if wake:
                self._wake.set()
        return refresh

    def _renew(self, lease: Lease) -> bool:
        """Renew the lease now if it is still leased; True if it was renewed."""
        with lease.lock:
            if not lease.active or lease.lost:
                return False
            started = self._clock.monotonic()
            if lease.max_seconds is not None and started - lease.acquired_at >= lease.max_seconds:
                lease.next_renewal_at = lease.visible_at  # no more renewals: let it lapse
                lease.lose(
                    f"ran past max_chunk_seconds ({lease.max_seconds:g} s); lease not renewed",
                    learned=False,
                )
                return False
            if lease.receipt_lost:
                _lease_on_record(lease, started)
                return False  # the record was the write: nothing to refresh after it
            lease.renewing_since = started
            lease.resized()
            try:
                receipt = self._queues.update(
                    lease.queue,
                    lease.message_id,
                    lease.pop_receipt,
                    visibility_seconds=lease.lease_seconds,
                )
            except LeaseLost as lost:
                _refused(lease, started, lost)
                return False
            except StorageError as error:
                _renewal_failed(lease, started, error)
                return False
            finally:
                lease.renewing_since = None
            lease.renewed(receipt.pop_receipt, started, self._clock.monotonic())
        return True

    # ----------------------------------------------------------------- thread

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=in_context(self._run), name="lease-keeper", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            # Cleared before the pass: a new lease or an ended renewal during the pass sets
            # it again, and since _next_pass_at is infinite meanwhile, every one does.
            self._wake.clear()
            try:
                self.start_due()
                wait = self.until_next_due()
            except Exception:  # the keeper must outlive any one bad pass
                log.exception("lease keeper pass failed")
                wait = 0.5
            wait = min(wait, MAX_PASS_SECONDS)
            with self._guard:
                self._next_pass_at = self._clock.monotonic() + wait
            self._wake.wait(wait)
            with self._guard:
                self._next_pass_at = float("inf")

    def stop(self) -> None:
        """Stop the thread and the pools (idempotent). Held leases are left to lapse; a
        renewal or refresh under way ends on its own."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(KEEPER_STOP_SECONDS)
        self._renewals.shutdown()
        self._refreshes.shutdown()


def take_lease(
    keeper: LeaseKeeper,
    queue: str,
    message: QueueMessage,
    job_class: type[ChunkedJob],
    received_at: float,
    lease_seconds: int | None = None,
) -> Lease:
    """Have ``keeper`` renew a message just received from ``queue`` (``received_at``:
    monotonic, before the receive call) under its job class's lease: its length
    (``lease_seconds``, the visibility the receive gave; None: what the keeper gives
    the class now), ``max_chunk_seconds`` and job type."""
    return keeper.lease(
        queue,
        message,
        lease_seconds if lease_seconds is not None else keeper.sizing.seconds(job_class),
        received_at=received_at,
        max_seconds=job_class.max_chunk_seconds,
        job_type=job_class.job_type(),
    )


class Refreshes:
    """What follows the renewals: each lease's ``on_renewed`` hook, run on a pool of its
    own (the task record's refresh), off the renewals' pool.

    A lease whose refresh is queued or running already gets no second one meanwhile:
    its refresh runs once more when done (it reads the lease as renewed by then), so a
    refresh that hangs holds one thread of the pool, never more.
    """

    def __init__(self, threads: int):
        self._pool = DaemonPool(threads, "lease-refresh")
        self._guard = threading.Lock()
        #: Leases with a refresh queued or running (under ``_guard``), and those of them
        #: renewed again meanwhile, to be refreshed once more.
        self._refreshing: set[Lease] = set()
        self._again: set[Lease] = set()

    def queue(self, lease: Lease) -> Future[None] | None:
        """Run the lease's ``on_renewed`` on the pool; returns that run, if one was
        queued (none for a lease with no hook, or one whose refresh is under way)."""
        if lease.on_renewed is None:
            return None
        with self._guard:
            if lease in self._refreshing:
                self._again.add(lease)
                return None
            self._refreshing.add(lease)
        return _submit(self._pool, self._refresh, lease)

    def _refresh(self, lease: Lease) -> None:
        while True:
            hook = lease.on_renewed
            if hook is not None and lease.active:  # not for a lease let go meanwhile
                try:
                    hook(lease)
                except Exception:  # a bug in a hook; the lease itself was renewed
                    log.exception(
                        "after renewing message %s, its on_renewed hook failed", lease.message_id
                    )
            with self._guard:
                if lease not in self._again:
                    self._refreshing.discard(lease)
                    return
                self._again.discard(lease)

    def shutdown(self) -> None:
        self._pool.shutdown()


def _submit(pool: DaemonPool, call: Callable[[Lease], T], lease: Lease) -> Future[T]:
    """``call(lease)`` on ``pool``, with the ids of the log context of this thread (each
    call gets its own copy: a context cannot be entered by two threads at once)."""
    context = contextvars.copy_context()
    return pool.submit(lambda: context.run(call, lease))


def _lease_on_record(lease: Lease, started: float) -> None:
    """Extend a lease whose pop receipt was lost on its task's record alone (only a
    lease with ``on_record`` is ever due once its receipt is lost)."""
    assert lease.on_record is not None
    until = started + lease.lease_seconds
    try:
        lease.on_record(lease, until)
    except LeaseLost as lost:
        lease.lose(f"leasing the task on its record failed: {lost}")
        return
    except StorageError as error:
        _renewal_failed(lease, started, error)
        return
    lease.schedule(started)


def _refused(lease: Lease, started: float, lost: LeaseLost) -> None:
    """A renewal sent at ``started`` was refused: the receipt was rotated by a renewal of
    our own, or the message is someone else's or gone."""
    if lost.code == "PopReceiptMismatch" and started < lease.visible_at:
        _receipt_lost(lease, started)
        return
    # Gone while still ours (deleted by hand, or its job deleted): no longer lease
    # would have kept it, so nothing is learned from it.
    in_time = lost.code == "MessageNotFound" and started < lease.visible_at
    lease.lose(f"renewal refused: {lost}", learned=not in_time)


def _refused_at_the_end(lease: Lease, lost: LeaseLost, now: float) -> None:
    """A delete or hand-back was refused: the message became visible and someone else
    received it (the write-up's own signal: the lease was too short), or it is gone
    while the lease lasts: our own delete applied with its answer lost, most likely,
    nothing a longer lease would have saved."""
    gone_in_time = lost.code == "MessageNotFound" and not lease.expired(now)
    lease.lose(str(lost), learned=not gone_in_time)


def _renewal_failed(lease: Lease, started: float, error: StorageError) -> None:
    """A renewal (or a lease on the record) failed for the store's trouble: retried
    shortly, unless the lease has run out meanwhile (lost) or its receipt is lost with
    no record to lease it on (no renewal can be made)."""
    if lease.receipt_lost and lease.on_record is None:
        return
    if started >= lease.visible_at:
        lease.lose(f"renewals failed until the lease ran out: {error}")
        return
    log.warning("renewing message %s failed, retrying: %s", lease.message_id, error)
    retry_at = started + lease.lease_seconds * RETRY_FRACTION
    lease.next_renewal_at = min(retry_at, lease.visible_at)


def _receipt_lost(lease: Lease, started: float) -> None:
    """A renewal sent before the lease ran out found its receipt stale.

    Nobody else can have received the message while it was invisible, so the receipt was
    rotated by a renewal of our own that was applied although its answer was lost (the
    SDK then retried it with the old receipt). That renewal was made after ``started``,
    so the message stays invisible until at least ``started + lease_seconds``: the task
    keeps its lease until then, and hands the chunk back shortly before; a task that
    cannot hand back (``on_record``) is leased on its record instead, marked at once.
    """
    then = (
        "the task is leased on its record from now on"
        if lease.on_record is not None
        else "the chunk is handed back before the lease runs out"
    )
    log.warning(
        "renewing message %s: our own renewal was applied but its answer lost (the pop "
        "receipt is unknown now); %s",
        lease.message_id,
        then,
    )
    lease.receipt_lost = True
    lease.visible_at = max(lease.visible_at, started + lease.lease_seconds)
    # Never renewed again through the queue; a lease leased on its record is marked there
    # at once (before the message can come back), then extended on the usual schedule.
    lease.next_renewal_at = started if lease.on_record is not None else float("inf")
