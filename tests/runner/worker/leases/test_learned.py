"""A job type's shared row as a value (runner.worker.leases.learned): what a garbled row
is refused for, and the hourly halving of what was learned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from checkpoint.errors import BadRecord
from checkpoint.storage import Record
from runner.worker.leases.learned import HALVE_EVERY_SECONDS, LearnedLease, learn
from runner.worker.leases.sizing import Lateness, LeaseBounds

TYPE = "mod:Job"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _row(**changes: Any) -> Record:
    fine = LearnedLease(TYPE, 20, LeaseBounds(10, 600), Lateness().observe(0.01)).properties()
    return Record("leases", TYPE, {**fine, **changes}, etag="e")


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"lease_seconds": -4}, "lease_seconds = -4 is not a whole number of seconds"),
        ({"lease_seconds": "20"}, "lease_seconds = '20' is not a whole number"),
        ({"pinned_seconds": 10**9}, "pinned_seconds = 1000000000"),
        ({"low_seconds": 700}, "lease bounds must be 0 < low <= high"),
        ({"lateness": "lateness/9:1"}, "lateness of another encoding"),
        ({"lost": "123:x"}, "lost leases '123:x' are not slot:count"),
        ({"lost": "123:-2"}, "lost leases '123:-2': a negative count"),
    ],
)
def test_a_garbled_row_is_refused_saying_what_is_wrong(changes: dict[str, Any], says: str):
    with pytest.raises(BadRecord, match=f"learned lease of {TYPE}: .*") as refused:
        LearnedLease.from_record(TYPE, _row(**changes))
    assert says in str(refused.value)


def test_a_row_read_back_is_the_row_written():
    learned = learn(None, TYPE, Lateness().observe(2.5), (1, 10), LeaseBounds(10, 600), NOW)
    assert LearnedLease.from_record(TYPE, Record("leases", TYPE, learned.properties(), "e")) == (
        learned
    )


def test_what_was_learned_is_halved_every_hour():
    seen = Lateness()
    for _ in range(7):
        seen = seen.observe(0.01)
    first = learn(None, TYPE, seen, (0, 0), LeaseBounds(10, 600), NOW)
    assert first.lateness.samples == 7 and first.halved_on == NOW
    later = NOW + timedelta(seconds=HALVE_EVERY_SECONDS)
    again = learn(first, TYPE, Lateness().observe(0.01), (0, 0), LeaseBounds(10, 600), later)
    assert (again.lateness.samples, again.halved_on) == (4, later)  # (7 + 1) // 2
