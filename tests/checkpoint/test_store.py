"""The checkpoint store on every backend: idempotent job and chunk creation, fenced task
writes, spill of large values to blob (and cleanup of what they replace), atomic chunk
counters that survive a concurrent counter change, and reading a job back in order."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, cast

import pytest

from checkpoint import layout
from checkpoint.catalogue.job_index import CatalogueEntry
from checkpoint.catalogue.job_records import CATALOGUE_COLUMNS
from checkpoint.errors import (
    BadRecord,
    ConfigurationError,
    Conflict,
    JobNotEnded,
    JobNotFound,
    NotFound,
)
from checkpoint.metering import metered
from checkpoint.records import SPILL_BYTES
from checkpoint.storage import ANY_ETAG, Storage
from checkpoint.store import CheckpointStore
from tests.backends import Backend

#: msgpack of this is well over SPILL_BYTES.
BIG = {"rows": list(range(20_000))}


def _job_id() -> str:
    return f"job-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(backend: Backend) -> CheckpointStore:
    return CheckpointStore(backend.storage)


def _blobs(store: CheckpointStore, job_id: str) -> list[str]:
    return [blob.name for blob in store.storage.blobs.list(layout.DATA_CONTAINER, f"{job_id}/")]


def _new_job(store: CheckpointStore, chunks: int = 0, payload: Any = None) -> str:
    job_id = _job_id()
    store.create_job(job_id, "tests:Job", "jobs-q", {"n": chunks})
    if chunks:
        store.add_chunks(
            job_id, 0, [payload if payload is not None else {"i": i} for i in range(chunks)]
        )
    return job_id


def _claim(store: CheckpointStore, job_id: str, index: int, owner: str = "me"):
    task = store.get_task(job_id, "chunk", index)
    return store.write_task(task, {"state": "running", "owner": owner, "attempt": 1})


# --------------------------------------------------------------------------- jobs


def test_create_job_records_it_planning(store: CheckpointStore):
    job_id = _job_id()
    job, created = store.create_job(job_id, "mod:Job", "jobs-q", {"rows": 5})
    assert created is True
    assert (job.job_id, job.job_type, job.queue, job.state) == (
        job_id,
        "mod:Job",
        "jobs-q",
        "planning",
    )
    assert job.total is None
    assert store.params(job) == {"rows": 5}
    assert store.counts(job_id) == {"done": 0, "poisoned": 0}
    assert job_id in [listed.job_id for listed in store.list_jobs()]


def test_create_job_again_returns_the_first_never_a_duplicate(store: CheckpointStore):
    job_id = _job_id()
    first, _ = store.create_job(job_id, "mod:Job", "jobs-q", {"rows": 5})
    again, created = store.create_job(job_id, "mod:Job", "jobs-q", {"rows": 999})
    assert created is False
    assert again.etag == first.etag
    assert store.params(again) == {"rows": 5}


def test_create_job_after_a_crash_before_its_counters_completes_them(
    store: CheckpointStore,
):
    # Given a first submit that died after recording the job but before all counters
    job_id = _job_id()
    store.create_job(job_id, "mod:Job", "jobs-q", {})
    for shard in (3, 15):
        store.storage.records.delete(
            layout.TASKS_TABLE,
            layout.shard_partition(job_id, shard),
            layout.COUNTS_ROW,
            etag=ANY_ETAG,
        )

    # When the job is submitted again
    _, created = store.create_job(job_id, "mod:Job", "jobs-q", {})

    # Then every shard's counter exists: chunks of those shards can be counted
    assert created is False
    assert store.counts(job_id) == {"done": 0, "poisoned": 0}


def test_create_job_again_with_large_params_leaves_no_stray_blob(store: CheckpointStore):
    job_id = _job_id()
    job, _ = store.create_job(job_id, "mod:Job", "jobs-q", BIG)
    assert store.params(job) == BIG
    assert len(_blobs(store, job_id)) == 1

    store.create_job(job_id, "mod:Job", "jobs-q", BIG)

    assert _blobs(store, job_id) == [job.properties["params_blob"]]


def test_create_job_refuses_a_bad_id(store: CheckpointStore):
    with pytest.raises(ConfigurationError, match="invalid job id"):
        store.create_job("a/b", "mod:Job", "jobs-q", {})


def test_get_job_of_an_unknown_id_is_job_not_found(store: CheckpointStore):
    with pytest.raises(JobNotFound):
        store.get_job(_job_id())


def test_update_job_is_fenced(store: CheckpointStore):
    job_id = _new_job(store)
    job = store.get_job(job_id)
    updated = store.update_job(job, state="running", total=3)
    assert (updated.state, updated.total) == ("running", 3)
    assert store.get_job(job_id).etag == updated.etag
    with pytest.raises(Conflict):
        store.update_job(job, state="failed")
    assert store.get_job(job_id).state == "running"


def test_scan_catalogue_reads_each_jobs_state_and_age_and_only_those(store: CheckpointStore):
    # Given a job done, one planning with large params, and one whose state is garbled
    done = _new_job(store)
    store.update_job(store.get_job(done), state="done")
    planning = _job_id()
    store.create_job(planning, "mod:Job", "jobs-q", BIG)
    garbled = _new_job(store)
    store.storage.records.upsert(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, garbled, {"state": "sideways"}, merge=True
    )
    asked: list[Any] = []
    query = store.storage.records.query

    def watched_query(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("select"))
        return query(*args, **kwargs)

    store.storage.records.query = watched_query  # type: ignore[method-assign]

    # When the catalogue is scanned
    found = {
        job_id: entry for job_id, entry in store.scan_catalogue() if job_id in (done, planning)
    }
    bad = dict(store.scan_catalogue())[garbled]

    # Then each job has its state and creation time, read by projection, and the garbled
    # one says why
    assert all(isinstance(entry, CatalogueEntry) for entry in found.values())
    entries = cast(dict[str, CatalogueEntry], found)
    assert (entries[done].state, entries[planning].state) == ("done", "planning")
    full = store.get_job(done)
    assert (entries[done].created_on, entries[done].updated_on) == (
        full.created_on,
        full.updated_on,
    )
    assert isinstance(bad, BadRecord) and "state" in str(bad) and "sideways" in str(bad)
    assert asked == [CATALOGUE_COLUMNS] * 2 == [("state", "created_on", "updated_on")] * 2


def test_delete_job_refuses_a_job_not_ended_and_leaves_it_unmarked(store: CheckpointStore):
    # Called straight (jobs.retention checks first, so this is its check's backstop)
    job_id = _new_job(store, chunks=1)

    with pytest.raises(JobNotEnded, match=f"job '{job_id}' is planning: only a job that is"):
        store.delete_job(job_id)

    assert store.get_job(job_id).deleting_on is None
    assert store.get_task(job_id, "chunk", 0).state == "waiting"


# --------------------------------------------------------------------------- chunks


def test_add_chunks_records_them_waiting(store: CheckpointStore):
    job_id = _new_job(store, chunks=20)
    task = store.get_task(job_id, "chunk", 17)
    assert (task.state, task.attempt, task.kind, task.index) == ("waiting", 0, "chunk", 17)
    assert store.value(task.properties, "payload") == {"i": 17}


def test_add_chunks_again_after_a_partial_attempt_keeps_what_exists(store: CheckpointStore):
    # Given a planning attempt that recorded chunks 0-9 of 40 and died; chunk 3 ran since
    job_id = _new_job(store)
    store.add_chunks(job_id, 0, [{"i": i} for i in range(10)])
    ran = store.write_task(_claim(store, job_id, 3), {"state": "done"}, {"progress": "end"})

    # When planning resumes and records the whole page again
    store.add_chunks(job_id, 0, [{"i": i} for i in range(40)])

    # Then all 40 exist, and chunk 3 is as its run left it
    assert [task.index for task in store.chunks(job_id)] == list(range(40))
    chunk3 = store.get_task(job_id, "chunk", 3)
    assert chunk3.etag == ran.etag
    assert chunk3.state == "done"
    assert store.value(chunk3.properties, "progress") == "end"
    # and doing it once more changes nothing
    store.add_chunks(job_id, 0, [{"i": i} for i in range(40)])
    assert store.get_task(job_id, "chunk", 3).etag == ran.etag
    assert len(list(store.chunks(job_id))) == 40


def test_add_chunks_again_with_large_payloads_leaves_one_blob_per_chunk(
    store: CheckpointStore,
):
    job_id = _new_job(store)
    store.add_chunks(job_id, 0, [BIG] * 3)
    store.add_chunks(job_id, 0, [BIG] * 5)  # a re-run: chunks 0-2 exist already
    assert len(_blobs(store, job_id)) == 5
    for index in range(5):
        task = store.get_task(job_id, "chunk", index)
        assert store.value(task.properties, "payload") == BIG


def test_add_chunks_of_large_inline_payloads_fit_azures_batch_size(store: CheckpointStore):
    # Three rounds of the shards' blocks, shard 0's 96 chunks each with a payload just
    # under what stays inline (SPILL_BYTES): in one batch they would be about 4.4 MiB
    # (5.9 MB as base64 on the wire), over Azure's 4 MiB for an entity group transaction
    job_id = _new_job(store)
    count = 3 * layout.SHARDS * layout.SHARD_BLOCK
    inline = b"x" * (SPILL_BYTES - 1024)
    payloads = [inline if layout.shard_of(i) == 0 else b"small" for i in range(count)]
    store.add_chunks(job_id, 0, payloads)
    assert sum(1 for _ in store.chunks(job_id)) == count
    assert _blobs(store, job_id) == []  # inline, not spilled
    last = max(i for i in range(count) if layout.shard_of(i) == 0)
    assert store.value(store.get_task(job_id, "chunk", last).properties, "payload") == inline


def test_get_task_of_an_unrecorded_chunk_is_not_found(store: CheckpointStore):
    job_id = _new_job(store, chunks=2)
    with pytest.raises(NotFound):
        store.get_task(job_id, "chunk", 2)


def test_ensure_task_creates_planning_and_finalize_records_once(store: CheckpointStore):
    job_id = _new_job(store)
    plan = store.ensure_task(job_id, "plan")
    assert (plan.kind, plan.state) == ("plan", "waiting")
    claimed = store.write_task(plan, {"state": "running"})
    assert store.ensure_task(job_id, "plan").etag == claimed.etag
    assert store.ensure_task(job_id, "final").state == "waiting"


def test_ensure_task_of_a_record_that_exists_is_one_read(backend: Backend):
    # A feed step takes its job's one feed record many times over a job: each must cost
    # one request, not an insert refused and then a read
    calls: list[str] = []

    class Meter:
        def request(self, operation: str, outcome: str, seconds: float | None) -> None:
            if seconds is not None:  # a request, not a follow-up of one
                calls.append(operation)

    store = CheckpointStore(metered(backend.storage, Meter()))
    job_id = _new_job(store)
    store.ensure_task(job_id, "feed")
    calls.clear()

    assert store.ensure_task(job_id, "feed").state == "waiting"
    assert calls == ["record_get"]


# --------------------------------------------------------------------------- fencing


def test_write_task_chains_etags(store: CheckpointStore):
    job_id = _new_job(store, chunks=1)
    task = _claim(store, job_id, 0)
    task = store.write_task(task, {}, {"progress": 1})
    task = store.write_task(task, {}, {"progress": 2})
    stored = store.get_task(job_id, "chunk", 0)
    assert stored.etag == task.etag
    assert store.value(stored.properties, "progress") == 2
    assert stored.owner == "me" and stored.state == "running"


def test_write_task_with_a_stale_etag_is_a_conflict(store: CheckpointStore):
    # Given two workers that read the same chunk record
    job_id = _new_job(store, chunks=1)
    mine = store.get_task(job_id, "chunk", 0)
    theirs = store.get_task(job_id, "chunk", 0)

    # When the other writes first
    store.write_task(theirs, {"state": "running", "owner": "them"}, {"progress": "theirs"})

    # Then my write is refused and theirs stands
    with pytest.raises(Conflict):
        store.write_task(mine, {"state": "running", "owner": "me"}, {"progress": "mine"})
    stored = store.get_task(job_id, "chunk", 0)
    assert stored.owner == "them"
    assert store.value(stored.properties, "progress") == "theirs"


def test_a_fenced_spill_deletes_only_the_losers_blob(store: CheckpointStore):
    job_id = _new_job(store, chunks=1)
    mine = store.get_task(job_id, "chunk", 0)
    theirs = store.write_task(
        store.get_task(job_id, "chunk", 0), {"owner": "them"}, {"progress": BIG}
    )
    assert len(_blobs(store, job_id)) == 1

    with pytest.raises(Conflict):
        store.write_task(mine, {"owner": "me"}, {"progress": {"other": list(range(30_000))}})

    assert _blobs(store, job_id) == [theirs.properties["progress_blob"]]
    assert store.value(store.get_task(job_id, "chunk", 0).properties, "progress") == BIG


# --------------------------------------------------------------------------- spill


def test_values_up_to_the_limit_stay_inline_and_larger_ones_spill(store: CheckpointStore):
    job_id = _new_job(store, chunks=1)
    task = _claim(store, job_id, 0)
    # bin 16 header is 3 bytes: this encodes to exactly SPILL_BYTES
    inline = b"x" * (SPILL_BYTES - 3)
    task = store.write_task(task, {}, {"progress": inline})
    assert not task.properties.get("progress_blob")
    assert store.value(store.get_task(job_id, "chunk", 0).properties, "progress") == inline

    spilled = b"x" * (SPILL_BYTES - 2)
    task = store.write_task(task, {}, {"progress": spilled})
    assert task.properties.get("progress_blob")
    assert task.properties.get("progress") == b""
    assert store.value(store.get_task(job_id, "chunk", 0).properties, "progress") == spilled


def test_replaced_spilled_values_are_cleaned_up(store: CheckpointStore):
    job_id = _new_job(store, chunks=1)
    task = _claim(store, job_id, 0)

    # A large state spills to a blob
    task = store.write_task(task, {}, {"progress": BIG})
    first = task.properties["progress_blob"]
    assert _blobs(store, job_id) == [first]

    # A newer large state gets a fresh blob; the replaced one is deleted
    bigger = {"rows": list(range(30_000))}
    task = store.write_task(task, {}, {"progress": bigger})
    second = task.properties["progress_blob"]
    assert second != first
    assert _blobs(store, job_id) == [second]
    assert store.value(store.get_task(job_id, "chunk", 0).properties, "progress") == bigger

    # A small state goes inline again; the blob is deleted
    task = store.write_task(task, {}, {"progress": {"row": 1}})
    assert _blobs(store, job_id) == []
    stored = store.get_task(job_id, "chunk", 0)
    assert store.value(stored.properties, "progress") == {"row": 1}


def test_fields_that_are_not_rewritten_keep_their_blobs(store: CheckpointStore):
    job_id = _new_job(store, chunks=1, payload=BIG)
    task = _claim(store, job_id, 0)
    payload_blob = task.properties["payload_blob"]
    task = store.write_task(task, {}, {"progress": BIG})
    task = store.write_task(task, {}, {"progress": 1})
    assert _blobs(store, job_id) == [payload_blob]
    assert store.value(store.get_task(job_id, "chunk", 0).properties, "payload") == BIG


def test_large_results_spill_and_are_read_back_by_results(store: CheckpointStore):
    job_id = _new_job(store, chunks=2)
    for index, result in ((0, BIG), (1, "small")):
        store.count_chunk(
            _claim(store, job_id, index), {"state": "done"}, {"result": result}, "done"
        )
    assert list(store.results(job_id)) == [(0, BIG), (1, "small")]


# --------------------------------------------------------------------------- counters


def test_count_chunk_writes_the_chunk_and_its_counter_together(store: CheckpointStore):
    job_id = _new_job(store, chunks=50)
    task = _claim(store, job_id, 40)  # shard 1 (chunks 32-63)

    done, counts = store.count_chunk(task, {"state": "done", "owner": ""}, {"result": 40}, "done")

    assert counts == {"done": 1, "poisoned": 0}
    assert done.state == "done"
    assert store.get_task(job_id, "chunk", 40).etag == done.etag
    assert store.shard_counts(job_id, 1) == {"done": 1, "poisoned": 0}
    assert store.counts(job_id) == {"done": 1, "poisoned": 0}


def test_count_chunk_of_a_stale_chunk_changes_neither(store: CheckpointStore):
    # Given a chunk someone else wrote since I read it
    job_id = _new_job(store, chunks=1)
    mine = _claim(store, job_id, 0)
    store.write_task(store.get_task(job_id, "chunk", 0), {"owner": "them"})

    # When I try to mark it done (with a large result)
    with pytest.raises(Conflict):
        store.count_chunk(mine, {"state": "done"}, {"result": BIG}, "done")

    # Then neither the chunk nor the counter changed, and my result's blob is gone
    assert store.get_task(job_id, "chunk", 0).state == "running"
    assert store.counts(job_id) == {"done": 0, "poisoned": 0}
    assert _blobs(store, job_id) == []


def test_count_chunk_retries_when_another_chunk_of_the_shard_ends_at_once(
    backend: Backend,
):
    # Given two workers, each ending a chunk of shard 0 (chunks 0 and 16)
    base = CheckpointStore(backend.storage)
    job_id = _new_job(base, chunks=17)
    other = CheckpointStore(backend.storage)
    theirs = _claim(other, job_id, 16, "them")
    mine_store, interleave = _interleaving(backend.storage)
    mine = _claim(mine_store, job_id, 0)
    mine_store.shard_counts(job_id, 0)  # read the counter before they move it

    # When theirs is counted between my reading the counter and my batch
    interleave.append(lambda: other.count_chunk(theirs, {"state": "done"}, {"result": "t"}, "done"))
    done, counts = mine_store.count_chunk(mine, {"state": "done"}, {"result": "m"}, "done")

    # Then mine was retried on the new counter: both counted, nothing lost
    assert not interleave, "the concurrent change never ran"
    assert counts["done"] == 2
    assert base.shard_counts(job_id, 0) == {"done": 2, "poisoned": 0}
    assert done.state == "done"
    assert list(base.results(job_id)) == [(0, "m"), (16, "t")]


def test_count_chunk_with_a_stale_cached_counter_still_counts(backend: Backend):
    # Given a worker that counted a chunk of shard 2 (it may remember the counter row)
    job_id = _new_job(CheckpointStore(backend.storage), chunks=96)  # shard 2: 64-95
    mine, theirs = CheckpointStore(backend.storage), CheckpointStore(backend.storage)
    mine.count_chunk(_claim(mine, job_id, 64), {"state": "done"}, {}, "done")

    # When another worker ends two more chunks of that shard, then the first a fourth
    theirs.count_chunk(_claim(theirs, job_id, 70), {"state": "done"}, {}, "done")
    theirs.count_chunk(_claim(theirs, job_id, 80), {"state": "poisoned"}, {}, "poisoned")
    _, counts = mine.count_chunk(_claim(mine, job_id, 95), {"state": "done"}, {}, "done")

    # Then every end was counted once
    assert counts == {"done": 3, "poisoned": 1}
    assert mine.counts(job_id) == {"done": 3, "poisoned": 1}


def test_count_chunks_writes_a_group_and_leaves_out_a_fenced_chunk(store: CheckpointStore):
    # Given five chunks of one shard ended by me, one of them written by someone else since
    job_id = _new_job(store, chunks=40)
    mine = [_claim(store, job_id, index) for index in range(5)]
    store.write_task(store.get_task(job_id, "chunk", 2), {"owner": "them"})
    ended = [
        (task, store.final_changes(task, {"state": "done"}, {"result": BIG if i == 2 else i}))
        for i, task in enumerate(mine)
    ]

    # When they are counted together
    written, counts = store.count_chunks(ended, "done")

    # Then the four still mine are done and counted; the fenced one is reported and
    # left as the other writer left it, without a stray result blob
    assert [type(w).__name__ for w in written] == ["TaskRecord"] * 2 + ["Conflict"] + [
        "TaskRecord"
    ] * 2
    assert counts == {"done": 4, "poisoned": 0}
    assert store.counts(job_id) == {"done": 4, "poisoned": 0}
    assert [t.index for t in store.chunks(job_id, ("done",))] == [0, 1, 3, 4]
    assert store.get_task(job_id, "chunk", 2).owner == "them"
    assert _blobs(store, job_id) == []
    for result in written:
        if not isinstance(result, Conflict):
            assert store.get_task(job_id, "chunk", result.index).etag == result.etag


def test_count_chunks_of_one_chunk_twice_writes_the_later_run_and_fences_the_earlier(
    store: CheckpointStore,
):
    # Given a chunk ended by my first run, then taken again by my second (its lease
    # lapsed while the first run's end waited on slow storage), both ended in one group
    job_id = _new_job(store, chunks=40)
    first = _claim(store, job_id, 3)
    second = store.write_task(first, {"attempt": 2})
    other = _claim(store, job_id, 4)
    ended = [
        (task, store.final_changes(task, {"state": "done"}, {"result": n}))
        for n, task in enumerate([first, other, second])
    ]

    # When they are counted together
    written, counts = store.count_chunks(ended, "done")

    # Then no batch touches the row twice (Azure refuses the whole batch): the first
    # run's record is fenced, the second's and the other chunk's are written, and the
    # chunk is counted once
    assert [type(w).__name__ for w in written] == ["Conflict", "TaskRecord", "TaskRecord"]
    assert counts == store.counts(job_id) == {"done": 2, "poisoned": 0}
    assert store.get_task(job_id, "chunk", 3).attempt == 2
    assert dict(store.results(job_id)) == {3: 2, 4: 1}


def test_count_chunks_splits_a_group_larger_than_one_batch(store: CheckpointStore):
    # A shard holds 32 consecutive chunks per round of 512: 130 chunks of shard 0
    indexes = [round_ * 512 + offset for round_ in range(5) for offset in range(26)]
    job_id = _new_job(store, chunks=max(indexes) + 1)
    ended = [
        (task, store.final_changes(task, {"state": "done"}, {"result": task.index}))
        for task in (_claim(store, job_id, index) for index in indexes)
    ]

    written, counts = store.count_chunks(ended, "done")

    assert all(not isinstance(w, Exception) for w in written)
    assert counts["done"] == store.shard_counts(job_id, 0)["done"] == 130
    assert [index for index, _ in store.results(job_id)] == indexes


def test_count_chunks_refuses_chunks_of_two_shards(store: CheckpointStore):
    job_id = _new_job(store, chunks=40)
    ended = [(_claim(store, job_id, index), {"state": "done"}) for index in (0, 32)]
    with pytest.raises(ValueError, match="one shard"):
        store.count_chunks(ended, "done")


def test_count_chunk_can_take_a_poisoned_count_back(store: CheckpointStore):
    # Given a poisoned chunk (a redrive then takes it back to waiting)
    job_id = _new_job(store, chunks=1)
    poisoned, _ = store.count_chunk(_claim(store, job_id, 0), {"state": "poisoned"}, {}, "poisoned")
    assert store.counts(job_id) == {"done": 0, "poisoned": 1}

    _, counts = store.count_chunk(poisoned, {"state": "waiting"}, {}, "poisoned", take_off=True)

    assert counts == {"done": 0, "poisoned": 0}
    assert store.get_task(job_id, "chunk", 0).state == "waiting"


@pytest.mark.parametrize("counter", ["-poisoned", "-done", "failed"])
def test_a_counter_is_named_plainly_and_any_other_name_writes_nothing(
    store: CheckpointStore, counter: str
):
    # A sign in the name once meant "take one off": that is take_off=True now
    job_id = _new_job(store, chunks=1)
    claimed = _claim(store, job_id, 0)

    with pytest.raises(ValueError, match=f"no counter '{counter}'"):
        store.count_chunk(claimed, {"state": "waiting"}, {}, counter)  # type: ignore[arg-type]

    assert store.counts(job_id) == {"done": 0, "poisoned": 0}
    assert store.get_task(job_id, "chunk", 0).etag == claimed.etag


def test_poisoned_tasks_lists_chunks_in_order_then_planning_and_finalize(
    store: CheckpointStore,
):
    # Given chunks 3 and 1 poisoned (in that order), chunk 0 done, and finalize poisoned
    job_id = _new_job(store, chunks=4)
    for index in (3, 1):
        store.count_chunk(_claim(store, job_id, index), {"state": "poisoned"}, {}, "poisoned")
    store.count_chunk(_claim(store, job_id, 0), {"state": "done"}, {}, "done")
    final = store.ensure_task(job_id, "final")
    store.write_task(final, {"state": "poisoned"})

    found = [(kind, index) for kind, index, _ in store.poisoned_tasks(job_id)]

    assert found == [("chunk", 1), ("chunk", 3), ("final", 0)]


def _interleaving(storage: Storage) -> tuple[CheckpointStore, list[Any]]:
    """A store whose next batch first runs the callables queued in the returned list,
    to put another worker's write between a read and the batch that depends on it."""
    pending: list[Any] = []

    class Interleaved:
        def batch(self, *args: Any, **kwargs: Any) -> list[str]:
            while pending:
                pending.pop(0)()
            return storage.records.batch(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(storage.records, name)

    wrapped = replace(storage, records=Interleaved(), closer=None)  # type: ignore[arg-type]
    return CheckpointStore(wrapped), pending


# --------------------------------------------------------------------------- reading


def test_chunks_come_in_index_order_across_shards(store: CheckpointStore):
    # Given 600 chunks spread over the 16 shards (and round again), some of them ended
    job_id = _new_job(store, chunks=600)
    for index in (0, 5, 40, 517, 599):
        store.count_chunk(
            _claim(store, job_id, index), {"state": "done"}, {"result": index * 10}, "done"
        )
    for index in (70, 230):
        _claim(store, job_id, index)
    store.count_chunk(_claim(store, job_id, 300), {"state": "poisoned"}, {}, "poisoned")

    # Then reading the job gives every chunk once, in index order
    assert [task.index for task in store.chunks(job_id)] == list(range(600))
    # and filtering by state keeps the order
    assert [t.index for t in store.chunks(job_id, ("done",))] == [0, 5, 40, 517, 599]
    assert [t.index for t in store.chunks(job_id, ("running", "poisoned"))] == [70, 230, 300]
    assert len(list(store.chunks(job_id, ("waiting",)))) == 600 - 8
    # and the counter rows are not mistaken for chunks
    assert all(task.kind == "chunk" for task in store.chunks(job_id))


def test_results_are_done_chunks_in_index_order(store: CheckpointStore):
    job_id = _new_job(store, chunks=40)
    for index in (33, 1, 16, 2, 0):
        store.count_chunk(
            _claim(store, job_id, index), {"state": "done"}, {"result": {"index": index}}, "done"
        )
    store.count_chunk(_claim(store, job_id, 3), {"state": "poisoned"}, {}, "poisoned")
    assert list(store.results(job_id)) == [(index, {"index": index}) for index in (0, 1, 2, 16, 33)]


def test_a_job_with_no_chunks_reads_empty(store: CheckpointStore):
    job_id = _new_job(store)
    assert list(store.chunks(job_id)) == []
    assert list(store.results(job_id)) == []
