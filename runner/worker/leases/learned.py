"""What one job type's workers have learned of its lease, as its shared row holds it.

A :class:`LearnedLease` is a pure value: the lease the type's new messages get now, the
lateness of every renewal reported (a :class:`~runner.worker.leases.sizing.Lateness`
histogram), the leases lost in ten-minute slots, an operator's pin, and when the lease
last stepped. :func:`learn` adds one worker's news to it by the rule of
:mod:`runner.worker.leases.sizing`; :mod:`checkpoint.lease_book` keeps the rows.

Pacing, so a thousand workers reporting do not make a thousand steps:

- a lost lease, or a need above the lease now, steps at once (growth is never waited for);
- a shrink steps at most once per :data:`SHRINK_EVERY_SECONDS` whoever reports, so the
  lease comes down by at most 10 % a minute, however many workers there are;
- the lateness counts are halved once per :data:`HALVE_EVERY_SECONDS`, so an hour-old
  slow spell weighs half as much as what the store does now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from checkpoint.errors import BadRecord
from checkpoint.lease_book import LeaseBook
from checkpoint.retries import Budget
from checkpoint.service_targets import MAX_VISIBILITY_SECONDS
from checkpoint.storage import PropertyValue, Record
from runner.worker.leases.sizing import (
    DEFAULT_BOUNDS,
    PERCENTILE,
    Lateness,
    LeaseBounds,
    next_lease_seconds,
    whole_seconds,
)

#: A shrink steps at most this often (seconds, wall clock of the writer).
SHRINK_EVERY_SECONDS = 60.0
#: The lateness counts are halved this often (seconds).
HALVE_EVERY_SECONDS = 3600.0
#: Lost leases are counted in slots of this many seconds ...
LOST_SLOT_SECONDS = 600
#: ... of which the row keeps the newest (the "last hour" is the last six).
LOST_SLOTS_KEPT = 6

_FIELDS = ("lease_seconds", "lateness", "lost", "low_seconds", "high_seconds")


@dataclass(frozen=True)
class LearnedLease:
    """One job type's row. ``lease_seconds`` is what the workers learned;
    :attr:`in_force` is what they give (a pin, when an operator set one)."""

    job_type: str
    lease_seconds: int
    bounds: LeaseBounds
    lateness: Lateness = Lateness()
    #: Leases lost, as (slot, count): slot = epoch seconds // :data:`LOST_SLOT_SECONDS`.
    lost_slots: tuple[tuple[int, int], ...] = ()
    pinned_seconds: int | None = None
    stepped_on: datetime | None = None
    halved_on: datetime | None = None

    @property
    def in_force(self) -> int:
        return self.pinned_seconds if self.pinned_seconds is not None else self.lease_seconds

    @property
    def lateness_percentile_seconds(self) -> float:
        """The lateness percentile the lease was sized from (seconds; 0 with no samples)."""
        return self.lateness.percentile_seconds(PERCENTILE)

    def lost_in_last_hour(self, now: datetime) -> int:
        """Leases lost in the last :data:`LOST_SLOTS_KEPT` slots (50 to 60 minutes)."""
        newest = _slot(now)
        return sum(count for slot, count in self.lost_slots if slot > newest - LOST_SLOTS_KEPT)

    def with_lost(self, count: int, now: datetime) -> LearnedLease:
        newest = _slot(now)
        slots = dict(self.lost_slots)
        slots[newest] = slots.get(newest, 0) + count
        kept = tuple(sorted((s, c) for s, c in slots.items() if s > newest - LOST_SLOTS_KEPT))
        return replace(self, lost_slots=kept)

    def properties(self) -> dict[str, PropertyValue]:
        return {
            "lease_seconds": self.lease_seconds,
            "lateness": self.lateness.encode(),
            "lost": " ".join(f"{slot}:{count}" for slot, count in self.lost_slots),
            "low_seconds": int(self.bounds.low_seconds),
            "high_seconds": int(self.bounds.high_seconds),
            # 0, not a missing property: a merge-free replace must clear an old pin.
            "pinned_seconds": self.pinned_seconds or 0,
            "stepped_on": self.stepped_on or _NEVER,
            "halved_on": self.halved_on or _NEVER,
        }

    @classmethod
    def fresh(cls, job_type: str, bounds: LeaseBounds) -> LearnedLease:
        """Nothing learned yet: the lower bound (a healthy store's lease)."""
        return cls(job_type, whole_seconds(bounds.low_seconds), bounds)

    @classmethod
    def from_record(cls, job_type: str, record: Record) -> LearnedLease:
        """Read a row; BadRecord, saying what is wrong, for one garbled by hand or by
        another version (the workers then start again from the bounds)."""
        found = record.properties
        missing = [name for name in _FIELDS if name not in found]
        if missing:
            raise BadRecord(f"learned lease of {job_type}: no {', '.join(missing)}")
        try:
            bounds = LeaseBounds(
                _whole(found["low_seconds"], "low_seconds", 1),
                _whole(found["high_seconds"], "high_seconds", 1),
            )
            lease = _whole(found["lease_seconds"], "lease_seconds", 1)
            pinned = _whole(found.get("pinned_seconds", 0), "pinned_seconds", 0)
            lateness = Lateness.decode(str(found["lateness"]))
            lost = tuple(_lost_slot(part) for part in str(found["lost"]).split())
        except ValueError as bad:
            raise BadRecord(f"learned lease of {job_type}: {bad}") from None
        return cls(
            job_type,
            lease,
            bounds,
            lateness,
            lost,
            pinned or None,
            _time(found.get("stepped_on")),
            _time(found.get("halved_on")),
        )


def learn(
    found: LearnedLease | None,
    job_type: str,
    seen: Lateness,
    lost: tuple[int, int],
    bounds: LeaseBounds,
    now: datetime,
) -> LearnedLease:
    """``found`` (None: nothing learned yet) with one worker's news added: ``seen``, the
    lateness of its renewals since it last reported, and ``lost``, how many leases it
    lost and the longest of them (seconds); ``bounds`` are the class's as that worker
    has it (a redeployed class's new bounds apply from its first report).

    Only a loss of a lease as long as the row's grows it: one shorter was given before
    the row last grew (an outage seen by a thousand workers is one lesson, not a
    thousand doublings); it is counted all the same."""
    count, longest = lost
    base = found if found is not None else LearnedLease.fresh(job_type, bounds)
    lateness = base.lateness.merge(seen)
    halved_on = base.halved_on or now
    if (now - halved_on).total_seconds() >= HALVE_EVERY_SECONDS:
        lateness, halved_on = lateness.halved(), now
    learned = replace(base, bounds=bounds, lateness=lateness, halved_on=halved_on)
    if count:
        learned = learned.with_lost(count, now)
    current = bounds.clamp(base.lease_seconds)
    news = count if longest >= base.lease_seconds else 0
    # A lesson doubles the lease that was lost: a worker may have grown its own past the
    # row's already (a late renewal) before it lost one.
    proposed = next_lease_seconds(
        max(current, longest) if news else current, lateness, news, bounds
    )
    shrinking = proposed < current
    if shrinking and base.stepped_on is not None:
        if (now - base.stepped_on).total_seconds() < SHRINK_EVERY_SECONDS:
            return replace(learned, lease_seconds=whole_seconds(current))
    # Whole seconds (a queue's visibility timeout is): up when growing, down when
    # shrinking (ceil would keep a short lease from ever coming down by 10 %).
    seconds = math.floor(proposed) if shrinking else whole_seconds(proposed)
    seconds = max(whole_seconds(bounds.low_seconds), min(int(bounds.high_seconds), seconds))
    stepped_on = now if seconds != base.lease_seconds else base.stepped_on
    return replace(learned, lease_seconds=seconds, stepped_on=stepped_on or now)


def pin_lease(book: LeaseBook, job_type: str, seconds: int | None, budget: Budget) -> LearnedLease:
    """Pin ``job_type``'s lease at ``seconds`` for every worker (None: release it, back
    to what was learned). A row nobody can read is replaced, learning started again."""

    def change(row: Record | None) -> tuple[dict[str, PropertyValue], LearnedLease]:
        found = None
        if row is not None:
            try:
                found = LearnedLease.from_record(job_type, row)
            except BadRecord:
                found = None
        base = found if found is not None else LearnedLease.fresh(job_type, DEFAULT_BOUNDS)
        pinned = replace(base, pinned_seconds=seconds)
        return pinned.properties(), pinned

    return book.change(job_type, change, budget)


_NEVER = datetime(1970, 1, 1, tzinfo=UTC)


def _slot(now: datetime) -> int:
    return int(now.timestamp()) // LOST_SLOT_SECONDS


def _whole(value: object, name: str, lowest: int) -> int:
    """``value`` if it is whole seconds a row may hold (up to the longest Azure can hide a
    message); else ValueError naming ``name``."""
    highest = MAX_VISIBILITY_SECONDS
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
        raise ValueError(
            f"{name} = {value!r} is not a whole number of seconds in {lowest}-{highest}"
        )
    return value


def _lost_slot(part: str) -> tuple[int, int]:
    slot, _, count = part.partition(":")
    try:
        pair = int(slot), int(count)
    except ValueError:
        raise ValueError(f"lost leases {part[:40]!r} are not slot:count") from None
    if pair[1] < 0:
        raise ValueError(f"lost leases {part[:40]!r}: a negative count")
    return pair


def _time(value: object) -> datetime | None:
    if not isinstance(value, datetime) or value <= _NEVER:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
