"""Metered storage (checkpoint/metering.py): every request told by operation, outcome and
time, and what the caller made of a failed one (tried again in place, or a lost answer
settled by reading) told afterwards by checkpoint.retries, checkpoint.settle and the
shard counters.

On the embedded store (metering sits above the protocols, the same on every backend),
with faults injected beneath the meter as a real store fails: busy, or applied with the
answer lost (:class:`~checkpoint.testing.faults.ScriptedFaults`), or applied and then refused on
the SDK's own retry (:class:`AppliedThenRefused`). Retries wait on a FakeClock.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import pytest

from checkpoint import layout, metering, retries, settle
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import (
    AlreadyExists,
    BatchFailed,
    Conflict,
    NotFound,
    StorageError,
    Throttled,
    Unavailable,
)
from checkpoint.retries import Budget
from checkpoint.settle import WRITER, Writer
from checkpoint.storage import BatchOp, PropertyValue, Record, RecordStore, Storage
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults


class Meter:
    """A :class:`~checkpoint.metering.RequestMeter` keeping what it is told, in order."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str, float | None]] = []
        self._lock = threading.Lock()

    def request(self, operation: str, outcome: metering.Outcome, seconds: float | None) -> None:
        with self._lock:
            self.told.append((operation, outcome, seconds))

    def outcomes(self, operation: str) -> list[str]:
        return [outcome for told, outcome, _ in self.told if told == operation]


class AppliedThenRefused:
    """Records whose next call of ``method`` is applied, then answered ``error``: what
    the SDK's own retry of an applied write meets (412, 409)."""

    def __init__(self, records: RecordStore):
        self._records = records
        self.twists: dict[str, StorageError] = {}

    def __getattr__(self, method: str) -> Any:
        real = getattr(self._records, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            error = self.twists.pop(method, None)
            result = real(*args, **kwargs)
            if error is not None:
                raise error
            return result

        return call


@dataclass
class World:
    """Metered storage over faults over an embedded store, and a plain view of it."""

    meter: Meter
    faults: ScriptedFaults
    twisted: AppliedThenRefused
    storage: Storage
    plain: Storage
    clock: FakeClock

    def budget(self) -> Budget:
        return Budget(retries.STANDALONE, self.clock)

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.storage, self.clock)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    plain = open_storage(str(tmp_path / "store"))
    CheckpointStore(plain).ensure()
    faults = ScriptedFaults()
    clock = FakeClock()
    faulty = FaultyStorage(plain, faults, sleep=clock.sleep).storage
    twisted = AppliedThenRefused(faulty.records)
    meter = Meter()
    beneath = replace(faulty, records=cast(RecordStore, twisted), closer=None)
    yield World(meter, faults, twisted, metering.metered(beneath, meter), plain, clock)
    plain.close()
    assert faults.pending == [] and twisted.twists == {}, "a fault set up never happened"


def _table(world: World) -> str:
    name = f"t{uuid.uuid4().hex[:12]}"
    world.plain.records.create_table(name)
    return name


# --------------------------------------------------------------------------- requests


def test_each_request_is_told_by_operation_with_its_outcome_and_time(world: World):
    queue = f"q-{uuid.uuid4().hex[:8]}"
    world.storage.queues.create_queue(queue)
    world.storage.queues.send(queue, b"body")
    (message,) = world.storage.queues.receive(queue)
    with pytest.raises(NotFound):
        world.storage.records.get("nosuchtable", "p", "r")
    world.faults.add("queues.delete", "busy")
    assert message.pop_receipt is not None
    with pytest.raises(Throttled):
        world.storage.queues.delete(queue, message.id, message.pop_receipt)

    told = [(operation, outcome) for operation, outcome, _ in world.meter.told]
    assert told == [
        ("queue_create_queue", "ok"),
        ("queue_send", "ok"),
        ("queue_receive", "ok"),
        ("record_get", "refused"),  # an answer: the store works
        ("queue_delete", "failed"),  # the store's trouble
    ]
    assert all(seconds is not None and seconds >= 0 for _, _, seconds in world.meter.told)


def test_results_and_errors_pass_through_unchanged(world: World):
    table = _table(world)
    etag = world.storage.records.insert(table, "p", "r", {"n": 1})

    assert world.plain.records.get(table, "p", "r").etag == etag
    with pytest.raises(AlreadyExists):
        world.storage.records.insert(table, "p", "r", {"n": 2})
    assert metering.metered(world.plain, Meter()).description == world.plain.description


def test_a_query_is_timed_until_read_whole_or_left(world: World):
    table = _table(world)
    for row in "abc":
        world.plain.records.insert(table, "p", row, {"n": 1})

    rows = [record.row_key for record in world.storage.records.query(table, "p")]
    first = next(iter(world.storage.records.query(table, "p")))  # the rest left unread

    assert rows == ["a", "b", "c"] and first.row_key == "a"
    assert world.meter.outcomes("record_query") == ["ok", "ok"]


class _FailingRows:
    """Records whose query fails after its first row (a connection lost mid-page), with
    an attribute of its own beside the protocol."""

    pages_read = 0

    def query(self, *args: Any, **kwargs: Any) -> Iterator[Record]:
        yield Record("p", "a", {}, "etag-a")
        raise Unavailable("connection lost mid-page")


def _rows_failing(meter: Meter) -> Storage:
    records: Any = _FailingRows()
    return metering.metered(Storage(records, records, records, "failing rows"), meter)


def test_a_query_failing_while_read_is_told_failed_and_raised():
    meter = Meter()
    rows = _rows_failing(meter).records.query("t", "p")

    assert next(rows).row_key == "a"
    with pytest.raises(Unavailable):
        next(rows)
    assert meter.outcomes("record_query") == ["failed"]


def test_what_is_not_a_request_is_passed_through_untold():
    meter = Meter()
    records: Any = _rows_failing(meter).records
    assert records.pages_read == 0
    assert meter.told == []


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (Throttled("503"), "failed"),
        (Unavailable("refused"), "failed"),
        (StorageError("500 of its own"), "failed"),
        (ValueError("a bug"), "failed"),
        (NotFound("404"), "refused"),
        (Conflict("412"), "refused"),
        (BatchFailed("batch", index=0, reason=Conflict("412")), "refused"),
        (BatchFailed("batch", index=0, reason=Throttled("503")), "failed"),
    ],
)
def test_the_stores_trouble_is_failed_and_an_answer_saying_no_is_refused(error, outcome):
    assert metering.outcome_of(error) == outcome


def test_the_operations_are_every_method_of_the_three_protocols():
    operations = metering.operations()
    assert {"queue_receive", "queue_update", "record_merge", "record_batch", "blob_put"} <= set(
        operations
    )
    assert len(operations) == 11 + 10 + 7 and operations == sorted(operations)


# --------------------------------------------------------------------------- follow-ups


def test_a_request_tried_again_in_place_is_told_retried_each_time(world: World):
    # Given a read the store answers busy three times (the first retry is made by the
    # budget itself, the later ones through tenacity)
    table = _table(world)
    world.plain.records.insert(table, "p", "r", {"n": 1})
    for _ in range(3):
        world.faults.add("records.get", "busy")

    found = world.budget().call(lambda: world.storage.records.get(table, "p", "r"))

    assert found.properties["n"] == 1
    assert world.meter.outcomes("record_get") == ["failed", "retried"] * 3 + ["ok"]


def test_a_follow_up_is_told_once_and_only_of_a_metered_request(world: World):
    world.faults.add("records.get", "busy")
    with pytest.raises(Throttled) as caught:
        world.storage.records.get("t", "p", "r")

    metering.report(caught.value, "retried")
    metering.report(caught.value, "retried")  # the same failure, told again: once is all
    metering.report(Throttled("not metered"), "retried")  # nobody to tell: nothing happens

    assert world.meter.outcomes("record_get") == ["failed", "retried"]


def _record(world: World, table: str, writer: Writer) -> Record:
    """A record last written by ``writer``'s claim."""
    properties: dict[str, PropertyValue] = {"n": 0, WRITER: writer.next()}
    etag = world.plain.records.insert(table, "p", "r", properties)
    return Record("p", "r", properties, etag)


def test_a_write_applied_with_its_answer_lost_is_told_settled(world: World):
    table = _table(world)
    writer = Writer()
    record = _record(world, table, writer)
    world.faults.add("records.merge", "ambiguous")

    settle.merge(
        world.storage.records, table, record, {"n": 1, WRITER: writer.next()}, world.budget()
    )

    assert world.meter.outcomes("record_merge") == ["failed", "ambiguous_settled"]


def test_a_write_not_applied_with_its_answer_lost_is_told_retried(world: World):
    table = _table(world)
    writer = Writer()
    record = _record(world, table, writer)
    world.faults.add("records.merge", "busy")

    settle.merge(
        world.storage.records, table, record, {"n": 1, WRITER: writer.next()}, world.budget()
    )

    assert world.meter.outcomes("record_merge") == ["failed", "retried", "ok"]


def test_a_write_applied_whose_retry_was_refused_is_told_settled(world: World):
    table = _table(world)
    writer = Writer()
    record = _record(world, table, writer)
    world.twisted.twists["merge"] = Conflict("412 on the SDK's retry")

    settle.merge(
        world.storage.records, table, record, {"n": 1, WRITER: writer.next()}, world.budget()
    )

    assert world.meter.outcomes("record_merge") == ["refused", "ambiguous_settled"]


def test_a_write_refused_for_another_writers_is_a_refusal_only(world: World):
    table = _table(world)
    record = _record(world, table, Writer())
    world.plain.records.merge(table, "p", "r", {"n": 5, WRITER: settle.one_off()}, etag="*")

    with pytest.raises(Conflict):
        settle.merge(
            world.storage.records, table, record, {"n": 1, WRITER: settle.one_off()}, world.budget()
        )

    assert world.meter.outcomes("record_merge") == ["refused"]


@pytest.mark.parametrize(
    ("fault", "first"), [("ambiguous", "failed"), ("refused on retry", "refused")]
)
def test_an_insert_applied_with_its_answer_lost_is_told_settled(world: World, fault, first):
    table = _table(world)
    if fault == "ambiguous":
        world.faults.add("records.insert", "ambiguous")
    else:
        world.twisted.twists["insert"] = AlreadyExists("409 on the SDK's retry")

    mine = settle.insert(
        world.storage.records, table, "p", "r", {"n": 1, WRITER: settle.one_off()}, world.budget()
    )

    assert mine is not None
    assert world.meter.outcomes("record_insert") == [first, "ambiguous_settled"]


def test_a_page_of_inserts_applied_with_its_answer_lost_is_told_settled(world: World):
    table = _table(world)
    token = settle.one_off()
    ops = [BatchOp("insert", row, {"n": 1, WRITER: token}) for row in ("a", "b")]
    world.faults.add("records.batch", "ambiguous")

    settle.insert_many(world.storage.records, table, "p", ops, world.budget())

    assert world.meter.outcomes("record_batch") == ["failed", "ambiguous_settled"]


def _counted_chunk(world: World, twist: Callable[[], None]) -> list[str]:
    """Count a claimed chunk done through a batch that ``twist`` makes go wrong; the
    outcomes told of the batch."""
    job_id = f"m-{uuid.uuid4().hex[:10]}"
    plain = CheckpointStore(world.plain, world.clock)
    plain.create_job(job_id, "tests:Job", "m-q", {})
    plain.add_chunks(job_id, 0, [{"i": 0}])
    writer = Writer()
    task = plain.get_task(job_id, "chunk", 0)
    claimed = plain.write_task(task, {"state": "running", "owner": "me"}, token=writer.next())
    store = world.store()
    final = store.final_changes(claimed, {"state": "done"}, {"result": 1}, writer.next())
    twist()

    (written,), counts = store.count_chunks([(claimed, final)], "done", world.budget())

    assert counts["done"] == 1 and not isinstance(written, StorageError)
    assert plain.shard_counts(job_id, layout.shard_of(0))["done"] == 1
    return world.meter.outcomes("record_batch")


def test_a_done_batch_applied_with_its_answer_lost_is_told_settled(world: World):
    outcomes = _counted_chunk(world, lambda: world.faults.add("records.batch", "ambiguous"))
    assert outcomes == ["failed", "ambiguous_settled"]


def test_a_done_batch_applied_whose_retry_was_refused_is_told_settled(world: World):
    refused = BatchFailed("412", index=0, reason=Conflict("412 on the SDK's retry"))
    outcomes = _counted_chunk(world, lambda: world.twisted.twists.update(batch=refused))
    assert outcomes == ["refused", "ambiguous_settled"]
