"""Admission: a worker takes rate tokens and running slots *before* it receives.

A message received is leased and its dequeue counted, so a worker that cannot start a
chunk must not receive it. Before each receive from a job type's queue the loop asks
:meth:`Admission.admit` how many it may take: rate tokens of the queue's bucket (up
to the free capacity, one compare-and-swap per receive, not per chunk), then as many
running slots. It receives at most that many; slots the receive did not use go back at
once, and unused tokens are kept by the worker for its next receive for at most
:data:`KEEP_TOKENS_SECONDS` (putting them back would cost a write and could not make
them any younger; a token kept longer is dropped, which only ever errs low). When no
token is available the queue is skipped (others are served) until the next one is due.

Every message received under a slot keeps it until the message ends: :meth:`ended` is
called once from the one place every message's handling ends (the loop's chunk slot),
and earlier for planning and finalize messages, which are not chunks and do not count
(a long planning run must not keep chunks of ``max_running = 1`` waiting). Slots are
renewed by :class:`runner.worker.limits.slot_keeper.SlotKeeper`.

Storage trouble here is the runner's, never a chunk's: a take that fails skips the
queue this round; a release that fails is mended by the next renewal, which writes the
count this worker really keeps.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, StorageError
from checkpoint.limits.book import LimitBook, Taken
from checkpoint.limits.rates import parse_rate
from checkpoint.retries import Budget, RetryPolicy
from checkpoint.storage import QueueMessage
from jobs.job import ChunkedJob
from runner.worker.leases.lease import first_lease_seconds

log = logging.getLogger(__name__)

#: Tokens taken for a receive and not used are kept this long for the next one.
KEEP_TOKENS_SECONDS = 1.0
#: A queue whose class sets no limit looks this often for one set by hand.
LOOK_AGAIN_SECONDS = 5.0
#: A take or release in the loop is retried this long, then the round goes on without.
ADMISSION = RetryPolicy("limit", first_wait_seconds=0.05, give_up_after_seconds=2.0)


@dataclass(frozen=True)
class Admitted:
    """How many messages a worker may receive now; when none, ``wait_seconds`` until
    the next token is due (0: nothing to wait for but a running chunk's end)."""

    count: int
    wait_seconds: float = 0.0


class Admission:
    """One worker's takes of the shared limits of the job types it serves."""

    def __init__(
        self,
        book: LimitBook,
        clock: Clock,
        worker_id: str,
        job_classes: Iterable[type[ChunkedJob]],
        lease_seconds: Callable[[type[ChunkedJob]], int] = first_lease_seconds,
    ):
        self.book = book
        self._lease_seconds_of = lease_seconds
        self._clock = clock
        self.worker_id = worker_id
        self._classes = {cls.queue: cls for cls in job_classes}
        self._lock = threading.Lock()
        self._writing: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._stash: dict[str, tuple[int, float]] = {}  # queue -> tokens, taken at
        self.kept: dict[str, int] = {}  # limit name -> slots this worker keeps
        self._by_message: dict[str, str] = {}  # delivery -> name of the slot it keeps
        self._pending: dict[str, int] = {}  # queue -> slots taken for the coming receive
        self._absent_until: dict[tuple[str, str], float] = {}  # (name, kind) -> monotonic

    def budget(self) -> Budget:
        return Budget(ADMISSION, self._clock)

    def define(self, budget: Budget) -> None:
        """Create each limit the classes name from their values; warn once for each
        whose stored value differs (set by hand, or by another class): it stands."""
        for cls in self._classes.values():
            source = cls.job_type()
            if cls.rate_limit is not None:
                self._define_rate(cls.queue, cls.rate_limit, source, budget)
            if cls.max_running is not None:
                slots = self.book.define_running(cls.queue, cls.max_running, source, budget)
                if slots.max_running != cls.max_running:
                    _differs(
                        cls.queue,
                        f"max_running = {cls.max_running}",
                        slots.max_running,
                        slots.source,
                    )
            for resource, rate in cls.limits.items():
                self._define_rate(resource, rate, source, budget)

    def _define_rate(self, name: str, rate: str, source: str, budget: Budget) -> None:
        bucket = self.book.define_rate(name, parse_rate(rate), source, budget)
        if bucket.rate.text != parse_rate(rate).text:
            _differs(name, f"{rate!r}", bucket.rate.text, bucket.source)

    # ----------------------------------------------------------------- receiving

    def admit(self, cls: type[ChunkedJob], wanted: int) -> Admitted:
        """How many of ``wanted`` messages of ``cls``'s queue may be received now."""
        try:
            tokens = self._tokens(cls, wanted)
            if tokens.count == 0:
                return Admitted(0, tokens.wait_seconds)
            slots = self._slots(cls, tokens.count)
        except (StorageError, BadRecord) as trouble:
            log.warning("limits of %s could not be read, not receiving: %s", cls.queue, trouble)
            return Admitted(0)
        if slots < tokens.count:
            self._keep(cls.queue, tokens.count - slots)
        return Admitted(slots)

    def _keep(self, queue: str, count: int) -> None:
        """Keep ``count`` tokens of ``queue``'s bucket for the next receive (none if the
        queue has no bucket: then there is nothing to keep)."""
        if self._absent(queue, "rate"):
            return
        with self._lock:
            # Added to what is kept already, dated by the older take: kept no longer.
            kept, taken_at = self._stash.get(queue, (0, self._clock.monotonic()))
            self._stash[queue] = (kept + count, taken_at)

    def received(
        self, cls: type[ChunkedJob], admitted: Admitted, messages: list[QueueMessage]
    ) -> None:
        """The receive after :meth:`admit` got ``messages``: each keeps a slot (if the
        queue has a running limit) until it ends; the rest go back."""
        message_ids = [delivery_key(message) for message in messages]
        unused = admitted.count - len(message_ids)
        if unused > 0:
            self._keep(cls.queue, unused)
        with self._lock:
            pending = self._pending.get(cls.queue, 0)
            self._pending[cls.queue] = 0
            for message_id in message_ids[:pending]:
                self._by_message[message_id] = cls.queue
        if pending > len(message_ids):
            self._release(cls.queue, pending - len(message_ids))

    def ended(self, message: QueueMessage) -> None:
        """The message ended (done, failed, handed back, lost, or not a chunk): its slot,
        if it keeps one, goes back (idempotent)."""
        with self._lock:
            name = self._by_message.pop(delivery_key(message), None)
        if name is not None:
            self._release(name, 1)

    def renew(self) -> None:
        """Renew every slot this worker keeps: one write per limit name, however many
        chunks keep its slots (:class:`runner.worker.limits.slot_keeper.SlotKeeper` calls it)."""
        with self._lock:
            names = [name for name, count in self.kept.items() if count > 0]
        for name in names:
            with self._writing[name]:
                ours = self.kept.get(name, 0)
                try:
                    kept = self.book.keep_slots(
                        name, self.worker_id, ours, self.lease_seconds(name), self.budget()
                    )
                except (StorageError, BadRecord) as trouble:
                    log.warning("renewing the slots of %s failed: %s", name, trouble)
                    continue
            if kept < ours:
                # Our renewals failed for a lease and others took the slots: the chunks
                # running here go on (stopping them would waste their work); the
                # count in the store is over the limit until they end.
                log.warning(
                    "limit %s: %d of this worker's %d slots lapsed while it was cut off",
                    name,
                    ours - kept,
                    ours,
                )

    # ----------------------------------------------------------------- inside

    def _tokens(self, cls: type[ChunkedJob], wanted: int) -> Taken:
        kept = self._kept(cls.queue, wanted)
        if kept or self._absent(cls.queue, "rate"):
            return Taken(kept or wanted)
        taken = self.book.take_tokens(cls.queue, wanted, self.budget())
        if taken is None and cls.rate_limit is not None:
            # Cleared by hand while we run: the class value applies again.
            self._define_rate(cls.queue, cls.rate_limit, cls.job_type(), self.budget())
            taken = self.book.take_tokens(cls.queue, wanted, self.budget())
        if taken is None:
            self._note_absent(cls.queue, "rate")
            return Taken(wanted)
        return taken

    def _slots(self, cls: type[ChunkedJob], wanted: int) -> int:
        if self._absent(cls.queue, "running"):
            return wanted
        with self._writing[cls.queue]:
            taken = self.book.take_slots(
                cls.queue, self.worker_id, wanted, self._lease_seconds_of(cls), self.budget()
            )
            if taken is None and cls.max_running is not None:
                self.book.define_running(cls.queue, cls.max_running, cls.job_type(), self.budget())
                taken = self.book.take_slots(
                    cls.queue, self.worker_id, wanted, self._lease_seconds_of(cls), self.budget()
                )
            if taken is None:
                self._note_absent(cls.queue, "running")
                return wanted
            with self._lock:
                self.kept[cls.queue] = self.kept.get(cls.queue, 0) + taken.count
                self._pending[cls.queue] = taken.count
        return taken.count

    def _release(self, name: str, count: int) -> None:
        with self._writing[name]:
            with self._lock:
                self.kept[name] = max(0, self.kept.get(name, 0) - count)
                ours = self.kept[name]
            try:
                self.book.keep_slots(
                    name, self.worker_id, ours, self.lease_seconds(name), self.budget()
                )
            except (StorageError, BadRecord) as trouble:
                log.warning("releasing a slot of %s failed (renewal mends it): %s", name, trouble)

    def lease_seconds(self, name: str) -> float:
        """A slot's expiry: the lease of the job type whose queue names the limit."""
        return float(self._lease_seconds_of(self._classes[name]))

    def _kept(self, queue: str, wanted: int) -> int:
        with self._lock:
            count, taken_at = self._stash.pop(queue, (0, 0.0))
            if self._clock.monotonic() - taken_at > KEEP_TOKENS_SECONDS:
                return 0
            if count > wanted:
                self._stash[queue] = (count - wanted, taken_at)
            return min(count, wanted)

    def _absent(self, name: str, kind: str) -> bool:
        until = self._absent_until.get((name, kind))
        return until is not None and self._clock.monotonic() < until

    def _note_absent(self, name: str, kind: str) -> None:
        self._absent_until[(name, kind)] = self._clock.monotonic() + LOOK_AGAIN_SECONDS


def delivery_key(message: QueueMessage) -> str:
    """One delivery of a message: its id and the pop receipt it was received with (the
    same message received again, its lease lapsed, is another delivery, with a slot of
    its own)."""
    return f"{message.id}/{message.pop_receipt}"


def _differs(name: str, ours: str, stored: object, source: str) -> None:
    log.warning(
        "limit %s: this class says %s, the store says %s (set by %s); the store's value "
        "applies (runner limit %s --clear to reset it)",
        name,
        ours,
        stored,
        "hand" if source == "hand" else source,
        name,
    )
