"""Rate and concurrency limits shared by every worker, kept in the shared record store.

One partition per limit name holds its ``rate`` row (a token bucket) and its
``running`` row (slots and their takers); a catalogue partition names every limit, so a
listing reads one partition. Every change is a compare-and-swap: read the row, compute
the new row (:mod:`checkpoint.limits.rows`), replace it If-Match its ETag, a lost answer
settled by reading (:mod:`checkpoint.shared_rows`), so a take is never counted twice nor
lost as someone else's. (Only a write followed by more than
:data:`~checkpoint.shared_rows.RECENT_WRITES` others before our read could go
unrecognised; its tokens are then lost, which errs on the safe side: fewer taken, never
more.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TypeVar

from checkpoint import layout
from checkpoint.clock import Clock
from checkpoint.errors import BadRecord
from checkpoint.limits.rates import Rate, check_limit_name
from checkpoint.limits.rows import BY_HAND, Bucket, Slots, default_burst
from checkpoint.retries import Budget
from checkpoint.shared_rows import Change, change_row, read_row
from checkpoint.storage import ANY_ETAG, PropertyValue, Record, RecordStore

T = TypeVar("T")
RATE_ROW = "rate"
RUNNING_ROW = "running"
#: The catalogue row's list of job types whose classes name the limit.
NAMED_BY = "named_by"


@dataclass(frozen=True)
class Taken:
    """What a take got: ``count`` tokens or slots; when none, ``wait_seconds`` until the
    next token is due (0 for slots: they free up when chunks end)."""

    count: int
    wait_seconds: float = 0.0


@dataclass(frozen=True)
class Limit:
    """One named limit as stored: its bucket, its slots, either or both, and the job
    types whose classes name it (as their workers said at start)."""

    name: str
    rate: Bucket | None
    running: Slots | None
    named_by: tuple[str, ...] = ()


class LimitBook:
    """The limits table. Every call takes a :class:`~checkpoint.retries.Budget`."""

    def __init__(self, records: RecordStore, clock: Clock):
        self._records = records
        self._clock = clock

    # ------------------------------------------------------------- taking

    def take_tokens(self, name: str, wanted: int, budget: Budget) -> Taken | None:
        """Take up to ``wanted`` tokens of ``name``'s bucket; None if it has none."""

        def change(row: Record | None) -> tuple[dict[str, PropertyValue] | None, Taken | None]:
            if row is None:
                return None, None
            bucket, got, wait = Bucket.from_record(name, row).take(wanted, self._clock.now())
            return (bucket.properties() if got else None), Taken(got, wait)

        return self._change(name, RATE_ROW, change, budget)

    def take_slots(
        self, name: str, worker: str, wanted: int, lease_seconds: float, budget: Budget
    ) -> Taken | None:
        """Take up to ``wanted`` of ``name``'s slots for ``worker``, kept for a lease
        unless renewed; None if ``name`` has no running limit."""

        def change(row: Record | None) -> tuple[dict[str, PropertyValue] | None, Taken | None]:
            if row is None:
                return None, None
            now, slots = self._clock.now(), Slots.from_record(name, row)
            got = max(0, min(wanted, slots.max_running - slots.in_use(now)))
            if got == 0:
                return None, Taken(0)
            mine = slots.taken_by(worker, now) + got
            return slots.kept(worker, mine, now, lease_seconds).properties(), Taken(got)

        return self._change(name, RUNNING_ROW, change, budget)

    def keep_slots(
        self, name: str, worker: str, count: int, lease_seconds: float, budget: Budget
    ) -> int:
        """Say ``worker`` keeps ``count`` of ``name``'s slots (0: none), until a lease
        from now: a release and a renewal both. A taker whose entry expired meanwhile
        gets back only what is free. Returns what it keeps now."""

        def change(row: Record | None) -> tuple[dict[str, PropertyValue] | None, int]:
            if row is None:
                return None, 0
            now, slots = self._clock.now(), Slots.from_record(name, row)
            mine = slots.taken_by(worker, now)
            kept = min(count, mine + max(0, slots.max_running - slots.in_use(now)))
            return slots.kept(worker, kept, now, lease_seconds).properties(), kept

        return self._change(name, RUNNING_ROW, change, budget)

    # ------------------------------------------------------------- setting

    def define_rate(self, name: str, rate: Rate, source: str, budget: Budget) -> Bucket:
        """A class's value: creates the bucket, or changes one this ``source`` created
        (a redeployed class); one set by hand or by another class is left as it is.
        Returns the bucket as it stands (the caller warns if it differs)."""

        def change(row: Record | None) -> tuple[dict[str, PropertyValue] | None, Bucket]:
            if row is None:
                return self._new_bucket(name, rate, source)
            found = Bucket.from_record(name, row)
            if found.source != source or found.rate == rate:
                return None, found
            return self._rated(found, rate, source)

        self._catalogue(name, source, budget)
        return self._change(name, RATE_ROW, change, budget)

    def define_running(self, name: str, max_running: int, source: str, budget: Budget) -> Slots:
        """As :meth:`define_rate`, for a running limit."""

        def change(row: Record | None) -> tuple[dict[str, PropertyValue] | None, Slots]:
            if row is None:
                slots = Slots(name, max_running, source)
                return slots.properties(), slots
            found = Slots.from_record(name, row)
            if found.source != source or found.max_running == max_running:
                return None, found
            changed = replace(found, max_running=max_running)
            return changed.properties(), changed

        self._catalogue(name, source, budget)
        return self._change(name, RUNNING_ROW, change, budget)

    def set_rate(self, name: str, rate: Rate, budget: Budget) -> Bucket:
        """``runner limit NAME 100/s``: set by hand; class values no longer change it."""

        def change(row: Record | None) -> tuple[dict[str, PropertyValue] | None, Bucket]:
            if row is None:
                return self._new_bucket(name, rate, BY_HAND)
            return self._rated(Bucket.from_record(name, row), rate, BY_HAND)

        self._catalogue(name, BY_HAND, budget)
        return self._change(name, RATE_ROW, change, budget)

    def set_running(self, name: str, max_running: int, budget: Budget) -> Slots:
        """``runner limit NAME --running 20``: set by hand, takers kept."""

        def change(row: Record | None) -> tuple[dict[str, PropertyValue] | None, Slots]:
            found = Slots(name, max_running, BY_HAND)
            if row is not None:
                found = replace(Slots.from_record(name, row), max_running=max_running)
            changed = replace(found, source=BY_HAND)
            return changed.properties(), changed

        self._catalogue(name, BY_HAND, budget)
        return self._change(name, RUNNING_ROW, change, budget)

    def clear(self, name: str, budget: Budget) -> bool:
        """Remove ``name``'s records: workers create them again from their class values
        (a name no class gives is gone). True if there was anything to remove."""
        check_limit_name(name)
        # Read raw, not parsed: a record nobody can read can still be cleared.
        found = [self._read(name, row, budget) for row in (RATE_ROW, RUNNING_ROW)]
        table = layout.LIMITS_TABLE
        for row in (RATE_ROW, RUNNING_ROW):
            budget.call(functools.partial(self._records.delete, table, name, row, etag=ANY_ETAG))
        budget.call(
            functools.partial(
                self._records.delete, table, layout.LIMITS_CATALOGUE, name, etag=ANY_ETAG
            )
        )
        return any(row is not None for row in found)

    # ------------------------------------------------------------- reading

    def get(self, name: str, budget: Budget) -> Limit:
        """``name``'s limit as stored (both parts None if it has none)."""
        rate, running = self._read(name, RATE_ROW, budget), self._read(name, RUNNING_ROW, budget)
        return Limit(
            name,
            None if rate is None else Bucket.from_record(name, rate),
            None if running is None else Slots.from_record(name, running),
        )

    def scan(self, budget: Budget) -> list[Limit | BadRecord]:
        """Every limit named in the catalogue, by name; a BadRecord for one unreadable."""
        rows = budget.call(
            lambda: list(self._records.query(layout.LIMITS_TABLE, layout.LIMITS_CATALOGUE))
        )
        found: list[Limit | BadRecord] = []
        for row in rows:
            try:
                limit = replace(self.get(row.row_key, budget), named_by=_named_by(row))
            except BadRecord as bad:
                found.append(bad)
                continue
            if limit.rate is not None or limit.running is not None:
                found.append(limit)
        return found

    # ------------------------------------------------------------- inside

    def _new_bucket(
        self, name: str, rate: Rate, source: str
    ) -> tuple[dict[str, PropertyValue], Bucket]:
        burst = default_burst(rate)
        bucket = Bucket(name, rate, burst, burst, self._clock.now(), source)
        return bucket.properties(), bucket

    def _rated(
        self, found: Bucket, rate: Rate, source: str
    ) -> tuple[dict[str, PropertyValue], Bucket]:
        # Tokens already there stay, up to the new burst: a lower rate bites at once.
        full = found.refilled(self._clock.now())
        burst = default_burst(rate)
        tokens = min(full.tokens, burst)
        changed = replace(full, rate=rate, burst=burst, tokens=tokens, source=source)
        return changed.properties(), changed

    def _catalogue(self, name: str, source: str, budget: Budget) -> None:
        """Name ``name`` in the catalogue, with ``source`` among the job types naming it
        (written only when it is news: once per job type and limit)."""
        check_limit_name(name)

        def change(row: Record | None) -> tuple[dict[str, PropertyValue] | None, None]:
            named_by = _named_by(row) if row is not None else ()
            if row is not None and (source == BY_HAND or source in named_by):
                return None, None
            kept = named_by if source == BY_HAND else (*named_by, source)
            return {NAMED_BY: " ".join(kept)}, None

        self._change(layout.LIMITS_CATALOGUE, name, change, budget)

    def _read(self, name: str, row: str, budget: Budget) -> Record | None:
        return read_row(self._records, layout.LIMITS_TABLE, name, row, budget)

    def _change(self, name: str, row: str, change: Change[T], budget: Budget) -> T:
        """Apply ``change`` to ``name``'s ``row`` (:func:`checkpoint.shared_rows.change_row`)."""
        return change_row(self._records, (layout.LIMITS_TABLE, name, row), change, budget)


def _named_by(row: Record) -> tuple[str, ...]:
    named = row.properties.get(NAMED_BY)
    return tuple(named.split()) if isinstance(named, str) else ()
