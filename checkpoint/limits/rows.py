"""The two kinds of shared limit as records: a token bucket and a set of running slots.

Both are pure values: what a record says, and the arithmetic of taking from it at a
given time. :mod:`checkpoint.limits.book` reads and writes them with compare-and-swap.

Times are wall-clock UTC of whichever worker wrote last. Clock skew between machines
only shifts refills: a bucket's ``refilled_on`` never moves back, so a worker whose
clock is behind sees no new tokens until its clock passes the last refill, and the
tokens added over a long run follow the fastest clock's elapsed time (exact to the
skew, never more than one burst). A slot taker's expiry is judged by the reader's
clock, so skew must stay well under a lease (NTP keeps it to milliseconds).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from checkpoint.limits.rates import Rate, parse_rate
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
    """At most ``max_running`` taken at once: ``takers`` maps a worker id to how many it
    has taken and until when (their expiry, put off by the worker while it keeps them).
    Stored as the property ``holders``, its name at rest since the first release."""

    name: str
    max_running: int
    source: str
    takers: dict[str, tuple[int, datetime]] = field(default_factory=dict)

    def live(self, now: datetime) -> Slots:
        """Without takers whose expiry passed (a worker that died frees its slots)."""
        alive = {who: taken for who, taken in self.takers.items() if taken[1] > now}
        return replace(self, takers=alive)

    def in_use(self, now: datetime) -> int:
        return sum(count for count, _ in self.live(now).takers.values())

    def taken_by(self, worker: str, now: datetime) -> int:
        return self.live(now).takers.get(worker, (0, now))[0]

    def kept(self, worker: str, count: int, now: datetime, lease_seconds: float) -> Slots:
        """``worker`` keeping ``count`` (none: removed) until a lease from ``now``."""
        takers = dict(self.live(now).takers)
        takers.pop(worker, None)
        if count > 0:
            takers[worker] = (count, now + timedelta(seconds=lease_seconds))
        return replace(self, takers=takers)

    def properties(self) -> dict[str, PropertyValue]:
        takers = {who: [count, until.timestamp()] for who, (count, until) in self.takers.items()}
        return {
            "kind": "running",
            "max_running": self.max_running,
            "holders": json.dumps(takers, sort_keys=True),
            "source": self.source,
        }

    @classmethod
    def from_record(cls, name: str, record: Record) -> Slots:
        p = Properties(record, f"running limit {name!r}")
        max_running = p.count("max_running", required=True)
        try:
            raw = json.loads(p.text("holders") or "{}")
            takers = {
                str(who): (int(count), datetime.fromtimestamp(float(until), tz=UTC))
                for who, (count, until) in raw.items()
            }
        except (ValueError, TypeError, AttributeError) as bad:
            raise p.bad(f"holders cannot be read: {bad}") from bad
        return cls(name, max_running, p.text("source"), takers)
