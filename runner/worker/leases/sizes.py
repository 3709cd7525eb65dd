"""The lease each job type's messages get in one worker, learned and shared.

A class that sets ``lease_seconds`` has that lease, fixed. A class that does not has an
adaptive one (docs/semantics.md §25): this worker starts from its type's shared row
(:mod:`checkpoint.lease_book`; the class's lower bound if there is none), tells the row
what its renewals saw, and takes back what every worker learned together.

What is observed here, per adaptive type (from the lease keeper):

- :meth:`LeaseSizes.renewed`: how late a renewal's answer came back after its due time;
- :meth:`LeaseSizes.lost`: a lease lost before its work ended. The lease this worker
  gives grows at once (doubles, as the rule says), before any other worker hears of it.

The publishing thread reads the row every :data:`READ_EVERY_SECONDS` (an operator's pin,
other workers' lessons) and writes this worker's news into it when it matters: at once
after a lost lease or when what it saw needs a longer lease than the one in force, else
once :data:`REPORT_SAMPLES` renewals were seen or :data:`REPORT_EVERY_SECONDS` passed.
A thousand workers on a healthy store so write a type's row about three times a second,
and read it about 67 times (one read each per 15 s; SCALE.md §8).

A report whose answer was lost is settled by reading (:mod:`checkpoint.shared_rows`):
the same news is tried again with the tokens of the earlier tries, never added twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from checkpoint import retries
from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, StorageError
from checkpoint.lease_book import LeaseBook
from checkpoint.retries import Budget
from checkpoint.storage import PropertyValue, Record
from jobs.job import ChunkedJob
from runner.worker.leases.learned import LearnedLease, learn
from runner.worker.leases.lease import first_lease_seconds
from runner.worker.leases.sizing import Lateness, LeaseBounds, next_lease_seconds, whole_seconds
from runner.worker.observing.logs import in_context

log = logging.getLogger(__name__)

#: The row is read this often (seconds): a pin, and what other workers learned, reach
#: this worker within it.
READ_EVERY_SECONDS = 15.0
#: News is written at once when it grows the lease; else once this many renewals were
#: seen ...
REPORT_SAMPLES = 200
#: ... or this long after the last report (seconds), whichever comes first.
REPORT_EVERY_SECONDS = 300.0
#: Two reports of one type are at least this far apart (seconds): a burst of lost leases
#: is one report, not one each.
REPORT_GAP_SECONDS = 1.0


@dataclass
class _Type:
    """One adaptive job type, as this worker knows it (under :attr:`LeaseSizes._lock`)."""

    bounds: LeaseBounds
    in_force: int
    #: What was seen since the news being reported was taken.
    seen: Lateness = Lateness()
    lost: int = 0
    #: The longest lease lost since then (seconds).
    lost_longest: int = 0
    #: News taken for a report not yet known to be applied (what was seen, lost, the
    #: longest lease lost), and the tokens of its tries.
    reporting: tuple[Lateness, int, int] | None = None
    tries: dict[str, LearnedLease] = field(default_factory=dict)
    reported_at: float = float("-inf")
    urgent: bool = False
    learned: LearnedLease | None = None
    warned_bad: bool = False


def _pinned(known: _Type) -> bool:
    """An operator pinned the type's lease: what this worker learns is reported, and
    given once the pin is released."""
    return known.learned is not None and known.learned.pinned_seconds is not None


def _told(job_type: str, before: int, after: int, why: str) -> None:
    """One line when a type's lease changes here (a step at most a minute, or a lesson)."""
    log.info("lease of %s: %d s -> %d s (%s)", job_type, before, after, why)


def bounds_of(cls: type[ChunkedJob]) -> LeaseBounds:
    low, high = cls.lease_bounds
    return LeaseBounds(float(low), float(high))


class LeaseSizes:
    """The lease of each job type served by one worker (thread-safe).

    ``book`` None: nothing is shared (the learned lease lives and dies with this object:
    :mod:`jobs.testing`)."""

    def __init__(self, book: LeaseBook | None, classes: Iterable[type[ChunkedJob]], clock: Clock):
        self._book = book
        self._clock = clock
        self._lock = threading.Lock()
        #: The adaptive types (a fixed lease is its class's: nothing to keep here).
        self._types = {
            cls.job_type(): _Type(bounds_of(cls), first_lease_seconds(cls))
            for cls in classes
            if cls.lease_seconds is None
        }
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._read_at = float("-inf")

    # ------------------------------------------------------------- the leases

    def seconds(self, cls: type[ChunkedJob]) -> int:
        """The lease a message of ``cls`` gets now (whole seconds)."""
        if cls.lease_seconds is not None:
            return cls.lease_seconds
        return self.seconds_of(cls.job_type()) or first_lease_seconds(cls)

    def seconds_of(self, job_type: str) -> int | None:
        """The lease of an adaptive ``job_type`` now; None for a fixed or unknown one
        (a lease keeps the length it was given)."""
        with self._lock:
            known = self._types.get(job_type)
            return None if known is None else known.in_force

    # ------------------------------------------------------------- observing

    def renewed(self, job_type: str, late_seconds: float) -> None:
        """A renewal of a lease of ``job_type`` was answered ``late_seconds`` after it was
        due. A lateness the lease in force cannot cover is reported at once."""
        with self._lock:
            known = self._types.get(job_type)
            if known is None:
                return
            known.seen = known.seen.observe(late_seconds)
            grown = next_lease_seconds(known.in_force, known.seen, 0, known.bounds)
            before = known.in_force
            if grown > before and not _pinned(known):
                known.in_force = whole_seconds(grown)
                known.urgent = True
        if known.in_force != before:
            _told(job_type, before, known.in_force, f"a renewal landed {late_seconds:.1f} s late")
            self._wake.set()

    def lost(self, job_type: str, lease_seconds: int) -> None:
        """A lease of ``job_type``, ``lease_seconds`` long, was lost before its work
        ended: this worker's lease for the type doubles at once, and the loss is
        reported. A lease shorter than the one in force now teaches nothing new (it was
        given before the last lesson: one stall costs every chunk it held, and one
        outage every worker's), so it is counted but grows nothing."""
        with self._lock:
            known = self._types.get(job_type)
            if known is None:
                return
            before = known.in_force
            if lease_seconds >= known.in_force and not _pinned(known):
                grown = next_lease_seconds(known.in_force, known.seen, 1, known.bounds)
                known.in_force = whole_seconds(grown)
            known.lost += 1
            known.lost_longest = max(known.lost_longest, lease_seconds)
            known.urgent = True
        if known.in_force != before:
            _told(job_type, before, known.in_force, "a lease was lost")
        self._wake.set()

    # ------------------------------------------------------------- sharing

    def exchange(self) -> float:
        """Report news that is due and read rows that are due; seconds until the next is
        due. What the thread does, made in the caller's time (a test on a fake clock)."""
        if self._book is None:
            return READ_EVERY_SECONDS
        now = self._clock.monotonic()
        reading = now - self._read_at >= READ_EVERY_SECONDS
        for job_type in list(self._types):
            try:
                self._exchange(job_type, now, reading)
            except StorageError as error:
                log.warning("sharing the lease learned for %s failed: %s", job_type, error)
        if reading:
            self._read_at = now
        next_at = self._read_at + READ_EVERY_SECONDS
        with self._lock:
            for known in self._types.values():
                if known.urgent or known.reporting is not None:  # held back by the gap
                    next_at = min(next_at, known.reported_at + REPORT_GAP_SECONDS)
        return max(0.0, next_at - self._clock.monotonic())

    def _exchange(self, job_type: str, now: float, reading: bool) -> None:
        with self._lock:
            known = self._types[job_type]
            due = known.urgent or known.seen.samples >= REPORT_SAMPLES
            due = due or (
                known.seen.samples > 0 and now - known.reported_at >= REPORT_EVERY_SECONDS
            )
            if known.reporting is None and due and now - known.reported_at >= REPORT_GAP_SECONDS:
                known.reporting = (known.seen, known.lost, known.lost_longest)
                known.seen, known.lost, known.lost_longest = Lateness(), 0, 0
                known.tries, known.urgent = {}, False
                known.reported_at = now  # tried: the next try waits the gap, failed or not
            elif known.reporting is not None and now - known.reported_at < REPORT_GAP_SECONDS:
                return  # the last try of it failed a moment ago
            reporting, bounds, tries = known.reporting, known.bounds, known.tries
        budget = self._budget()
        if reporting is not None:
            seen, lost, longest = reporting

            def change(row: Record | None) -> tuple[dict[str, PropertyValue], LearnedLease]:
                found, now_utc = self._parsed(job_type, row), self._clock.now()
                merged = learn(found, job_type, seen, (lost, longest), bounds, now_utc)
                return merged.properties(), merged

            learned: LearnedLease | None = self._book_().change(job_type, change, budget, tries)
            with self._lock:
                known.reporting, known.tries = None, {}
        elif reading:
            learned = self._parsed(job_type, self._book_().read(job_type, budget))
        else:
            return
        self._take(job_type, learned)

    def _take(self, job_type: str, learned: LearnedLease | None) -> None:
        """Give what the row says from now on (nothing learned: keep this worker's own)."""
        if learned is None:
            return
        with self._lock:
            known = self._types[job_type]
            known.learned, before = learned, known.in_force
            if learned.pinned_seconds is not None:
                known.in_force, why = learned.pinned_seconds, "pinned by an operator"
            else:
                # What this worker saw since its report, and lost, may need more than the
                # row says yet: that stands until its own report is merged.
                news = known.lost if known.lost_longest >= learned.lease_seconds else 0
                local = next_lease_seconds(learned.lease_seconds, known.seen, news, known.bounds)
                # Within this worker's class bounds, whatever the row says (a class
                # redeployed with other bounds, a row edited by hand).
                seconds = known.bounds.clamp(max(learned.lease_seconds, local))
                known.in_force, why = whole_seconds(seconds), "learned by the workers"
        if known.in_force != before:
            _told(job_type, before, known.in_force, why)

    def _parsed(self, job_type: str, row: Record | None) -> LearnedLease | None:
        if row is None:
            return None
        try:
            return LearnedLease.from_record(job_type, row)
        except BadRecord as bad:
            with self._lock:
                known = self._types[job_type]
                warn, known.warned_bad = not known.warned_bad, True
            if warn:
                log.warning("%s; starting again from the class's bounds", bad)
            return None

    def _book_(self) -> LeaseBook:
        assert self._book is not None
        return self._book

    def _budget(self) -> Budget:
        return Budget(retries.SHARING, self._clock, stopping=self._stopped)

    # ------------------------------------------------------------- thread

    def start(self) -> None:
        """Read the rows once here, so the first messages received get what the other
        workers learned, then go on on a thread of its own."""
        if self._book is None or not self._types or self._thread is not None:
            return
        self._exchange_safely()
        self._thread = threading.Thread(
            target=in_context(self._run), name="lease-sizes", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.clear()
            self._wake.wait(self._exchange_safely())

    def _exchange_safely(self) -> float:
        """:meth:`exchange`, a bug in it logged, never raised: the store's trouble is
        logged there already, and no pass may stop a worker or this thread."""
        try:
            return self.exchange()
        except Exception:
            log.exception("sharing learned leases failed")
            return READ_EVERY_SECONDS

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """Stop the thread, then report what is left in one try each (a worker in burst
        mode may end before its first report was due: what it saw is not lost)."""
        self._stopped.set()
        self._wake.set()
        if self._thread is None:
            return
        self._thread.join(timeout_seconds)
        with self._lock:
            for known in self._types.values():
                if known.seen.samples or known.lost:
                    known.urgent, known.reported_at = True, float("-inf")
        self._exchange_safely()
