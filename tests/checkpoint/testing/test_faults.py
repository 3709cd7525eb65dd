"""``checkpoint.testing.faults`` itself: fault plans refuse what cannot be meant, the spec
text of ``RUNNER_FAULTS`` is read or refused in one line, and each kind of fault does to
a call what a real service does (on the embedded store and a FakeClock)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import AlreadyExists, ConfigurationError, Throttled, Unavailable
from checkpoint.storage import Storage
from checkpoint.testing.faults import (
    OUTAGE_LOOKUP_SECONDS,
    Fault,
    FaultyStorage,
    Outage,
    OutageFile,
    RandomFaults,
    ScriptedFaults,
    parse_fault_spec,
)


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
    faulty = FaultyStorage(
        storage, ScriptedFaults(("queues.create_queue", "delay", 2.5)), sleep=clock.sleep
    )

    faulty.storage.queues.create_queue("slow-q")

    assert clock.sleeps == [2.5]
    assert storage.queues.list_queues() == ["slow-q"]
    assert faulty.counts.snapshot() == {"calls": {"queues.create_queue": 1}, "faults": {"delay": 1}}


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


# --------------------------------------------------------------------------- outages


def test_an_outage_refuses_every_call_unapplied_while_it_is_on(storage: Storage, tmp_path: Path):
    # Given an outage of 60 s from t=1000 (Unix time), as a file announces it
    now = [999.0]
    outage = Outage(1000.0, 60.0, "refused")
    plan = RandomFaults(outage=_announced(outage, now, tmp_path))
    faulty = FaultyStorage(storage, plan)

    # Before it, calls go through; during it, each is refused at once, not applied
    faulty.storage.queues.create_queue("before")
    now[0] = 1000.0
    with pytest.raises(Unavailable, match="connection refused") as refused:
        faulty.storage.queues.create_queue("during")
    now[0] = 1059.9
    with pytest.raises(Unavailable):
        faulty.storage.records.query("table", "partition")
    # And it ends by itself
    now[0] = 1060.0
    faulty.storage.queues.create_queue("after")

    assert refused.value.code == "ServiceRequestError"
    assert storage.queues.list_queues() == ["after", "before"]
    assert faulty.counts.snapshot()["faults"] == {"refused": 2}


def test_a_hanging_outage_answers_when_the_store_is_back_with_a_lost_connection(
    storage: Storage, tmp_path: Path
):
    # Given a hanging outage of 60 s, 15 s of it passed
    now = [1015.0]
    clock = FakeClock()
    plan = RandomFaults(outage=_announced(Outage(1000.0, 60.0, "hanging"), now, tmp_path))
    faulty = FaultyStorage(storage, plan, sleep=clock.sleep)

    # When a call is made, it waits out the rest of the outage, then fails unapplied
    with pytest.raises(Unavailable, match="connection hanging"):
        faulty.storage.queues.create_queue("hung")

    assert clock.sleeps == [45.0]
    assert storage.queues.list_queues() == []


def test_an_outage_file_is_read_when_it_changes_and_a_bad_one_is_ignored(tmp_path: Path):
    now = [1000.0]
    path = tmp_path / "outage"
    announced = OutageFile(path, now=lambda: now[0])
    assert announced.fault() is None  # no file: no outage

    Outage(1000.0, 5.0, "refused").write(path)
    now[0] += OUTAGE_LOOKUP_SECONDS
    assert announced.fault() == Fault("refused")

    path.write_text("not json")
    now[0] += OUTAGE_LOOKUP_SECONDS
    assert announced.fault() is None
    path.unlink()
    now[0] += OUTAGE_LOOKUP_SECONDS
    assert announced.fault() is None


def test_an_outage_must_have_a_known_mode_and_a_length():
    with pytest.raises(ConfigurationError, match="refused, hanging"):
        Outage(0.0, 5.0, "flaky")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="seconds >= 0"):
        Outage(0.0, -1.0)


def test_a_spec_names_the_outage_file(tmp_path: Path):
    plan = parse_fault_spec(f"busy=0.1,outage_file={tmp_path / 'outage'}")

    assert plan.outage is not None and plan.outage.path == tmp_path / "outage"
    with pytest.raises(ConfigurationError, match="outage_file=PATH"):
        parse_fault_spec("outage_file=")


def _announced(outage: Outage, now: list[float], directory: Path) -> OutageFile:
    """An outage file announcing ``outage``, read on a clock the test moves."""
    outage.write(directory / "outage")
    return OutageFile(directory / "outage", now=lambda: now[0])
