"""The job catalogue's index follows every change of a job's state, on both backends:
its active rows and its counts of ended jobs agree with the job records after creates,
ends, reopens and deletes, two jobs ending at once, and batches applied with their
answer lost; a store without the counts row is scanned instead."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.catalogue.job_index import COUNTS_ROW, INDEXED, JobIndex, active_row, zero_counts
from checkpoint.errors import (
    AlreadyExists,
    BadRecord,
    BatchFailed,
    Conflict,
    NotFound,
    Unavailable,
)
from checkpoint.records import ENDED_JOB_STATES, REMOVED
from checkpoint.storage import Record, RecordStore, Storage
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults
from tests.backends import Backend


class LosesAnswer:
    """Records whose next batch on the jobs partition is applied, then reported lost
    (as a dropped connection after the service applied it); ``before`` is called before
    the next such batch (another writer getting there first)."""

    def __init__(self, records: RecordStore):
        self._records = records
        self.armed = 0
        self.before: Callable[[], object] | None = None

    def __getattr__(self, method: str) -> Any:
        return getattr(self._records, method)

    def batch(self, table: str, partition_key: str, operations: Any) -> list[str]:
        if self.before is not None and table == layout.JOBS_TABLE:
            before, self.before = self.before, None
            before()
        etags = self._records.batch(table, partition_key, operations)
        if self.armed and table == layout.JOBS_TABLE:
            self.armed -= 1
            raise Unavailable("connection dropped after the batch was applied")
        return etags


@dataclass
class Index:
    store: CheckpointStore
    storage: Storage
    records: LosesAnswer

    def read(self) -> JobIndex:
        index = CheckpointStore(self.storage).read_index()
        assert index is not None
        return index

    def job(self, state: str = "planning") -> str:
        job_id = f"idx-{uuid.uuid4().hex[:10]}"
        self.store.create_job(job_id, "tests:Job", "idx-q", {"n": 1})
        if state != "planning":
            self.store.change_job(job_id, lambda job: {"state": state})
        return job_id


@pytest.fixture
def index(backend: Backend) -> Iterator[Index]:
    # The session's Azurite may hold job records written by hand before any job was
    # created (an "old" store): give it its counts row, so this module's jobs are
    # indexed; every assertion here is on this module's own jobs and on differences.
    records = backend.storage.records
    CheckpointStore(backend.storage).ensure()
    try:
        records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW)
    except NotFound:
        records.insert(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, zero_counts())
    lossy = LosesAnswer(records)
    storage = Storage(backend.storage.queues, lossy, backend.storage.blobs, "lossy")
    yield Index(CheckpointStore(storage), backend.storage, lossy)


def _active(index: JobIndex) -> dict[str, str]:
    return {
        job_id: entry.state for job_id, entry in index.active if not isinstance(entry, Exception)
    }


def _moved(before: JobIndex, after: JobIndex) -> dict[str, int]:
    return {state: after.ended[state] - before.ended[state] for state in ENDED_JOB_STATES}


NONE_MOVED = dict.fromkeys(ENDED_JOB_STATES, 0)


def test_the_index_follows_a_job_from_its_creation_to_its_deletion(index: Index):
    before = index.read()

    job_id = index.job()
    assert _active(index.read())[job_id] == "planning"
    assert index.store.get_job(job_id).properties.get(INDEXED) is True

    index.store.change_job(job_id, lambda job: {"state": "running", "total": 2})
    assert _active(index.read())[job_id] == "running"

    index.store.change_job(job_id, lambda job: {"state": "failed", "error": "boom"})
    ended = index.read()
    assert job_id not in _active(ended)
    assert _moved(before, ended) == {**NONE_MOVED, "failed": 1}
    assert ended.recent[0].job_id == job_id and ended.recent[0].state == "failed"

    # A redrive reopens a failed job: listed again, no longer counted as failed
    index.store.change_job(job_id, lambda job: {"state": "running", "error": ""})
    reopened = index.read()
    assert _active(reopened)[job_id] == "running"
    assert _moved(before, reopened) == NONE_MOVED
    assert job_id not in [entry.job_id for entry in reopened.recent]

    index.store.change_job(job_id, lambda job: {"state": "done"})
    assert _moved(before, index.read()) == {**NONE_MOVED, "done": 1}

    index.store.delete_job(job_id)
    deleted = index.read()
    assert _moved(before, deleted) == NONE_MOVED
    assert job_id not in _active(deleted)
    assert job_id not in [entry.job_id for entry in deleted.recent]


def test_a_change_within_the_active_states_or_of_no_state_counts_nothing(index: Index):
    job_id = index.job("running")
    before = index.read()

    index.store.change_job(job_id, lambda job: {"state": "finalizing", "priority": 3})
    index.store.change_job(job_id, lambda job: {"priority": 4})

    after = index.read()
    assert _active(after)[job_id] == "finalizing"
    assert _moved(before, after) == NONE_MOVED


@pytest.mark.parametrize("way", ["stale", "threads"])
def test_two_jobs_ending_at_once_are_both_counted(index: Index, way: str):
    # Given two jobs, and two processes that each read the counts row before
    first, second = index.job("running"), index.job("running")
    stores = [CheckpointStore(index.storage), CheckpointStore(index.storage)]
    for store in stores:
        store.read_index()
    before = index.read()

    # When each ends one job (its counts row stale for the second: it loses the race)
    def end(store: CheckpointStore, job_id: str) -> None:
        store.change_job(job_id, lambda job: {"state": "done"})

    if way == "stale":
        end(stores[0], first)
        end(stores[1], second)
    else:
        ready = threading.Barrier(2)

        def run(store: CheckpointStore, job_id: str) -> None:
            ready.wait()
            end(store, job_id)

        threads = [
            threading.Thread(target=run, args=(store, job_id))
            for store, job_id in zip(stores, (first, second), strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # Then both are counted, neither listed
    after = index.read()
    assert _moved(before, after) == {**NONE_MOVED, "done": 2}
    assert {first, second}.isdisjoint(_active(after))


def test_a_job_changed_by_someone_else_is_the_callers_conflict(index: Index):
    job_id = index.job("running")
    stale = index.store.get_job(job_id)
    index.store.change_job(job_id, lambda job: {"priority": 9})
    before = index.read()

    with pytest.raises(Conflict):
        index.store.update_job(stale, state="cancelled")

    assert _moved(before, index.read()) == NONE_MOVED
    assert _active(index.read())[job_id] == "running"


@pytest.mark.parametrize("write", ["end", "delete"])
def test_a_batch_applied_with_its_answer_lost_is_counted_once(index: Index, write: str):
    # Given a job (ended, for a deletion), and its next batch of the jobs partition lost
    job_id = index.job("running" if write == "end" else "done")
    before = index.read()
    index.records.armed = 1

    # When the write is made
    if write == "end":
        index.store.change_job(job_id, _done)
    else:
        index.store.delete_job(job_id)

    # Then it was applied once, settled by reading the job record
    assert index.records.armed == 0
    after = index.read()
    assert _moved(before, after) == {**NONE_MOVED, "done": 1 if write == "end" else -1}
    assert job_id not in _active(after)


@pytest.mark.parametrize("lost", [False, True])
def test_a_reopen_that_removes_a_property_keeps_the_rest_and_counts_once(index: Index, lost: bool):
    # Given a job failed past its tolerance: cancelled_on set, its params spilled or not
    job_id = index.job("running")
    now = index.store.clock.now()
    index.store.change_job(
        job_id, lambda job: {"state": "failed", "cancelled_on": now, "cancel_reason": "3"}
    )
    before = index.read()
    index.records.armed = int(lost)

    # When a redrive reopens it, removing cancelled_on (its answer lost, or not)
    reopen = {"state": "running", "cancelled_on": REMOVED, "cancel_reason": ""}
    assert repr(reopen) == "{'state': 'running', 'cancelled_on': REMOVED, 'cancel_reason': ''}"
    written = index.store.change_job(job_id, lambda job: reopen)

    # Then the property is gone, the rest as it was, and the index moved once
    job = index.store.get_job(job_id)
    assert written is not None and written.cancelled_on is None
    assert (job.state, job.cancelled_on, job.cancel_reason) == ("running", None, None)
    assert "cancelled_on" not in job.properties
    assert index.store.params(job) == {"n": 1} and job.job_type == "tests:Job"
    assert _moved(before, index.read()) == {**NONE_MOVED, "failed": -1}
    assert _active(index.read())[job_id] == "running"
    # And a property removed with no change of state is removed too
    index.store.change_job(job_id, lambda job: {"cancel_reason": REMOVED})
    assert "cancel_reason" not in index.store.get_job(job_id).properties


@pytest.mark.parametrize("meanwhile", ["job changed", "counts moved"])
def test_a_deletion_that_loses_a_race_reads_again_and_counts_once(index: Index, meanwhile: str):
    # Given an ended job, and another writer getting to its record or the counts first
    job_id, other = index.job("done"), index.job("running")
    index.store.read_index()  # the counts row kept, to go stale
    before = index.read()
    plain = CheckpointStore(index.storage)
    if meanwhile == "job changed":
        index.records.before = lambda: plain.change_job(job_id, lambda job: {"priority": 7})
    else:
        index.records.before = lambda: plain.change_job(other, _done)

    # When it is deleted
    index.store.delete_job(job_id)

    # Then it is gone and uncounted, the other's end counted
    after = index.read()
    ended = 1 if meanwhile == "counts moved" else 0
    assert _moved(before, after) == {**NONE_MOVED, "done": ended - 1}
    with pytest.raises(NotFound):
        _row(index, job_id)


def test_a_counts_row_garbled_by_hand_makes_the_views_scan(index: Index):
    # Given a counts row edited into something unreadable, and an active row too
    job_id, garbled = index.job("running"), index.job("running")
    records = index.storage.records
    kept = _row(index, COUNTS_ROW)
    partition = (layout.JOBS_TABLE, layout.JOBS_PARTITION)
    records.merge(*partition, active_row(garbled), {"state": "sideways"}, etag="*")
    assert isinstance(dict(index.read().active)[garbled], BadRecord)
    records.merge(*partition, COUNTS_ROW, {"recent": "not json"}, etag="*")
    assert index.read().recent == []
    records.merge(*partition, COUNTS_ROW, {"done": "many"}, etag="*")
    try:
        # Then there is no index to read, and jobs still end (counted nowhere)
        store = CheckpointStore(index.storage)
        assert store.read_index() is None
        assert job_id in dict(store.scan_jobs())
        store.change_job(job_id, _done)
        assert store.get_job(job_id).state == "done"
    finally:
        records.upsert(*partition, COUNTS_ROW, kept.properties)
        records.merge(*partition, active_row(garbled), {"state": "running"}, etag="*")
        records.delete(*partition, active_row(job_id), etag="*")  # ended, kept no index


def test_a_batch_refused_busy_is_tried_again_and_counted_once(index: Index):
    job_id = index.job("running")
    before = index.read()
    faults = ScriptedFaults(("records.batch", "busy"))
    store = CheckpointStore(FaultyStorage(index.storage, faults).storage)

    store.change_job(job_id, _done)

    assert faults.pending == []
    assert _moved(before, index.read()) == {**NONE_MOVED, "done": 1}


def test_a_batch_refused_for_an_index_row_is_the_callers_error(index: Index):
    # Given a job whose counts row is refused by the service (not an ETag race)
    job_id = index.job("running")
    real = index.records._records.batch

    def refuse(table: str, partition_key: str, operations: Any) -> list[str]:
        reason = AlreadyExists("refused", status=409, code="EntityAlreadyExists")
        raise BatchFailed("refused", index=len(operations) - 1, reason=reason)

    index.records._records = _With(index.records._records, batch=refuse)
    try:
        with pytest.raises(BatchFailed):
            index.store.change_job(job_id, _done)
        with pytest.raises(BatchFailed):
            index.store.create_job(f"idx-{uuid.uuid4().hex[:10]}", "tests:Job", "q", {})
    finally:
        index.records._records = _With(index.records._records, batch=real)
    assert index.store.get_job(job_id).state == "running"


class _With:
    """Records with one method replaced."""

    def __init__(self, records: Any, **methods: Any):
        self._records, self._methods = records, methods

    def __getattr__(self, method: str) -> Any:
        return self._methods.get(method) or getattr(self._records, method)


def test_a_create_applied_with_its_answer_lost_is_the_callers_and_listed_once(index: Index):
    job_id = f"idx-{uuid.uuid4().hex[:10]}"
    index.records.armed = 1

    job, created = index.store.create_job(job_id, "tests:Job", "idx-q", {"n": 1})

    assert created and job.state == "planning" and index.records.armed == 0
    assert [found for found, _ in index.read().active].count(job_id) == 1


def test_an_active_row_deleted_by_hand_does_not_keep_a_job_from_ending(index: Index):
    job_id = index.job("running")
    index.storage.records.delete(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, active_row(job_id), etag="*"
    )
    before = index.read()

    index.store.change_job(job_id, _done)

    assert _moved(before, index.read()) == {**NONE_MOVED, "done": 1}


def test_a_store_without_the_counts_row_keeps_no_index_and_is_scanned(index: Index):
    # Given a store whose catalogue has jobs but no counts row (an earlier version's)
    old = index.job("running")
    records = index.storage.records
    kept = records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW)
    records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, etag="*")
    try:
        store = CheckpointStore(index.storage)

        # Then it has no index to read, a new job gets no row, and jobs still end
        assert store.read_index() is None
        job_id = f"idx-{uuid.uuid4().hex[:10]}"
        store.create_job(job_id, "tests:Job", "idx-q", {"n": 1})
        assert store.get_job(job_id).properties.get(INDEXED) is None
        store.change_job(job_id, _done)
        store.change_job(old, _done)
        assert store.get_job(old).state == "done"
        scanned = dict(store.scan_catalogue())
        assert scanned[job_id].state == "done"  # type: ignore[union-attr]
        assert not any(found.startswith("~") for found in scanned)
    finally:
        records.upsert(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, kept.properties)
        records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, active_row(old), etag="*")


def test_a_new_store_gets_its_counts_row_with_its_first_job(tmp_path):
    from checkpoint.backends import open_storage

    with open_storage(str(tmp_path / "fresh")) as storage:
        store = CheckpointStore(storage)
        store.ensure()
        assert store.read_index() is None

        store.create_job("first", "tests:Job", "idx-q", {})

        index = store.read_index()
        assert index is not None and _active(index) == {"first": "planning"}
        assert index.ended == NONE_MOVED


def test_the_scans_list_no_row_of_the_index(index: Index):
    job_id = index.job("running")

    jobs = [found for found, _ in index.store.scan_jobs()]
    catalogue = [found for found, _ in index.store.scan_catalogue()]

    assert job_id in jobs and job_id in catalogue
    assert not [found for found in (*jobs, *catalogue) if found.startswith("~")]


def _row(index: Index, row: str) -> Record:
    return index.storage.records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, row)


def _done(job: Any) -> dict[str, Any]:
    return {"state": "done"}
