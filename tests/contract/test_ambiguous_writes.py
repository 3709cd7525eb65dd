"""Every write settles the ambiguous case by reading what is there, on both backends.

The storage double (:class:`~checkpoint.testing.faults.FaultyStorage`) applies a write and then
raises as a lost connection does (or, for the calls the Azure SDK retries by itself,
applies it and then answers the SDK's second try). Each test names the write, makes it
fail that way once, and checks that the outcome is the one an unfailing write has: no
self-fencing, nothing done twice, nothing reported as someone else's.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from checkpoint import retries
from checkpoint.clock import SystemClock
from checkpoint.errors import Conflict, Throttled
from checkpoint.records import TaskRecord
from checkpoint.settle import WRITER, Writer
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults
from jobs.errors import ChunkStopped
from runner.worker.hooks import Hooks
from runner.worker.leases.lease import Lease, LeaseKeeper
from runner.worker.tasks.control import TaskControl
from runner.worker.tasks.outcome import stopped

LEASE_SECONDS = 30


@dataclass
class Faulty:
    """A checkpoint store over storage that fails the calls a test scripts."""

    faults: ScriptedFaults
    store: CheckpointStore
    plain: CheckpointStore  # the same storage, no faults: to look at what is there
    job_id: str


@pytest.fixture
def faulty(backend) -> Iterator[Faulty]:
    faults = ScriptedFaults()
    wrapped = FaultyStorage(backend.storage, faults).storage
    job_id = f"amb-{uuid.uuid4().hex[:10]}"
    plain = CheckpointStore(backend.storage)
    plain.create_job(job_id, "tests:Job", "amb-q", {"n": 1})
    yield Faulty(faults, CheckpointStore(wrapped), plain, job_id)
    assert faults.pending == [], "a scripted fault never happened"


def _chunks(world: Faulty, count: int) -> list[TaskRecord]:
    world.plain.add_chunks(world.job_id, 0, [{"i": i} for i in range(count)])
    return [world.plain.get_task(world.job_id, "chunk", i) for i in range(count)]


def _claim(store: CheckpointStore, task: TaskRecord, writer: Writer) -> TaskRecord:
    changes = {"state": "running", "owner": "me", "attempt": task.attempt + 1}
    return store.write_task(task, changes, token=writer.next())


def _claimed_chunk(faulty: Faulty) -> tuple[TaskRecord, Writer]:
    """One chunk of the job, claimed (through the fault-free store) by a new writer."""
    (task,) = _chunks(faulty, 1)
    writer = Writer()
    return _claim(faulty.plain, task, writer), writer


def _progress_is(faulty: Faulty, written: TaskRecord, progress: int) -> None:
    """The stored record is ``written`` (same ETag), holding ``progress``."""
    stored = faulty.plain.get_task(faulty.job_id, "chunk", 0)
    assert stored.etag == written.etag
    assert faulty.plain.value(stored.properties, "progress") == progress


# --------------------------------------------------------------------------- task writes


def test_a_claim_applied_and_lost_is_recognised_as_our_claim(faulty: Faulty):
    (task,) = _chunks(faulty, 1)
    faulty.faults.add("records.merge", "ambiguous")

    claimed = _claim(faulty.store, task, Writer())

    stored = faulty.plain.get_task(faulty.job_id, "chunk", 0)
    assert (claimed.state, claimed.attempt, claimed.etag) == ("running", 1, stored.etag)
    assert stored.attempt == 1  # claimed once, not twice


def test_a_checkpoint_applied_and_lost_never_fences_its_own_writer(faulty: Faulty):
    claimed, writer = _claimed_chunk(faulty)

    # Given a checkpoint that was applied although the worker saw the connection drop
    faulty.faults.add("records.merge", "ambiguous")
    written = faulty.store.write_task(claimed, {}, {"progress": 40}, token=writer.next())

    # Then it is known as written, and the next write builds on it without a conflict
    assert faulty.store.value(written.properties, "progress") == 40
    again = faulty.store.write_task(written, {}, {"progress": 80}, token=writer.next())
    _progress_is(faulty, again, 80)


def test_an_earlier_write_of_ours_found_applied_is_written_over_not_a_conflict(faulty: Faulty):
    claimed, writer = _claimed_chunk(faulty)

    # Given a checkpoint applied and lost whose settling read failed too (so the worker
    # could not tell, and kept the old ETag)
    faulty.faults.add("records.merge", "ambiguous")
    faulty.faults.add("records.get", "busy")
    once = retries.once(SystemClock())
    with pytest.raises(Throttled):
        faulty.store.write_task(claimed, {}, {"progress": 40}, token=writer.next(), budget=once)

    # When the next write goes with that stale ETag, it finds our own write and goes on
    written = faulty.store.write_task(claimed, {}, {"progress": 80}, token=writer.next())
    _progress_is(faulty, written, 80)


def test_a_write_by_another_claim_is_still_a_conflict(faulty: Faulty):
    (task,) = _chunks(faulty, 1)
    mine = _claim(faulty.plain, task, Writer())
    _claim(faulty.plain, mine, Writer())  # another worker took the chunk over

    with pytest.raises(Conflict):
        faulty.store.write_task(mine, {}, {"progress": 1}, token=Writer().next())


def test_a_write_lost_before_it_was_applied_is_retried_in_place(faulty: Faulty):
    claimed, writer = _claimed_chunk(faulty)
    faulty.faults.add("records.merge", "busy")
    faulty.faults.add("records.merge", "busy")

    written = faulty.store.write_task(claimed, {}, {"progress": 5}, token=writer.next())

    assert faulty.plain.get_task(faulty.job_id, "chunk", 0).etag == written.etag


# --------------------------------------------------------------------------- done marks


def test_a_done_batch_applied_and_lost_counts_each_chunk_once(faulty: Faulty):
    tasks = _chunks(faulty, 3)
    writers = [Writer() for _ in tasks]
    claimed = [_claim(faulty.plain, t, w) for t, w in zip(tasks, writers, strict=True)]
    ended = [
        (t, faulty.store.final_changes(t, {"state": "done"}, {"result": t.index}, w.next()))
        for t, w in zip(claimed, writers, strict=True)
    ]
    faulty.faults.add("records.batch", "ambiguous")

    written, counts = faulty.store.count_chunks(ended, "done")

    assert all(isinstance(record, TaskRecord) for record in written)
    assert counts["done"] == 3
    assert faulty.plain.counts(faulty.job_id)["done"] == 3  # not 6
    assert [i for i, _ in faulty.plain.results(faulty.job_id)] == [0, 1, 2]


def test_a_done_mark_after_an_unknown_checkpoint_of_its_own_is_not_fenced(faulty: Faulty):
    claimed, writer = _claimed_chunk(faulty)
    # A checkpoint of ours applied while we kept the ETag from before it
    faulty.plain.write_task(claimed, {}, {"progress": 9}, token=writer.next())

    final = faulty.store.final_changes(claimed, {"state": "done"}, {"result": 1}, writer.next())
    (written,), counts = faulty.store.count_chunks([(claimed, final)], "done")

    assert isinstance(written, TaskRecord) and written.state == "done"
    assert counts["done"] == 1


# --------------------------------------------------------------------------- inserts


def test_a_job_insert_applied_and_lost_is_our_new_job(faulty: Faulty):
    faulty.faults.add("records.insert", "ambiguous")
    job_id = f"amb-{uuid.uuid4().hex[:10]}"

    job, created = faulty.store.create_job(job_id, "tests:Job", "amb-q", {"n": 2})

    assert created, "our own applied insert is not someone else's job"
    assert faulty.plain.params(faulty.plain.get_job(job_id)) == {"n": 2}


def test_a_planning_batch_applied_and_lost_plans_every_chunk_once(faulty: Faulty):
    faulty.faults.add("records.batch", "ambiguous")

    planned = faulty.store.add_chunks(faulty.job_id, 0, [{"i": i} for i in range(5)])

    # Every chunk is ours, known exactly (so its first delivery claims without a read)
    assert all(p.etag is not None for p in planned)
    for p in planned:
        assert faulty.plain.get_task(faulty.job_id, "chunk", p.index).etag == p.etag


def test_a_page_partly_planned_by_a_crashed_attempt_keeps_the_existing_records(
    faulty: Faulty,
):
    faulty.plain.add_chunks(faulty.job_id, 0, [{"i": 0}, {"i": 1}])
    ran = faulty.plain.get_task(faulty.job_id, "chunk", 1)
    faulty.plain.write_task(ran, {"state": "done"})

    planned = faulty.store.add_chunks(faulty.job_id, 0, [{"i": i} for i in range(4)])

    # The two existing ones are left as they are (unknown: no planned claim), the rest new
    assert [p.etag is None for p in planned] == [True, True, False, False]
    assert faulty.plain.get_task(faulty.job_id, "chunk", 1).state == "done"
    assert faulty.plain.get_task(faulty.job_id, "chunk", 3).state == "waiting"


def test_a_task_record_insert_applied_and_lost_is_created_once(faulty: Faulty):
    faulty.faults.add("records.insert", "ambiguous")
    task = faulty.store.ensure_task(faulty.job_id, "final")
    assert (task.state, task.attempt) == ("waiting", 0)
    assert faulty.plain.get_task(faulty.job_id, "final", 0).etag == task.etag


# A change of state is written in a batch with the catalogue's index rows; any other
# change of a job is a merge.
@pytest.mark.parametrize(
    ("write", "changes"),
    [("records.batch", {"state": "running"}), ("records.merge", {"state": "planning"})],
)
def test_a_job_update_applied_and_lost_is_made_once(
    faulty: Faulty, write: str, changes: dict[str, Any]
):
    faulty.faults.add(write, "ambiguous")
    job = faulty.store.get_job(faulty.job_id)

    updated = faulty.store.update_job(job, total=3, **changes)

    stored = faulty.plain.get_job(faulty.job_id)
    assert (updated.state, updated.etag) == (changes["state"], stored.etag)
    assert stored.properties[WRITER] == updated.properties[WRITER]


# --------------------------------------------------------------------------- messages


@pytest.fixture
def queue_world(backend) -> Iterator[tuple[ScriptedFaults, LeaseKeeper, str, object]]:
    faults = ScriptedFaults()
    wrapped = FaultyStorage(backend.storage, faults).storage
    queue = backend.queue()
    yield faults, LeaseKeeper(wrapped.queues, SystemClock()), queue, backend.storage
    assert faults.pending == []


def _held(keeper: LeaseKeeper, storage, queue: str) -> Lease:
    storage.queues.send(queue, b"m")
    (message,) = storage.queues.receive(queue, visibility_seconds=LEASE_SECONDS)
    return keeper.lease(queue, message, LEASE_SECONDS, received_at=SystemClock().monotonic())


def test_a_delete_applied_and_lost_leaves_the_message_gone(queue_world):
    faults, keeper, queue, storage = queue_world
    lease = _held(keeper, storage, queue)
    faults.add("queues.delete_many", "ambiguous")

    keeper.delete_many([lease])

    assert storage.queues.approximate_length(queue) == 0


def test_a_renewal_applied_and_lost_keeps_the_lease_and_hands_the_chunk_back(queue_world):
    faults, keeper, queue, storage = queue_world
    lease = _held(keeper, storage, queue)
    faults.add("queues.update", "ambiguous")
    before = lease.visible_at

    # When our renewal is applied but its answer lost (the SDK's retry then meets a
    # stale receipt), the lease is not taken for lost to someone else
    lease.next_renewal_at = 0.0
    keeper.renew_due()

    assert not lease.lost and lease.receipt_lost
    assert lease.visible_at >= before  # the applied renewal kept it invisible
    # and the chunk is asked to hand back before the (unrenewable) lease runs out
    assert not lease.must_hand_back(lease.visible_at - LEASE_SECONDS * 0.5)
    assert lease.must_hand_back(lease.visible_at - 1.0)
    # The message is still on the queue, invisible: it comes back for the next worker
    assert storage.queues.approximate_length(queue) == 1
    assert storage.queues.receive(queue) == []


def test_a_handed_back_chunk_keeps_its_state_and_spends_no_attempt(faulty: Faulty):
    claimed, writer = _claimed_chunk(faulty)
    clock = SystemClock()
    now = clock.monotonic()
    lease = Lease("amb-q", "m", "r", LEASE_SECONDS, acquired_at=now, visible_at=now + 5)
    lease.receipt_lost = True  # as the keeper marks it (test above)
    control = TaskControl(faulty.store, claimed, lease, clock, 0.0, threading.Event(), writer)
    control.offer(17)

    # The chunk is told to stop at its next checkpoint, and the hand-back path runs
    assert control.stopping
    with pytest.raises(ChunkStopped, match="handed back"):
        control.raise_if_stopped()
    keeper = LeaseKeeper(faulty.store.storage.queues, clock)
    worker = SimpleNamespace(keeper=keeper, hooks=Hooks())
    job = SimpleNamespace(job_type="tests:Job")
    stopped(SimpleNamespace(worker=worker, lease=lease, job=job), control)  # type: ignore[arg-type]

    # Then the record holds the newest state, waiting, with the claim's attempt given back
    stored = faulty.plain.get_task(faulty.job_id, "chunk", 0)
    assert (stored.state, stored.attempt) == ("waiting", 0)
    assert faulty.plain.value(stored.properties, "progress") == 17
