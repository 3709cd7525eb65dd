"""The checkpoint store and its settled writes when storage fails, on both backends.

Faults are injected at the storage protocol: :class:`~checkpoint.testing.faults.FaultyStorage`
with :class:`~checkpoint.testing.faults.ScriptedFaults` for busy (not applied) and ambiguous
(applied, the answer lost) calls, and :class:`Twisted` for what that wrapper cannot
show: a write applied whose retry by the SDK is then refused (412, 409), or another
writer slipping in between a lost answer and the read that settles it. The store's
retries wait on a FakeClock, so nothing really sleeps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from checkpoint import layout, settle
from checkpoint.clock import FakeClock
from checkpoint.errors import (
    AlreadyExists,
    BadRecord,
    BatchFailed,
    CodecError,
    Conflict,
    InvalidRequest,
    NotFound,
    StorageError,
    Throttled,
    TooLarge,
    Unavailable,
)
from checkpoint.records import TaskRecord
from checkpoint.retries import Budget, RetryPolicy
from checkpoint.settle import WRITER, Writer
from checkpoint.storage import BatchOp, Record, RecordStore, Storage
from checkpoint.store import CheckpointStore
from checkpoint.tasks import reading
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults
from tests.backends import Backend

#: msgpack of this is well over SPILL_BYTES.
BIG = {"rows": list(range(20_000))}
#: A budget of one try: what a caller has left at the very end of its lease.
NO_RETRY = RetryPolicy("last try", give_up_after_seconds=0.0)


class Twisted:
    """Records that misbehave once per call named in ``twists``: each is a function
    taking the real call (a no-argument callable) and the call's arguments."""

    def __init__(self, records: RecordStore):
        self._records = records
        self.twists: dict[str, list[Callable[..., Any]]] = {}

    def twist(self, method: str, how: Callable[..., Any]) -> None:
        self.twists.setdefault(method, []).append(how)

    def __getattr__(self, method: str) -> Any:
        real = getattr(self._records, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            pending = self.twists.get(method)
            if pending:
                return pending.pop(0)(lambda: real(*args, **kwargs), *args, **kwargs)
            return real(*args, **kwargs)

        return call

    @property
    def pending(self) -> list[str]:
        return [method for method, hows in self.twists.items() for _ in hows]


def applied_then(error: StorageError) -> Callable[..., Any]:
    """The call is applied, then the caller is told ``error`` (an SDK retry's answer)."""

    def how(run: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        run()
        raise error

    return how


@dataclass
class World:
    """A store over faulty storage, and a plain store to look at what is really there."""

    faults: ScriptedFaults
    twisted: Twisted
    store: CheckpointStore
    plain: CheckpointStore
    clock: FakeClock
    job_id: str

    def chunks(self, count: int, payload: Any = None) -> list[TaskRecord]:
        self.plain.add_chunks(self.job_id, 0, [payload or {"i": i} for i in range(count)])
        return [self.plain.get_task(self.job_id, "chunk", i) for i in range(count)]

    def stored(self, index: int = 0) -> TaskRecord:
        return self.plain.get_task(self.job_id, "chunk", index)

    def blobs(self) -> list[str]:
        listed = self.plain.storage.blobs.list(layout.DATA_CONTAINER, f"{self.job_id}/")
        return [blob.name for blob in listed]

    def budget(self, policy: RetryPolicy) -> Budget:
        return Budget(policy, self.clock)


@pytest.fixture
def world(backend: Backend) -> Iterator[World]:
    faults = ScriptedFaults()
    faulty = FaultyStorage(backend.storage, faults).storage
    twisted = Twisted(faulty.records)
    storage = Storage(
        queues=faulty.queues,
        records=twisted,  # type: ignore[arg-type]
        blobs=faulty.blobs,
        description=faulty.description,
    )
    clock = FakeClock()
    job_id = f"sf-{uuid.uuid4().hex[:10]}"
    plain = CheckpointStore(backend.storage)
    plain.create_job(job_id, "tests:Job", "sf-q", {"n": 1})
    yield World(faults, twisted, CheckpointStore(storage, clock), plain, clock, job_id)
    assert faults.pending == [], "a scripted fault never happened"
    assert twisted.pending == [], "a twist never happened"


def claim(world: World, task: TaskRecord, writer: Writer | None = None) -> TaskRecord:
    writer = writer or Writer()
    changes = {"state": "running", "owner": "me", "attempt": task.attempt + 1}
    return world.plain.write_task(task, changes, token=writer.next())


# --------------------------------------------------------------------------- merges


def test_a_write_applied_whose_retry_was_refused_is_recognised_as_ours(world: World):
    # Given a checkpoint whose merge is applied, then refused on the SDK's retry (412)
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)
    world.twisted.twist("merge", applied_then(Conflict("412 on the retry")))

    # When it is written
    written = world.store.write_task(claimed, {}, {"progress": 5}, token=writer.next())

    # Then it is our own write, not a conflict: the record is as we wrote it
    assert written.etag == world.stored().etag
    assert world.plain.value(world.stored().properties, "progress") == 5


def test_a_lost_write_overtaken_by_another_writer_is_a_conflict(world: World):
    # Given a merge that is not applied, its answer lost, and another worker's write
    # landing before the read that settles it
    (task,) = world.chunks(1)
    claimed = claim(world, task)

    def other_writes_then_lost(run: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        world.plain.write_task(world.stored(), {"owner": "other"}, token=Writer().next())
        raise Unavailable("connection lost")

    world.twisted.twist("merge", other_writes_then_lost)

    # When it is written, the other writer's record stands
    with pytest.raises(Conflict, match="changed by another writer"):
        world.store.write_task(claimed, {"state": "done"}, token=Writer().next())
    assert world.stored().owner == "other"


def test_a_write_to_a_record_deleted_meanwhile_is_not_found_and_keeps_no_blob(world: World):
    (task,) = world.chunks(1)
    claimed = claim(world, task)
    world.plain.storage.records.delete(
        layout.TASKS_TABLE,
        layout.shard_partition(world.job_id, 0),
        layout.chunk_row(0),
        etag=claimed.etag,
    )

    with pytest.raises(NotFound):
        world.store.write_task(claimed, {}, {"progress": BIG}, token=Writer().next())

    assert world.blobs() == []  # the spilled state it wrote first was cleaned up


def refused(error: StorageError) -> Callable[..., Any]:
    """The call is refused with ``error``, nothing applied."""

    def how(run: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        raise error

    return how


def test_a_write_refused_keeps_no_spilled_blob(world: World):
    (task,) = world.chunks(1)
    claimed = claim(world, task)
    world.twisted.twist("merge", refused(TooLarge("entity too large")))

    with pytest.raises(TooLarge):
        world.store.write_task(claimed, {}, {"progress": BIG}, token=Writer().next())

    assert world.blobs() == []


def test_a_refused_write_whose_blob_cannot_be_deleted_raises_its_own_error(world: World):
    (task,) = world.chunks(1)
    claimed = claim(world, task)
    world.twisted.twist("merge", refused(TooLarge("entity too large")))
    world.faults.add("blobs.delete", "busy")

    with pytest.raises(TooLarge):
        world.store.write_task(claimed, {}, {"progress": BIG}, token=Writer().next())

    assert len(world.blobs()) == 1  # left for the job's deletion, not raised instead


def test_a_write_whose_outcome_is_unknown_keeps_its_spilled_blob(world: World):
    (task,) = world.chunks(1)
    claimed = claim(world, task)
    world.faults.add("records.merge", "busy")

    with pytest.raises(Throttled):
        world.store.write_task(
            claimed, {}, {"progress": BIG}, token=Writer().next(), budget=world.budget(NO_RETRY)
        )

    assert len(world.blobs()) == 1


def test_a_job_refused_keeps_no_spilled_params(world: World):
    job_id = f"sf-{uuid.uuid4().hex[:10]}"
    world.twisted.twist("insert", refused(InvalidRequest("refused")))

    with pytest.raises(InvalidRequest):
        world.store.create_job(job_id, "tests:Job", "sf-q", BIG)

    assert list(world.plain.storage.blobs.list(layout.DATA_CONTAINER, f"{job_id}/")) == []


def test_a_planning_page_refused_keeps_only_the_pages_recorded_before(world: World):
    # Given chunks 31 and 32 of large payloads (two shards: two pages), the second
    # page refused
    world.twisted.twist("batch", lambda run, *args, **kwargs: run())
    world.twisted.twist("batch", refused(BatchFailed("bad", index=0, reason=InvalidRequest("bad"))))

    with pytest.raises(BatchFailed):
        world.store.add_chunks(world.job_id, 31, [BIG, BIG])

    # Then only the recorded chunk's payload blob is left, the one it names
    assert world.blobs() == [world.stored(31).properties["payload_blob"]]
    with pytest.raises(NotFound):
        world.stored(32)


def test_a_planning_page_past_the_budget_keeps_its_blobs_and_drops_the_unsent(world: World):
    world.faults.add("records.batch", "busy")

    with pytest.raises(Throttled):
        world.store.add_chunks(world.job_id, 31, [BIG, BIG], world.budget(NO_RETRY))

    # The first page may have been applied; the second was never sent
    assert len(world.blobs()) == 1


def test_a_payload_that_cannot_be_stored_leaves_no_blob_of_the_others(world: World):
    with pytest.raises(CodecError):
        world.store.add_chunks(world.job_id, 0, [BIG, {"bad": object()}])

    assert world.blobs() == []


def test_a_replaced_blob_already_gone_is_no_error(world: World):
    # Given a spilled state whose blob someone removed
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)
    first = world.store.write_task(claimed, {}, {"progress": BIG}, token=writer.next())
    (blob,) = world.blobs()
    world.plain.storage.blobs.delete(layout.DATA_CONTAINER, blob)

    # When a new state replaces it
    world.store.write_task(first, {}, {"progress": 1}, token=writer.next())

    # Then the write stands and no blob is left
    assert world.plain.value(world.stored().properties, "progress") == 1
    assert world.blobs() == []


def test_a_busy_read_while_settling_a_lost_write_is_retried(world: World):
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)
    world.faults.add("records.merge", "ambiguous")
    world.faults.add("records.get", "busy")

    written = world.store.write_task(claimed, {}, {"progress": 3}, token=writer.next())

    assert written.etag == world.stored().etag
    assert world.clock.sleeps  # waited on the fake clock before trying again


# --------------------------------------------------------------------------- inserts


def test_an_insert_applied_whose_retry_found_it_there_is_ours(world: World):
    world.twisted.twist("insert", applied_then(AlreadyExists("409 on the retry")))

    record = world.store.ensure_task(world.job_id, "final")

    assert record.state == "waiting"
    assert record.etag == world.plain.get_task(world.job_id, "final", 0).etag


def test_a_busy_insert_is_tried_again_once_known_not_applied(world: World):
    world.faults.add("records.insert", "busy")

    record = world.store.ensure_task(world.job_id, "plan")

    assert record.etag == world.plain.get_task(world.job_id, "plan", 0).etag
    assert world.clock.sleeps  # waited on the fake clock before trying again


def test_a_lost_insert_where_someone_else_inserted_is_theirs(world: World):
    # Given an insert not applied, its answer lost, while another caller inserted the row
    def other_inserts_then_lost(run: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        world.plain.ensure_task(world.job_id, "final")
        raise Unavailable("connection lost")

    world.twisted.twist("insert", other_inserts_then_lost)

    # When the insert settles, it is not ours: the existing record is read and returned
    record = world.store.ensure_task(world.job_id, "final")
    theirs = world.plain.get_task(world.job_id, "final", 0)
    assert record.etag == theirs.etag
    assert settle.token_of(record.properties) == settle.token_of(theirs.properties)


# --------------------------------------------------------------------------- pages of inserts


def test_a_planning_page_refused_for_another_reason_is_raised(world: World):
    def refused(run: Callable[[], Any], table: str, partition: str, ops: Sequence[BatchOp]):
        raise BatchFailed("bad row", index=0, reason=InvalidRequest("bad row"))

    world.twisted.twist("batch", refused)

    with pytest.raises(BatchFailed, match="bad row"):
        world.store.add_chunks(world.job_id, 0, [{"i": 0}, {"i": 1}])


def test_a_busy_planning_page_is_recorded_once_when_tried_again(world: World):
    world.faults.add("records.batch", "busy")

    planned = world.store.add_chunks(world.job_id, 0, [{"i": i} for i in range(3)])

    assert [p.etag for p in planned] == [world.stored(i).etag for i in range(3)]


def test_a_planning_page_applied_with_its_answer_lost_at_the_budgets_end_is_planned(
    world: World,
):
    world.faults.add("records.batch", "ambiguous")

    planned = world.store.add_chunks(
        world.job_id, 0, [{"i": i} for i in range(3)], world.budget(NO_RETRY)
    )

    assert [p.etag for p in planned] == [world.stored(i).etag for i in range(3)]


# --------------------------------------------------------------------------- done batches


def done(world: World, task: TaskRecord, writer: Writer) -> dict[str, Any]:
    return world.store.final_changes(task, {"state": "done"}, {"result": 1}, writer.next())


def test_a_done_batch_applied_whose_retry_was_refused_counts_once(world: World):
    # Given a done batch applied, then refused on the SDK's retry (412 on its first row)
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)
    world.twisted.twist("batch", applied_then(BatchFailed("412", index=0, reason=Conflict("412"))))

    # When the chunk is counted done
    (written,), counts = world.store.count_chunks([(claimed, done(world, claimed, writer))], "done")

    # Then it was written once, and the counter raised once
    assert counts == {"done": 1, "poisoned": 0}
    assert isinstance(written, TaskRecord) and written.etag == world.stored().etag
    assert world.plain.shard_counts(world.job_id, 0) == {"done": 1, "poisoned": 0}


def test_a_busy_done_batch_is_tried_again_and_counts_once(world: World):
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)
    world.faults.add("records.batch", "busy")

    world.store.count_chunk(claimed, {"state": "done"}, {"result": 1}, "done", token=writer.next())

    assert world.stored().state == "done"
    assert world.plain.shard_counts(world.job_id, 0) == {"done": 1, "poisoned": 0}


def test_a_done_batch_refused_for_another_reason_raises_that_reason(world: World):
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)

    def refused(run: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        raise BatchFailed("too large", index=0, reason=InvalidRequest("too large"))

    world.twisted.twist("batch", refused)

    with pytest.raises(InvalidRequest, match="too large"):
        world.store.count_chunk(
            claimed, {"state": "done"}, {"result": BIG}, "done", token=writer.next()
        )
    assert world.stored().state == "running"
    assert world.plain.shard_counts(world.job_id, 0) == {"done": 0, "poisoned": 0}
    assert world.blobs() == []  # the result it spilled first was cleaned up


def test_a_done_batch_past_the_budget_keeps_its_spilled_blob(world: World):
    # Given a done batch still busy when its budget ends: it may yet have been applied
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)
    world.faults.add("records.batch", "busy")

    with pytest.raises(Throttled):
        world.store.count_chunks(
            [(claimed, world.store.final_changes(claimed, {}, {"result": BIG}, writer.next()))],
            "done",
            world.budget(NO_RETRY),
        )
    assert len(world.blobs()) == 1  # the record may name it: never deleted unknown


def test_a_chunk_deleted_before_its_done_batch_is_left_out_and_the_rest_counted(
    world: World,
):
    # Given two finished chunks of one shard, one of whose records is gone
    first, second = world.chunks(2)
    writer = Writer()
    first, second = claim(world, first, writer), claim(world, second, writer)
    world.plain.storage.records.delete(
        layout.TASKS_TABLE,
        layout.shard_partition(world.job_id, 0),
        layout.chunk_row(0),
        etag=first.etag,
    )
    # and a busy first try (the settling read then finds the first row gone)
    world.faults.add("records.batch", "busy")

    ended = [(task, done(world, task, writer)) for task in (first, second)]
    (gone, written), counts = world.store.count_chunks(ended, "done")

    assert isinstance(gone, NotFound)
    assert isinstance(written, TaskRecord) and written.state == "done"
    assert counts == {"done": 1, "poisoned": 0}


def test_a_busy_done_batch_at_the_budgets_end_raises_and_writes_nothing(world: World):
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)
    world.faults.add("records.batch", "busy")

    with pytest.raises(Throttled):
        world.store.count_chunks(
            [(claimed, done(world, claimed, writer))], "done", world.budget(NO_RETRY)
        )

    assert world.stored().state == "running"
    assert world.plain.shard_counts(world.job_id, 0) == {"done": 0, "poisoned": 0}


def test_the_remembered_counter_rows_are_bounded(world: World):
    world.store._counting._rows.update({f"p{n}": None for n in range(4097)})  # type: ignore[misc]
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)

    world.store.count_chunk(claimed, {"state": "done"}, {}, "done", token=writer.next())

    assert list(world.store._counting._rows) == [layout.shard_partition(world.job_id, 0)]


# --------------------------------------------------------------------------- reading


def test_a_counter_that_is_not_counts_is_a_bad_record(world: World):
    world.plain.storage.records.merge(
        layout.TASKS_TABLE,
        layout.shard_partition(world.job_id, 3),
        layout.COUNTS_ROW,
        {"done": "seven"},
        etag="*",
    )

    with pytest.raises(BadRecord, match="shard 3 counter"):
        world.store.counts(world.job_id)


def test_a_scan_reads_page_by_page_and_retries_a_busy_page_where_it_stopped(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    # Given pages of 3 rows, 8 chunks in one shard, and a busy reply to its second page
    monkeypatch.setattr(reading, "QUERY_PAGE_ROWS", 3)
    world.chunks(8)
    asked: list[Any] = []
    real_page = world.store._reading._page

    def page(partition: str, where: Any) -> list[Record]:
        if partition.endswith("~00"):
            asked.append(where)
            if len(asked) == 2:
                world.faults.add("records.query", "busy")
        return real_page(partition, where)

    monkeypatch.setattr(world.store._reading, "_page", page)

    # When the job's chunks are read
    indexes = [task.index for task in world.store.chunks(world.job_id)]

    # Then every chunk comes once, in order: pages after rows 2 and 5, the busy one
    # asked again from where it stopped
    assert indexes == list(range(8))
    starts = [conditions[0].value for conditions in asked]
    assert starts == ["c", layout.chunk_row(2), layout.chunk_row(2), layout.chunk_row(5)]


def test_a_spilled_result_whose_blob_is_gone_is_a_bad_record_naming_it(world: World):
    (task,) = world.chunks(1)
    writer = Writer()
    claimed = claim(world, task, writer)
    world.store.count_chunk(
        claimed, {"state": "done"}, {"result": BIG}, "done", token=writer.next()
    )
    (blob,) = world.blobs()
    world.plain.storage.blobs.delete(layout.DATA_CONTAINER, blob)

    with pytest.raises(BadRecord, match=r"chunk 0 of job .*result_blob .* names no blob"):
        list(world.store.results(world.job_id))


@pytest.mark.parametrize(
    ("properties", "problem"),
    [
        ({"progress": b"", "progress_blob": 7}, "progress_blob 7 is not a blob name"),
        ({"progress": "text"}, "progress is a str, not msgpack bytes"),
        ({"progress": b"\xc1"}, "progress is not valid msgpack"),
    ],
)
def test_a_stored_value_that_cannot_be_read_is_a_bad_record(
    world: World, properties: dict[str, Any], problem: str
):
    with pytest.raises(BadRecord, match=problem):
        world.store.value(properties, "progress", of="chunk 0")


def test_poisoned_tasks_of_a_job_without_planning_or_finalize_records_are_its_chunks(
    world: World,
):
    (task,) = world.chunks(1)
    world.plain.count_chunk(task, {"state": "poisoned"}, {}, "poisoned")

    assert [i for _, i, _ in world.store.poisoned_tasks(world.job_id)] == [0]


def test_a_garbled_task_record_is_found_as_it_is_to_be_written_over(world: World):
    (task,) = world.chunks(1)
    world.plain.storage.records.merge(
        layout.TASKS_TABLE,
        layout.shard_partition(world.job_id, 0),
        layout.chunk_row(0),
        {"state": "exploded", "attempt": -1},
        etag="*",
    )
    with pytest.raises(BadRecord):
        world.store.get_task(world.job_id, "chunk", 0)

    found = world.store.task_as_found(world.job_id, "chunk", 0)

    assert (
        found.etag
        == world.plain.storage.records.get(
            layout.TASKS_TABLE, layout.shard_partition(world.job_id, 0), layout.chunk_row(0)
        ).etag
    )
    assert found.properties["state"] == "exploded"
    assert (found.state, found.attempt) == ("waiting", 0)


def test_busy_table_creation_at_first_use_is_retried(backend: Backend):
    faults = ScriptedFaults(("records.create_table", "busy"), ("blobs.create_container", "busy"))
    clock = FakeClock()
    store = CheckpointStore(FaultyStorage(backend.storage, faults).storage, clock)

    store.ensure()

    assert faults.pending == [] and len(clock.sleeps) == 2
    assert store.list_jobs() is not None


def test_a_job_read_busy_then_answered_is_read(world: World):
    world.faults.add("records.get", "busy")

    assert world.store.get_job(world.job_id).state == "planning"


# A change of state is written in a batch with the catalogue's index rows; any other
# change of a job is a merge.
@pytest.mark.parametrize(
    ("write", "changes"), [("batch", {"state": "failed"}), ("merge", {"priority": 5})]
)
def test_a_job_update_applied_and_lost_by_another_writer_meanwhile_is_a_conflict(
    world: World, write: str, changes: dict[str, Any]
):
    job = world.plain.get_job(world.job_id)

    def other_updates_then_lost(run: Callable[[], Any], *args: Any, **kwargs: Any) -> Any:
        world.plain.update_job(world.plain.get_job(world.job_id), state="running")
        raise Unavailable("connection lost")

    world.twisted.twist(write, other_updates_then_lost)

    with pytest.raises(Conflict):
        world.store.update_job(job, **changes)
    assert world.plain.get_job(world.job_id).state == "running"


def test_writer_tokens_of_one_claim_count_up_and_of_two_claims_differ():
    first, second = Writer(), Writer()

    a, b = first.next(), first.next()

    assert a.endswith(".1") and b.endswith(".2")
    assert settle.same_claim(a, b) and not settle.same_claim(a, second.next())
    assert not settle.same_claim("", "")
    assert settle.token_of({WRITER: 7}) == ""  # a hand-edited record's token is no token


def test_counting_no_chunks_is_a_mistake_of_the_caller(world: World):
    with pytest.raises(ValueError, match="no chunks to count"):
        world.store.count_chunks([], "done")


def test_reading_a_jobs_chunks_stops_at_the_first_that_cannot_be_read(world: World):
    world.chunks(3)
    world.plain.storage.records.merge(
        layout.TASKS_TABLE,
        layout.shard_partition(world.job_id, 0),
        layout.chunk_row(1),
        {"attempt": "many"},
        etag="*",
    )
    read: list[int] = []

    with pytest.raises(BadRecord, match="chunk 1 of job"):
        for task in world.store.chunks(world.job_id):
            read.append(task.index)

    assert read == [0]
