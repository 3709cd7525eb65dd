"""The worker's Prometheus metrics (runner/worker/observing/metrics.py), each recorded where its
event happens: a chunk's life driven as tests/runner/worker/tasks/test_task_lifecycle.py
drives it (the ``world`` fixture: one worker on each backend, a FakeClock), with the
worker assembled as ``runner start --metrics-port`` assembles it, its storage metered.
Values are read back from the worker's own prometheus_client registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from checkpoint import metering
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults
from runner.worker.loop import assemble
from runner.worker.observing.metrics import PrometheusRecorder
from tests.azurite import ACCOUNT_KEY
from tests.runner.world import (
    LEASE_SECONDS,
    THIS_WORKER,
    VERDICTS,
    Second,
    Verdicts,
    World,
)

CHUNKS = ("started", "resumed", "done", "failed", "poisoned", "handed_back")
REQUESTS = "chunkrunner_storage_requests_total"


@dataclass
class Measured:
    """A world whose worker keeps metrics in ``registry``, its storage metered, with
    faults of its own scripted beneath the meter."""

    world: World
    registry: CollectorRegistry
    recorder: PrometheusRecorder
    faults: ScriptedFaults

    def value(self, name: str, **labels: str) -> float:
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found

    def chunks(self) -> dict[str, float]:
        """The chunk counters of the job type under test, by event."""
        return {
            event: self.value(f"chunkrunner_chunks_{event}_total", job_type=VERDICTS)
            for event in CHUNKS
        }

    def of_type(self, name: str) -> float:
        return self.value(name, job_type=VERDICTS)

    def requests(self, operation: str) -> dict[str, float]:
        """The outcomes told of ``operation`` (those told at least once)."""
        told = {
            outcome: self.value(REQUESTS, operation=operation, outcome=outcome)
            for outcome in metering.OUTCOMES
        }
        return {outcome: count for outcome, count in told.items() if count}


@pytest.fixture
def measured(world: World) -> Iterator[Measured]:
    registry = CollectorRegistry()
    recorder = PrometheusRecorder(registry)
    faults = ScriptedFaults()
    scripted = FaultyStorage(world.faulty.storage, faults, sleep=world.clock.sleep).storage
    storage = metering.metered(scripted, recorder)
    world.worker = assemble(storage, [Verdicts, Second], world.clock, THIS_WORKER, recorder)
    yield Measured(world, registry, recorder, faults)
    assert faults.pending == [], "a scripted fault never happened"


def _counts(**nonzero: float) -> dict[str, float]:
    return {event: nonzero.get(event, 0.0) for event in CHUNKS}


def _run(measured: Measured, payload: dict[str, str], meanwhile: Callable[[], None] | None = None):
    world = measured.world
    job_id = world.job([payload])
    if meanwhile is not None:
        world.during(job_id, meanwhile)
    world.send(job_id)
    world.deliver()
    return job_id


# --------------------------------------------------------------------------- chunks


def test_a_chunk_done_is_counted_started_and_done_and_timed(measured: Measured):
    # Given a chunk that looks at the chunks in flight while it runs
    in_flight: list[float] = []
    look = lambda: in_flight.append(measured.of_type("chunkrunner_chunks_in_flight"))  # noqa: E731

    job_id = _run(measured, {"act": "ok"}, look)

    # Then it was one chunk in flight while it ran, none once done, and it was counted
    # started and done (its duration observed once)
    assert measured.world.task(job_id).state == "done"
    assert in_flight == [1.0]
    assert measured.of_type("chunkrunner_chunks_in_flight") == 0.0
    assert measured.chunks() == _counts(started=1, done=1)
    assert measured.of_type("chunkrunner_chunk_duration_seconds_count") == 1
    # and the storage requests of its life were answered: its done mark with its
    # shard's counter in one batch, the job's end with its catalogue index rows in
    # another (its only chunk, so the job completes), its message deleted in one call
    assert measured.requests("record_batch") == {"ok": 2}
    assert measured.requests("queue_delete_many") == {"ok": 1}


def test_a_failed_attempt_is_counted_failed(measured: Measured):
    job_id = _run(measured, {"act": "fail"})

    assert measured.world.task(job_id).state == "retrying"
    assert measured.chunks() == _counts(started=1, failed=1)
    assert measured.of_type("chunkrunner_chunks_in_flight") == 0.0


def test_a_chunk_failing_its_last_attempt_is_counted_poisoned_not_failed(measured: Measured):
    world = measured.world
    job_id = world.job([{"act": "fail"}])
    world.set_task(job_id, state="retrying", attempt=1)
    world.send(job_id)

    world.deliver()

    assert world.task(job_id).state == "poisoned"
    assert measured.chunks() == _counts(started=1, poisoned=1)


def test_a_chunk_started_from_a_checkpoint_is_counted_resumed(measured: Measured):
    world = measured.world
    job_id = world.job([{"act": "ok"}])
    world.set_task(job_id, values={"progress": "quarter"}, state="retrying", attempt=1)
    world.send(job_id)

    world.deliver()

    assert world.task(job_id).state == "done"
    assert measured.chunks() == _counts(started=1, resumed=1, done=1)


def test_a_chunk_handed_back_is_counted_with_the_checkpoint_it_flushed(measured: Measured):
    job_id = _run(measured, {"act": "ok"}, measured.world.worker.stopping.set)

    assert measured.world.task(job_id).state == "waiting"
    assert measured.chunks() == _counts(started=1, handed_back=1)
    assert measured.of_type("chunkrunner_checkpoint_writes_total") == 1
    assert measured.of_type("chunkrunner_checkpoint_write_duration_seconds_count") == 1
    assert measured.of_type("chunkrunner_checkpoint_write_failures_total") == 0


# --------------------------------------------------------------------------- leases


def test_a_lease_that_ran_out_while_its_chunk_ran_is_counted_lost(measured: Measured):
    world = measured.world
    _run(measured, {"act": "ok"}, lambda: world.clock.advance(LEASE_SECONDS))

    assert measured.of_type("chunkrunner_leases_lost_total") == 1
    assert measured.chunks() == _counts(started=1)


def test_a_lease_fenced_by_another_workers_claim_is_counted_lost_once(measured: Measured):
    world = measured.world
    job_id = world.job([{"act": "fail"}])
    world.during(job_id, world.take_over(job_id))
    world.send(job_id)

    world.deliver()

    # Fenced at its failure's write: lost, and the failure is not the worker's to count
    assert measured.of_type("chunkrunner_leases_lost_total") == 1
    assert measured.chunks() == _counts(started=1)


def test_a_lease_renewed_is_counted(measured: Measured):
    world = measured.world

    def renewed_meanwhile() -> None:
        world.clock.advance(LEASE_SECONDS * 0.75)  # past the 70 % at which it is due
        world.worker.keeper.renew_due()

    job_id = _run(measured, {"act": "ok"}, renewed_meanwhile)

    assert world.task(job_id).state == "done"
    assert measured.of_type("chunkrunner_lease_renewals_total") == 1
    assert measured.of_type("chunkrunner_leases_lost_total") == 0
    assert measured.requests("queue_update") == {"ok": 1}
    # How late it came: due at 70 % of the lease, made at 75 %: 1.5 s late
    lateness = "chunkrunner_lease_renewal_lateness_seconds"
    assert measured.value(f"{lateness}_bucket", job_type=VERDICTS, le="1.0") == 0
    assert measured.value(f"{lateness}_bucket", job_type=VERDICTS, le="2.0") == 1
    assert measured.of_type(f"{lateness}_count") == 1
    assert measured.of_type(f"{lateness}_sum") == pytest.approx(LEASE_SECONDS * 0.05)


def test_the_lease_gauge_is_the_lease_each_type_gets_now(measured: Measured):
    second = Second.job_type()
    # From the start: a fixed lease, and an adaptive one at its lower bound
    assert measured.of_type("chunkrunner_lease_seconds") == LEASE_SECONDS
    assert measured.value("chunkrunner_lease_seconds", job_type=second) == 10
    # A lease of the adaptive type lost (as the keeper tells both): twice as long
    measured.world.worker.lease_sizes.lost(second, 10)
    measured.recorder.lease_lost(second)
    assert measured.value("chunkrunner_lease_seconds", job_type=second) == 20
    # A fixed type's lease does not move with its events; an unknown type has none
    _run(measured, {"act": "ok"}, lambda: measured.world.clock.advance(LEASE_SECONDS))
    assert measured.of_type("chunkrunner_lease_seconds") == LEASE_SECONDS
    measured.recorder.lease_lost("tests:NotServed")
    assert (
        measured.registry.get_sample_value(
            "chunkrunner_lease_seconds", {"job_type": "tests:NotServed"}
        )
        is None
    )


# --------------------------------------------------------------------------- storage


def test_a_checkpoint_the_store_cannot_take_is_counted_failed_and_its_retries(
    measured: Measured,
):
    # Given a chunk whose worker stops while the store answers every merge busy
    world = measured.world

    def stopping_in_an_outage() -> None:
        world.worker.stopping.set()
        world.meanwhile.busy.add("records.merge")

    _run(measured, {"act": "ok"}, stopping_in_an_outage)
    world.meanwhile.busy.clear()

    # Then its flush before the stop failed, retried in place while the lease lasted;
    # the hand back could not be written either (not counted handed back)
    assert measured.of_type("chunkrunner_checkpoint_write_failures_total") == 1
    assert measured.of_type("chunkrunner_checkpoint_writes_total") == 0
    assert measured.chunks() == _counts(started=1)
    merges = measured.requests("record_merge")
    assert merges["ok"] == 1  # the claim, before the outage
    assert merges["retried"] >= 1 and merges["failed"] > merges["retried"]


def test_a_claim_applied_with_its_answer_lost_is_counted_settled(measured: Measured):
    measured.faults.add("records.merge", "ambiguous")

    job_id = _run(measured, {"act": "ok"})

    # Then the claim's merge failed and was settled by reading; nothing was retried
    # (the other merges, the job's record among them, were answered)
    assert measured.world.task(job_id).state == "done"
    merges = measured.requests("record_merge")
    assert (merges["failed"], merges["ambiguous_settled"]) == (1, 1) and "retried" not in merges
    assert measured.chunks() == _counts(started=1, done=1)


def test_a_busy_claim_is_counted_retried(measured: Measured):
    measured.faults.add("records.merge", "busy")

    job_id = _run(measured, {"act": "ok"})

    assert measured.world.task(job_id).state == "done"
    merges = measured.requests("record_merge")
    assert (merges["failed"], merges["retried"]) == (1, 1) and "ambiguous_settled" not in merges


# --------------------------------------------------------------------------- labels


def test_no_metric_carries_anything_but_its_own_names(measured: Measured):
    # Given a chunk run to done on each backend (on Azurite through a connection string
    # holding the account key)
    _run(measured, {"act": "fail"})
    _run(measured, {"act": "ok"})
    text = generate_latest(measured.registry).decode()

    # Then every label is a job type, a storage operation or an outcome: never a key,
    # a connection string, a payload or an error
    allowed: dict[str, set[str] | None] = {
        "job_type": {VERDICTS, Second.job_type()},  # the lease of each type served
        "operation": set(metering.operations()),
        "outcome": set(metering.OUTCOMES),
        "le": None,  # a histogram's buckets
    }
    for family in text_string_to_metric_families(text):
        assert re.fullmatch(r"chunkrunner_[a-z_]+", family.name), family.name
        for sample in family.samples:
            for label, value in sample.labels.items():
                assert label in allowed, (family.name, label)
                values = allowed[label]
                assert values is None or value in values, (label, value)
    assert ACCOUNT_KEY not in text and "AccountKey" not in text and "bad row" not in text
