"""The two kinds of shared limit as records: a token bucket and a set of running slots.

Both are pure values: what a record says, and the arithmetic of taking from it at a
given time. :mod:`checkpoint.quotas` reads and writes them with compare-and-swap.

Times are wall-clock UTC of whichever worker wrote last. Clock skew between machines
only shifts refills: a bucket's ``refilled_on`` never moves back, so a worker whose
clock is behind sees no new tokens until its clock passes the last refill, and the
tokens added over a long run follow the fastest clock's elapsed time (exact to the
skew, never more than one burst). A slot holder's expiry is judged by the reader's
clock, so skew must stay well under a lease (NTP keeps it to milliseconds).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from checkpoint.rates import Rate, parse_rate
from checkpoint.records import Properties
from checkpoint.storage import PropertyValue, Record

#: ``source`` of a limit set with ``runner limit``: class values no longer change it.
BY_HAND = "hand"


def default_burst(rate: Rate) -> float:
    """About one second of tokens, at least one (``"1/h"`` can still start a chunk)."""
    return max(1.0, rate.per_second)


@dataclass(frozen=True)
class Bucket:
    """A token bucket: ``rate`` tokens a second up to ``burst``, ``tokens`` as of
    ``refilled_on``. ``source`` is the job type whose class value created it, or
    :data:`BY_HAND`."""

    name: str
    rate: Rate
    burst: float
    tokens: float
    refilled_on: datetime
    source: str

    def refilled(self, now: datetime) -> Bucket:
        """The bucket at ``now``: refilled by the time since the last refill, capped at
        ``burst``. A ``now`` before the last refill (another machine's clock is ahead)
        adds nothing and keeps the later time, so refills never count twice."""
        elapsed = max(0.0, (now - self.refilled_on).total_seconds())
        tokens = min(self.burst, self.tokens + elapsed * self.rate.per_second)
        return replace(self, tokens=tokens, refilled_on=max(now, self.refilled_on))

    def take(self, wanted: int, now: datetime) -> tuple[Bucket, int, float]:
        """Take up to ``wanted`` whole tokens at ``now``: the bucket after, how many were
        taken and, when none, the seconds until the next whole token."""
        full = self.refilled(now)
        got = max(0, min(wanted, math.floor(full.tokens + 1e-9)))
        if got == 0:
            return full, 0, max(0.0, (1.0 - full.tokens) / self.rate.per_second)
        return replace(full, tokens=full.tokens - got), got, 0.0

    def properties(self) -> dict[str, PropertyValue]:
        return {
            "kind": "rate",
            "rate": self.rate.text,
            "burst": float(self.burst),
            "tokens": float(self.tokens),
            "refilled_on": self.refilled_on,
            "source": self.source,
        }

    @classmethod
    def from_record(cls, name: str, record: Record) -> Bucket:
        p = Properties(record, f"rate limit {name!r}")
        refilled_on = p.time("refilled_on")
        burst, tokens = record.properties.get("burst"), record.properties.get("tokens")
        if refilled_on is None or not isinstance(burst, float) or not isinstance(tokens, float):
            raise p.bad("refilled_on, burst and tokens are required")
        rate = parse_rate(p.text("rate"), "rate", error=p.bad)
        return cls(name, rate, burst, tokens, refilled_on, p.text("source"))


@dataclass(frozen=True)
class Slots:
    """At most ``max_running`` held at once: ``holders`` maps a worker id to how many it
    holds and until when (its expiry, renewed by the worker while it holds them)."""

    name: str
    max_running: int
    source: str
    holders: dict[str, tuple[int, datetime]] = field(default_factory=dict)

    def live(self, now: datetime) -> Slots:
        """Without holders whose expiry passed (a worker that died frees its slots)."""
        alive = {who: held for who, held in self.holders.items() if held[1] > now}
        return replace(self, holders=alive)

    def in_use(self, now: datetime) -> int:
        return sum(count for count, _ in self.live(now).holders.values())

    def held_by(self, worker: str, now: datetime) -> int:
        return self.live(now).holders.get(worker, (0, now))[0]

    def holding(self, worker: str, count: int, now: datetime, lease_seconds: float) -> Slots:
        """``worker`` holding ``count`` (none: removed) until a lease from ``now``."""
        holders = dict(self.live(now).holders)
        holders.pop(worker, None)
        if count > 0:
            holders[worker] = (count, now + timedelta(seconds=lease_seconds))
        return replace(self, holders=holders)

    def properties(self) -> dict[str, PropertyValue]:
        holders = {who: [count, until.timestamp()] for who, (count, until) in self.holders.items()}
        return {
            "kind": "running",
            "max_running": self.max_running,
            "holders": json.dumps(holders, sort_keys=True),
            "source": self.source,
        }

    @classmethod
    def from_record(cls, name: str, record: Record) -> Slots:
        p = Properties(record, f"running limit {name!r}")
        max_running = p.count("max_running", required=True)
        try:
            raw = json.loads(p.text("holders") or "{}")
            holders = {
                str(who): (int(count), datetime.fromtimestamp(float(until), tz=UTC))
                for who, (count, until) in raw.items()
            }
        except (ValueError, TypeError, AttributeError) as bad:
            raise p.bad(f"holders cannot be read: {bad}") from bad
        return cls(name, max_running, p.text("source"), holders)
