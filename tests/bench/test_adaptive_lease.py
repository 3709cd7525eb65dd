"""The adaptive-lease benchmark still runs: one short crash on the embedded store with
real worker processes for both kinds of lease at once, and its rows. Nothing here
asserts a time."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from pathlib import Path

from checkpoint.backends import open_storage
from checkpoint.store import CheckpointStore
from tests.bench import adaptive_lease
from tests.bench.lease_jobs import FixedQuick, QuickTicking
from tests.bench.lease_rig import Attempt, Attempts, Rig
from tests.bench.lease_scenarios import Recovery, Slowed, Stalls, crash_once


def test_a_short_crash_is_measured_from_the_records_for_both_leases(tmp_path: Path):
    location = str(tmp_path / "store")
    with open_storage(location) as storage:
        CheckpointStore(storage).ensure()
        calls = {
            job.__name__: functools.partial(
                crash_once, Rig(job.__name__, location, storage, job, tmp_path), 1, 6, 0, 1.0
            )
            for job in (QuickTicking, FixedQuick)
        }
        found = adaptive_lease._parallel(calls)

    quick, fixed = found["QuickTicking"], found["FixedQuick"]
    assert isinstance(quick, Recovery), quick
    assert isinstance(fixed, Recovery), fixed
    # The killed chunk started again after the kill, within its lease and a poll
    assert 0 < quick.seconds < 15 and 0 < fixed.seconds < 15
    assert quick.lease_seconds == QuickTicking.lease_bounds[0]  # no row yet: the floor
    assert fixed.lease_seconds == FixedQuick.lease_seconds


def _attempt(chunk: int, number: int, pid: int, at: int) -> Attempt:
    started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=at)
    return Attempt(chunk, number, f"host:{pid}:ab12", started, "done")


def test_a_superseded_attempt_is_a_lease_its_worker_lost():
    attempts = Attempts(None, "j")  # type: ignore[arg-type]
    attempts._history = {
        0: [_attempt(0, 1, 11, 0), _attempt(0, 2, 22, 10)],
        1: [_attempt(1, 1, 22, 0)],
        2: [_attempt(2, 1, 11, 0), _attempt(2, 4, 11, 30)],  # attempts 2 and 3 unseen
    }

    lost = attempts.lost_by()

    assert {pid: len(found) for pid, found in lost.items()} == {11: 2, None: 2}
    assert attempts.attempts_per_chunk() == [2, 1, 4]


def test_the_rows_say_the_medians_and_whether_each_target_is_met():
    quick = [Recovery(s, 10, 8.0, 60.0) for s in (5.0, 7.0, 9.0)]
    slow = [Recovery(s, 30, 2.0, 60.0) for s in (20.0, 25.0, 31.0)]
    rows = adaptive_lease.crash_rows({"embedded/adaptive": quick, "embedded/fixed 30 s": slow})
    assert rows[2] == "| embedded | adaptive | 10 | 7.0 (5.0-9.0) | 8.00 | met |"
    assert rows[3].endswith("| 2.00 | (reference) |")

    lost_twice = Slowed("done", 200.0, [2, 0, 1], [2.0, 0.0, 1.0], [1, 3, 1], 1, 40)
    assert adaptive_lease.slowing_rows({"azurite/adaptive": lost_twice})[2].endswith(
        "| 1 | 40 | **not met** |"
    )

    learned = Stalls(8.0, [10, 50, 50, 50], [1, 0, 0], [2, 1, 1])
    assert adaptive_lease.stalled_rows({"embedded": learned}, 8.0)[2] == (
        "| embedded | 10 → 50 → 50 → 50 | 15.0 | 1, 0, 0 | 2 1 1 | met |"
    )
