"""Shared limits in the store (checkpoint.limits.book): a token bucket's arithmetic on a fake
clock, slots with takers whose keep expires, compare-and-swap between two takers, and writes
applied with their answer lost, on both backends."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from checkpoint import layout
from checkpoint.clock import FakeClock
from checkpoint.errors import BadRecord
from checkpoint.limits.book import RATE_ROW, RUNNING_ROW, LimitBook, Taken
from checkpoint.limits.rates import parse_rate
from checkpoint.limits.rows import BY_HAND, Bucket
from checkpoint.retries import Budget
from checkpoint.shared_rows import RECENT, RECENT_WRITES
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import Fault, FaultPlan, FaultyStorage, ScriptedFaults
from tests.backends import Backend
from tests.runner.world import Meanwhile

SOURCE = "tests.jobs:Orders"
LEASE = 30.0


class Limits:
    """A LimitBook on a backend, on a clock of its own (the bucket's arithmetic runs on
    the worker's clock, whatever the backend), and a fresh limit name."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.clock = FakeClock()
        CheckpointStore(backend.storage, self.clock).ensure()
        self.book = LimitBook(backend.storage.records, self.clock)
        self.name = f"l-{uuid.uuid4().hex[:10]}"

    def budget(self) -> Budget:
        return CheckpointStore(self.backend.storage, self.clock).budget()

    def over(self, plan: FaultPlan) -> LimitBook:
        """The same book over storage that fails or races as ``plan`` says."""
        faulty = FaultyStorage(self.backend.storage, plan, sleep=self.clock.sleep).storage
        return LimitBook(faulty.records, self.clock)

    def row(self, row: str) -> dict[str, object]:
        found = self.backend.storage.records.get(layout.LIMITS_TABLE, self.name, row)
        return dict(found.properties)


@pytest.fixture
def limits(backend: Backend) -> Limits:
    return Limits(backend)


def test_rate_parsing_takes_counts_per_unit_and_refuses_anything_else():
    assert parse_rate("200/s").per_second == 200
    assert parse_rate("6000/min").per_second == 100
    assert parse_rate(" 1 / h ").text == "1/h"
    assert parse_rate("2.5/s").per_second == 2.5
    for bad in ("200", "0/s", "-1/s", "5/day", 5, None, "1e3/s"):
        with pytest.raises(ValueError, match="'200/s'"):
            parse_rate(bad)


def test_a_bucket_starts_full_with_one_second_of_tokens_and_refills_at_its_rate(limits: Limits):
    book, name = limits.book, limits.name
    bucket = book.define_rate(name, parse_rate("10/s"), SOURCE, limits.budget())
    assert (bucket.burst, bucket.tokens, bucket.source) == (10.0, 10.0, SOURCE)
    assert book.take_tokens(name, 4, limits.budget()) == Taken(4)
    assert book.take_tokens(name, 32, limits.budget()) == Taken(6)  # up to what is there
    # Empty: none taken, and told when the next token is due (1/10 s).
    empty = book.take_tokens(name, 1, limits.budget())
    assert empty is not None and empty.count == 0
    assert empty.wait_seconds == pytest.approx(0.1)
    limits.clock.advance(0.35)
    assert book.take_tokens(name, 32, limits.budget()) == Taken(3)
    limits.clock.advance(60)  # refills stop at the burst
    assert book.take_tokens(name, 32, limits.budget()) == Taken(10)


def test_a_slow_rate_still_starts_one_chunk_and_then_waits_its_interval(limits: Limits):
    limits.book.define_rate(limits.name, parse_rate("1/h"), SOURCE, limits.budget())
    assert limits.book.take_tokens(limits.name, 5, limits.budget()) == Taken(1)
    later = limits.book.take_tokens(limits.name, 1, limits.budget())
    assert later is not None and later.wait_seconds == pytest.approx(3600)


def test_a_clock_behind_the_last_refill_adds_nothing_and_never_moves_it_back():
    start = FakeClock().now()
    bucket = Bucket("x", parse_rate("10/s"), 10.0, 0.0, start, SOURCE)
    behind = bucket.refilled(start - timedelta(seconds=5))
    assert (behind.tokens, behind.refilled_on) == (0.0, start)
    assert bucket.refilled(start + timedelta(seconds=0.5)).tokens == pytest.approx(5)


def test_a_name_without_records_has_no_limit(limits: Limits):
    assert limits.book.take_tokens(limits.name, 3, limits.budget()) is None
    assert limits.book.take_slots(limits.name, "w1", 3, LEASE, limits.budget()) is None
    assert limits.book.keep_slots(limits.name, "w1", 3, LEASE, limits.budget()) == 0


def test_two_takers_racing_on_one_bucket_never_take_more_than_it_holds(limits: Limits):
    # Given a bucket of 10 tokens, and another worker taking 7 between our read and write
    limits.book.define_rate(limits.name, parse_rate("10/s"), SOURCE, limits.budget())
    race = Meanwhile()
    race.before("records.replace", lambda: limits.book.take_tokens(limits.name, 7, limits.budget()))
    # When we ask for 8: our first write is refused (412), we read again and take the rest
    assert limits.over(race).take_tokens(limits.name, 8, limits.budget()) == Taken(3)
    assert race.unused == []
    assert limits.book.take_tokens(limits.name, 1, limits.budget()) == Taken(0, 0.1)


@pytest.mark.parametrize("call", ["records.replace", "records.get"])
def test_a_take_applied_with_its_answer_lost_counts_once(limits: Limits, call: str):
    limits.book.define_rate(limits.name, parse_rate("10/s"), SOURCE, limits.budget())
    faults = ScriptedFaults((call, "ambiguous") if call == "records.replace" else (call, "busy"))
    assert limits.over(faults).take_tokens(limits.name, 4, limits.budget()) == Taken(4)
    assert faults.pending == []
    assert limits.book.take_tokens(limits.name, 32, limits.budget()) == Taken(6)


class _Both:
    """Another worker's write (``Meanwhile``) and a scripted fault, in one plan."""

    def __init__(self, race: Meanwhile, faults: ScriptedFaults):
        self.race, self.faults = race, faults

    def decide(self, service: str, method: str) -> Fault | None:
        raced = self.race.decide(service, method)
        return self.faults.decide(service, method) or raced


def test_an_applied_take_is_recognised_even_after_another_workers_write(limits: Limits):
    # Given our take applied with its answer lost (the SDK's retry of the PUT got 412),
    # and another worker taking 2 before we read the bucket again
    limits.book.define_rate(limits.name, parse_rate("10/s"), SOURCE, limits.budget())
    race, faults = Meanwhile(), ScriptedFaults(("records.replace", "ambiguous"))
    faulty = limits.over(_Both(race, faults))
    faulty.take_tokens(limits.name, 1, limits.budget())  # reads and writes once, unfailed
    faults.add("records.replace", "ambiguous")
    race.before("records.get", lambda: None)  # the take's first read: nothing yet
    race.before(
        "records.get",
        lambda: race.before(
            "records.get", lambda: limits.book.take_tokens(limits.name, 2, limits.budget())
        ),
    )
    # Then ours counts once: 10 - 1 - 4 - 2 leaves 3
    assert faulty.take_tokens(limits.name, 4, limits.budget()) == Taken(4)
    assert limits.book.take_tokens(limits.name, 32, limits.budget()) == Taken(3)
    recent = str(limits.row(RATE_ROW)[RECENT]).split()
    assert 1 < len(recent) <= RECENT_WRITES


def test_slots_are_shared_up_to_max_running_and_released_by_their_taker(limits: Limits):
    book, name, budget = limits.book, limits.name, limits.budget()
    book.define_running(name, 5, SOURCE, budget)
    assert book.take_slots(name, "w1", 3, LEASE, budget) == Taken(3)
    assert book.take_slots(name, "w2", 3, LEASE, budget) == Taken(2)
    assert book.take_slots(name, "w2", 1, LEASE, budget) == Taken(0)
    assert book.keep_slots(name, "w1", 1, LEASE, budget) == 1  # w1 released two
    assert book.take_slots(name, "w2", 4, LEASE, budget) == Taken(2)
    running = book.get(name, budget).running
    assert running is not None and running.in_use(limits.clock.now()) == 5
    assert book.keep_slots(name, "w2", 0, LEASE, budget) == 0
    running = book.get(name, budget).running
    assert running is not None and set(running.takers) == {"w1"}


def test_a_dead_takers_slots_free_up_once_its_lease_passes_unless_kept(limits: Limits):
    book, name, budget = limits.book, limits.name, limits.budget()
    book.define_running(name, 2, SOURCE, budget)
    assert book.take_slots(name, "dead", 1, LEASE, budget) == Taken(1)
    assert book.take_slots(name, "alive", 1, LEASE, budget) == Taken(1)
    limits.clock.advance(LEASE * 0.7)
    assert book.keep_slots(name, "alive", 1, LEASE, budget) == 1  # renewed
    assert book.take_slots(name, "new", 1, LEASE, budget) == Taken(0)
    limits.clock.advance(LEASE * 0.7)  # past the dead one's expiry, not the renewed one's
    assert book.take_slots(name, "new", 2, LEASE, budget) == Taken(1)
    # A taker whose entry lapsed gets back only what is free.
    limits.clock.advance(LEASE * 2)
    book.take_slots(name, "new", 2, LEASE, budget)
    assert book.keep_slots(name, "alive", 1, LEASE, budget) == 0


def test_a_running_row_keeps_its_stored_names_whatever_the_code_calls_them(limits: Limits):
    # Workers of an older release read and write the same row: Slots.takers is stored
    # as "holders" (worker id to [count, expiry]), byte for byte as before the rename.
    book, name, budget = limits.book, limits.name, limits.budget()
    book.define_running(name, 2, SOURCE, budget)
    book.take_slots(name, "w1", 1, LEASE, budget)
    row = limits.row(RUNNING_ROW)
    expiry = (limits.clock.now() + timedelta(seconds=LEASE)).timestamp()
    assert row["holders"] == f'{{"w1": [1, {expiry}]}}'
    assert {"kind", "max_running", "holders", "source"} <= set(row)
    assert "takers" not in row


def test_a_slot_take_applied_with_its_answer_lost_counts_once(limits: Limits):
    limits.book.define_running(limits.name, 4, SOURCE, limits.budget())
    faults = ScriptedFaults(("records.replace", "ambiguous"))
    taken = limits.over(faults).take_slots(limits.name, "w1", 3, LEASE, limits.budget())
    assert taken == Taken(3) and faults.pending == []
    running = limits.book.get(limits.name, limits.budget()).running
    assert running is not None and running.takers["w1"][0] == 3


def test_a_class_value_creates_and_updates_its_own_limit_but_never_one_set_by_hand(
    limits: Limits,
):
    book, name, budget = limits.book, limits.name, limits.budget()
    assert book.define_rate(name, parse_rate("10/s"), SOURCE, budget).rate.text == "10/s"
    # The same class redeployed with a new value changes it ...
    assert book.define_rate(name, parse_rate("20/s"), SOURCE, budget).rate.text == "20/s"
    # ... another class naming the resource does not: the record wins.
    assert book.define_rate(name, parse_rate("5/s"), "other:Job", budget).rate.text == "20/s"
    by_hand = book.set_rate(name, parse_rate("2/s"), budget)
    assert (by_hand.source, by_hand.tokens) == (BY_HAND, 2.0)  # capped at the new burst
    assert book.define_rate(name, parse_rate("30/s"), SOURCE, budget).rate.text == "2/s"
    assert book.define_running(name, 3, SOURCE, budget).max_running == 3
    assert book.define_running(name, 4, SOURCE, budget).max_running == 4
    assert book.set_running(name, 8, budget).source == BY_HAND
    assert book.define_running(name, 1, SOURCE, budget).max_running == 8
    assert [limit.name for limit in book.scan(budget) if not isinstance(limit, BadRecord)].count(
        name
    ) == 1
    # Cleared: gone, and the class value creates it again.
    assert book.clear(name, budget) is True
    assert book.clear(name, budget) is False
    assert book.get(name, budget).rate is None
    assert name not in [getattr(limit, "name", "") for limit in book.scan(budget)]
    assert book.define_rate(name, parse_rate("30/s"), SOURCE, budget).source == SOURCE


def test_a_running_limit_set_by_hand_for_a_new_name_starts_with_no_holders(limits: Limits):
    slots = limits.book.set_running(limits.name, 3, limits.budget())
    assert (slots.max_running, slots.takers, slots.source) == (3, {}, BY_HAND)
    bucket = limits.book.set_rate(limits.name, parse_rate("4/s"), limits.budget())
    assert bucket.tokens == 4.0


def test_an_unreadable_limit_is_named_not_hidden(limits: Limits):
    budget = limits.budget()
    limits.book.define_running(limits.name, 3, SOURCE, budget)
    records = limits.backend.storage.records
    records.upsert(
        layout.LIMITS_TABLE, limits.name, RUNNING_ROW, {"max_running": 3, "holders": "{"}
    )
    assert any(
        isinstance(found, BadRecord) and limits.name in str(found)
        for found in limits.book.scan(budget)
    )
    records.upsert(layout.LIMITS_TABLE, limits.name, RUNNING_ROW, {})
    records.upsert(layout.LIMITS_TABLE, limits.name, RATE_ROW, {"rate": "2/s"})
    with pytest.raises(BadRecord, match="refilled_on, burst and tokens"):
        limits.book.get(limits.name, budget)
    assert limits.book.clear(limits.name, budget) is True


def test_the_catalogue_says_which_job_types_name_a_limit(limits: Limits):
    book, name, budget = limits.book, limits.name, limits.budget()
    book.define_rate(name, parse_rate("5/s"), SOURCE, budget)
    book.define_rate(name, parse_rate("5/s"), "other:Job", budget)
    book.define_running(name, 2, SOURCE, budget)
    book.set_rate(name, parse_rate("1/s"), budget)
    (found,) = [one for one in book.scan(budget) if getattr(one, "name", "") == name]
    assert not isinstance(found, BadRecord)
    assert found.named_by == (SOURCE, "other:Job")
    book.clear(name, budget)
