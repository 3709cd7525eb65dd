"""``checkpoint.faults`` itself: fault plans refuse what cannot be meant, the spec text of
``RUNNER_FAULTS`` is read or refused in one line, and each kind of fault does to a call
what a real service does (on the embedded store and a FakeClock)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import AlreadyExists, ConfigurationError, Throttled, Unavailable
from checkpoint.faults import Fault, FaultyStorage, RandomFaults, ScriptedFaults, parse_fault_spec
from checkpoint.storage import Storage


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    opened = open_storage(str(tmp_path / "store"), clock=FakeClock())
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"busy": 1.5}, "fault chance busy=1.5 is not in"),
        ({"delayed": -0.1}, "fault chance delayed=-0.1 is not in"),
        ({"busy": 0.6, "ambiguous": 0.6}, "add up to more than 1"),
        ({"delay_seconds": (2.0, 1.0)}, "is not low <= high"),
        ({"delay_seconds": (-1.0, 1.0)}, "is not low <= high"),
    ],
)
def test_random_faults_refuse_chances_and_delays_that_cannot_be_meant(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        RandomFaults(**kwargs)


def test_random_faults_are_repeatable_for_a_seed():
    def decisions(seed: int) -> list[Fault | None]:
        plan = RandomFaults(seed=seed, busy=0.2, ambiguous=0.2, delayed=0.2)
        return [plan.decide("records", "merge") for _ in range(200)]

    first = decisions(3)
    assert first == decisions(3) != decisions(4)
    kinds = {fault.kind for fault in first if fault is not None}
    assert kinds == {"busy", "ambiguous", "delay"} and None in first


def test_a_spec_sets_chances_seed_and_delay_range():
    plan = parse_fault_spec(" busy=0.1, ambiguous=0.05 ,delayed=0.2,seed=7,delay=0.5-2, ")

    assert (plan.busy, plan.ambiguous, plan.delayed, plan.seed) == (0.1, 0.05, 0.2, 7)
    assert plan.delay_seconds == (0.5, 2.0)
    assert parse_fault_spec("delay=0.3").delay_seconds == (0.3, 0.3)
    empty = parse_fault_spec("")
    assert (empty.busy, empty.ambiguous, empty.delayed, empty.seed) == (0.0, 0.0, 0.0, 0)


@pytest.mark.parametrize("spec", ["busy", "slow=0.1", "seed=x", "delay=a-b", "busy=lots"])
def test_a_spec_it_cannot_read_is_refused_naming_the_part(spec: str):
    with pytest.raises(ConfigurationError, match=f"cannot read {spec!r}"):
        parse_fault_spec(spec)


def test_a_script_naming_no_storage_call_is_refused():
    with pytest.raises(ValueError, match="no storage call 'records.merged'"):
        ScriptedFaults(("records.merged", "busy"))
    with pytest.raises(ValueError, match="no storage call 'tables.merge'"):
        ScriptedFaults(("tables.merge", "busy"))


def test_a_delay_waits_on_the_given_sleep_then_applies(storage: Storage):
    clock = FakeClock()
    faulty = FaultyStorage(storage, ScriptedFaults(("queues.create_queue", "delay", 2.5)),
                           sleep=clock.sleep)

    faulty.storage.queues.create_queue("slow-q")

    assert clock.sleeps == [2.5]
    assert storage.queues.list_queues() == ["slow-q"]
    assert faulty.counts.snapshot() == {
        "calls": {"queues.create_queue": 1}, "faults": {"delay": 1}
    }


def test_a_busy_query_fails_when_called_and_an_ambiguous_one_is_read_again(storage: Storage):
    storage.records.create_table("tab")
    storage.records.insert("tab", "p", "r", {"n": 1})
    faults = ScriptedFaults(("records.query", "busy"), ("records.query", "ambiguous"))
    faulty = FaultyStorage(storage, faults).storage

    with pytest.raises(Throttled, match="injected"):
        faulty.records.query("tab", "p")
    (record,) = faulty.records.query("tab", "p")  # a read applied and lost is read again

    assert record.properties["n"] == 1 and faults.pending == []


def test_what_is_not_a_storage_call_passes_through_unfaulted(storage: Storage):
    faulty = FaultyStorage(storage, ScriptedFaults())

    # An attribute of the backend that is not a protocol call is the backend's own
    assert faulty.storage.records._clock is storage.records._clock  # type: ignore[attr-defined]
    assert faulty.counts.snapshot() == {"calls": {}, "faults": {}}
    assert "with injected faults" in faulty.storage.description


def test_an_ambiguous_call_that_failed_is_reported_lost_with_its_own_answer_as_cause(
    storage: Storage,
):
    storage.records.create_table("tab")
    storage.records.insert("tab", "p", "r", {"n": 1})
    faulty = FaultyStorage(storage, ScriptedFaults(("records.insert", "ambiguous"))).storage

    # An insert (not retried by the SDK) whose own answer, lost, was a refusal
    with pytest.raises(Unavailable, match="lost the connection") as caught:
        faulty.records.insert("tab", "p", "r", {"n": 2})

    assert isinstance(caught.value.__cause__, AlreadyExists)
    assert storage.records.get("tab", "p", "r").properties["n"] == 1
