"""The adaptive lease as workers learn and share it (runner.worker.leases.sizes), on
both backends and the fake clock: a type's row is what two workers (two LeaseSizes on
one store) exchange through."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.lease_book import LeaseBook
from checkpoint.retries import STANDALONE, Budget
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import Fault, FaultPlan, FaultyStorage, ScriptedFaults
from jobs.job import ChunkedJob
from runner.worker.leases.learned import SHRINK_EVERY_SECONDS, LearnedLease, pin_lease
from runner.worker.leases.lease import LeaseKeeper
from runner.worker.leases.sizes import READ_EVERY_SECONDS, REPORT_EVERY_SECONDS, LeaseSizes
from runner.worker.leases.sizing import LeaseBounds
from tests.backends import Backend


def adaptive_class(**settings: object) -> type[ChunkedJob]:
    """A job class of its own type (its own row), the lease sized by the workers."""
    name = f"Adaptive{uuid.uuid4().hex[:10]}"
    return type(name, (ChunkedJob,), {"queue": name.lower(), **settings})


class Fleet:
    """Workers' LeaseSizes for one adaptive class on one store and fake clock."""

    def __init__(self, backend: Backend, cls: type[ChunkedJob] | None = None):
        self.backend = backend
        self.clock = FakeClock()
        CheckpointStore(backend.storage, self.clock).ensure()
        self.cls = cls or adaptive_class()
        self.job_type = self.cls.job_type()
        self.book = LeaseBook(backend.storage.records)

    def worker(self, storage_faults: FaultPlan | None = None) -> LeaseSizes:
        records = self.backend.storage.records
        if storage_faults is not None:
            faulty = FaultyStorage(self.backend.storage, storage_faults, sleep=self.clock.sleep)
            records = faulty.storage.records
        return LeaseSizes(LeaseBook(records), [self.cls], self.clock)

    def row(self) -> LearnedLease:
        found = self.book.read(self.job_type, Budget(STANDALONE, self.clock))
        assert found is not None
        return LearnedLease.from_record(self.job_type, found)


@pytest.fixture
def fleet(backend: Backend) -> Fleet:
    return Fleet(backend)


def test_a_new_type_starts_at_its_lower_bound_and_a_fixed_one_keeps_its_lease(fleet: Fleet):
    fixed: type[ChunkedJob] = type(
        "FixedLease", (ChunkedJob,), {"queue": "fixed-lease", "lease_seconds": 45}
    )
    sizes = LeaseSizes(fleet.book, [fleet.cls, fixed], fleet.clock)
    sizes.exchange()  # nothing learned anywhere yet: nothing written either
    assert (sizes.seconds(fleet.cls), sizes.seconds(fixed)) == (10, 45)
    assert fleet.book.read(fleet.job_type, Budget(STANDALONE, fleet.clock)) is None
    sizes.lost(fixed.job_type(), 45)  # a fixed lease learns nothing
    assert sizes.seconds(fixed) == 45 and sizes.seconds_of(fixed.job_type()) is None


def test_a_late_renewal_grows_the_lease_at_once_and_every_worker_takes_it(fleet: Fleet):
    first, second = fleet.worker(), fleet.worker()
    # A renewal answered 8 s late (a paused VM): the 10 s lease's 3 s margin is too short
    first.renewed(fleet.job_type, 8.0)
    # this worker gives more at once: 1.5 x the 10 s bucket is a 15 s margin, a 50 s lease
    assert first.seconds(fleet.cls) == 50
    first.exchange()  # reported at once, not after REPORT_EVERY_SECONDS
    assert fleet.row().lease_seconds == 50 and fleet.row().lateness.samples == 1
    second.exchange()  # a new worker elsewhere starts from it
    assert second.seconds(fleet.cls) == 50


def test_a_lost_lease_doubles_the_lease_and_is_counted_for_the_last_hour(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
):
    first, second = fleet.worker(), fleet.worker()
    with caplog.at_level(logging.INFO, logger="runner.worker.leases.sizes"):
        first.lost(fleet.job_type, 10)
        first.lost(fleet.job_type, 10)  # of the same stall: one lesson
    assert first.seconds(fleet.cls) == 20
    said = [r.getMessage() for r in caplog.records if r.name == "runner.worker.leases.sizes"]
    assert said == [f"lease of {fleet.job_type}: 10 s -> 20 s (a lease was lost)"]
    first.exchange()
    second.exchange()
    assert second.seconds(fleet.cls) == 20
    second.lost(fleet.job_type, second.seconds(fleet.cls))  # a second lesson: 40
    fleet.clock.advance(1.0)
    second.exchange()
    row = fleet.row()
    assert (row.lease_seconds, row.lost_in_last_hour(fleet.clock.now())) == (40, 3)
    fleet.clock.advance(3600.0)
    assert fleet.row().lost_in_last_hour(fleet.clock.now()) == 0


def test_a_lesson_doubles_the_lease_that_was_lost_not_the_rows(fleet: Fleet):
    # Given a worker that grew its lease to 50 s (a renewal 8 s late), then lost one of 50 s
    worker = fleet.worker()
    worker.renewed(fleet.job_type, 8.0)
    worker.lost(fleet.job_type, worker.seconds(fleet.cls))
    assert worker.seconds(fleet.cls) == 100
    # When it reports both at once, the row doubles the 50 s, not its own 10 s
    worker.exchange()
    assert fleet.row().lease_seconds == 100 and worker.seconds(fleet.cls) == 100


def test_one_outage_seen_by_many_workers_is_one_lesson(fleet: Fleet):
    # Given three workers, each losing a 10 s lease in the same outage
    workers = [fleet.worker() for _ in range(3)]
    for worker in workers:
        worker.lost(fleet.job_type, 10)
    # When they report one after the other
    for worker in workers:
        fleet.clock.advance(1.0)
        worker.exchange()
    # Then the row grew once, and counts all three
    row = fleet.row()
    assert (row.lease_seconds, row.lost_in_last_hour(fleet.clock.now())) == (20, 3)
    assert [worker.seconds(fleet.cls) for worker in workers] == [20, 20, 20]


def test_the_lease_shrinks_by_at_most_a_tenth_a_step_and_a_step_a_minute(fleet: Fleet):
    worker = fleet.worker()
    for _ in range(2):  # two lessons, a report each: 40 s
        worker.lost(fleet.job_type, worker.seconds(fleet.cls))
        worker.exchange()
        fleet.clock.advance(1.0)
    assert fleet.row().lease_seconds == 40
    # Renewals land early from now on, reported every REPORT_EVERY_SECONDS
    seen = []
    for _ in range(4):
        for _ in range(25):
            worker.renewed(fleet.job_type, 0.01)
        fleet.clock.advance(REPORT_EVERY_SECONDS)
        worker.exchange()
        seen.append(worker.seconds(fleet.cls))
    assert seen == [36, 32, 28, 25]  # floor(0.9 x each), one step per report
    # Two reports within a minute, from two workers: one step
    for gap in (SHRINK_EVERY_SECONDS, SHRINK_EVERY_SECONDS / 3):
        fleet.clock.advance(gap)
        other = fleet.worker()
        other.renewed(fleet.job_type, 0.01)
        other.exchange()
    assert fleet.row().lease_seconds == 22  # 25 -> 22 once, not twice


def test_the_lease_never_leaves_the_class_bounds(backend: Backend):
    fleet = Fleet(backend, adaptive_class(lease_bounds=(5, 30)))
    worker = fleet.worker()
    assert worker.seconds(fleet.cls) == 5
    for _ in range(4):
        worker.lost(fleet.job_type, worker.seconds(fleet.cls))
    worker.renewed(fleet.job_type, 120.0)
    assert worker.seconds(fleet.cls) == 30
    worker.exchange()
    assert fleet.row().lease_seconds == 30


def test_a_pin_stands_for_every_worker_until_released(fleet: Fleet):
    worker = fleet.worker()
    budget = Budget(STANDALONE, fleet.clock)
    pin_lease(fleet.book, fleet.job_type, 90, budget)
    fleet.clock.advance(60.0)  # past the next read
    worker.exchange()
    assert worker.seconds(fleet.cls) == 90
    worker.lost(fleet.job_type, worker.seconds(fleet.cls))  # learning goes on underneath ...
    fleet.clock.advance(60.0)
    worker.exchange()
    assert worker.seconds(fleet.cls) == 90  # ... but the pin stands
    pin_lease(fleet.book, fleet.job_type, None, budget)
    fleet.clock.advance(60.0)
    worker.exchange()
    # What was learned meanwhile: a lease of 90 s lost under the pin, so 180 s
    assert worker.seconds(fleet.cls) == 180


def test_an_unreadable_row_falls_back_to_the_bounds_with_one_warning(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
):
    records = fleet.backend.storage.records
    where = (layout.LEASES_TABLE, layout.LEASES_PARTITION, fleet.job_type)
    records.upsert(*where, {"lease_seconds": -4, "lateness": "nonsense", "lost": "x"})
    worker = fleet.worker()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            fleet.clock.advance(60.0)
            worker.exchange()
    warned = [r.getMessage() for r in caplog.records if "learned lease of" in r.getMessage()]
    assert len(warned) == 1 and "starting again from the class's bounds" in warned[0]
    assert worker.seconds(fleet.cls) == 10
    worker.lost(
        fleet.job_type, worker.seconds(fleet.cls)
    )  # the next report writes a readable row over it
    worker.exchange()
    assert fleet.row().lease_seconds == 20


def test_a_report_applied_with_its_answer_lost_counts_once(fleet: Fleet):
    fleet.worker().exchange()
    worker = fleet.worker(ScriptedFaults(("records.insert", "ambiguous")))
    for _ in range(3):
        worker.renewed(fleet.job_type, 0.01)
    worker.lost(fleet.job_type, worker.seconds(fleet.cls))
    worker.exchange()
    row = fleet.row()
    assert (row.lateness.samples, row.lost_in_last_hour(fleet.clock.now())) == (3, 1)
    assert row.lease_seconds == 20


class _AppliedThenOut:
    """The first insert applied with its answer lost, then every read busy until
    ``out`` is False (the report's budget runs out)."""

    def __init__(self) -> None:
        self.inserted, self.out = False, True

    def decide(self, service: str, method: str) -> Fault | None:
        if not self.out:
            return None
        if method == "insert":
            self.inserted = True
            return Fault("ambiguous")
        return Fault("busy") if method == "get" and self.inserted else None


def test_a_report_given_up_is_made_again_once_and_never_twice(fleet: Fleet):
    # Applied, its answer lost, then the store out until the report's budget ran out
    faults = _AppliedThenOut()
    worker = fleet.worker(faults)
    worker.lost(fleet.job_type, worker.seconds(fleet.cls))
    worker.exchange()  # gives up: logged, kept
    assert fleet.book.read(fleet.job_type, Budget(STANDALONE, fleet.clock)) is not None
    faults.out = False
    worker.exchange()  # a moment later: not tried again yet (nothing read or written)
    assert fleet.row().lost_in_last_hour(fleet.clock.now()) == 1
    fleet.clock.advance(60.0)
    worker.exchange()  # the store answers again: the first try is recognised
    row = fleet.row()
    assert row.lost_in_last_hour(fleet.clock.now()) == 1 and row.lease_seconds == 20


def test_a_running_lease_takes_the_new_length_at_its_next_renewal(tmp_path: Path):
    clock = FakeClock()
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    try:
        cls = adaptive_class()
        sizes = LeaseSizes(None, [cls], clock)
        keeper = LeaseKeeper(storage.queues, clock, sizing=sizes)
        storage.queues.create_queue(cls.queue)
        storage.queues.send(cls.queue, b"chunk")
        seconds = keeper.sizing.seconds(cls)
        (message,) = storage.queues.receive(cls.queue, visibility_seconds=seconds)
        start = clock.monotonic()
        lease = keeper.lease(
            cls.queue, message, seconds, received_at=start, job_type=cls.job_type()
        )
        assert (lease.lease_seconds, lease.next_renewal_at - start) == (10, 7.0)
        sizes.lost(cls.job_type(), 10)  # another chunk of the type lost its lease
        clock.advance(9.0)  # the keeper wakes 2 s late
        keeper.renew_due()
        assert (lease.lease_seconds, lease.visible_at - start) == (20, 9.0 + 20)
        seen = sizes._types[cls.job_type()].seen  # noqa: SLF001 - what it learned
        assert seen.samples == 1 and seen.percentile_seconds(1.0) == 2.0
    finally:
        storage.close()


def test_a_worker_starts_from_the_row_before_its_first_receive(fleet: Fleet):
    pin_lease(fleet.book, fleet.job_type, 90, Budget(STANDALONE, fleet.clock))
    worker = fleet.worker()
    worker.start()  # the row is read before start returns; the thread goes on after
    try:
        assert worker.seconds(fleet.cls) == 90
    finally:
        worker.stop()


def test_a_row_past_the_class_bounds_is_held_to_them(fleet: Fleet):
    # Given a row of 5,000 s (a class since redeployed with (10, 600), or a hand edit)
    wide = LearnedLease(fleet.job_type, 5000, LeaseBounds(10, 7200))
    where = (layout.LEASES_TABLE, layout.LEASES_PARTITION, fleet.job_type)
    fleet.backend.storage.records.upsert(*where, wide.properties())
    worker = fleet.worker()
    worker.exchange()
    assert worker.seconds(fleet.cls) == 600


def test_what_a_stopping_worker_saw_is_reported_as_it_stops(fleet: Fleet):
    worker = fleet.worker()
    worker.renewed(fleet.job_type, 0.02)
    worker.start()  # reports the first renewal at once
    worker.renewed(fleet.job_type, 0.02)  # the next report would be due in 5 minutes
    worker.stop()
    assert fleet.row().lateness.samples == 2


class _BuggyBook(LeaseBook):
    """A book whose reports raise what no store raises: a bug."""

    def change(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in a report")


def test_a_bug_in_a_report_is_logged_and_stops_nothing(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
):
    worker = LeaseSizes(_BuggyBook(fleet.backend.storage.records), [fleet.cls], fleet.clock)
    with caplog.at_level(logging.ERROR, logger="runner.worker.leases.sizes"):
        worker.start()
        worker.lost(fleet.job_type, 10)  # wakes the thread: its report raises
        for _ in range(100):
            if caplog.records:
                break
            time.sleep(0.05)
        worker.stop()  # stopping does not raise it either
    assert [r.getMessage() for r in caplog.records][:1] == ["sharing learned leases failed"]
    assert worker.seconds(fleet.cls) == 20  # what it learned here stands


def test_a_worker_with_no_store_shares_nothing_and_waits_a_read_interval():
    sizes = LeaseSizes(None, [adaptive_class()], FakeClock())
    assert sizes.exchange() == READ_EVERY_SECONDS


def test_a_pin_replaces_a_row_nobody_can_read(fleet: Fleet):
    where = (layout.LEASES_TABLE, layout.LEASES_PARTITION, fleet.job_type)
    fleet.backend.storage.records.upsert(*where, {"lease_seconds": "garbled"})
    pinned = pin_lease(fleet.book, fleet.job_type, 45, Budget(STANDALONE, fleet.clock))
    assert (pinned.in_force, fleet.row().pinned_seconds) == (45, 45)
