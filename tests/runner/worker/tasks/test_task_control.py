"""``TaskControl``, the runner's side of ``chunk.checkpoint``: throttled, coalesced, fenced
writes and the stop signal, on the embedded store and a FakeClock (no real sleeps)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import LeaseLost, Throttled
from checkpoint.records import CHECKPOINT_ON, LEASE_ON_RECORD, Progress, TaskRecord
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.chunk import Chunk, ChunkControl
from jobs.errors import ChunkStopped
from runner.worker.leases.lease import Lease
from runner.worker.tasks.control import TaskControl
from runner.worker.tasks.record_changes import TaskChanges

JOB = "job-ctl"
LEASE_SECONDS = 30
INTERVAL = 5.0


class FlakyRecords:
    """The real record store, failing the next merges with the errors queued here."""

    def __init__(self, records: Any):
        self._records = records
        self.merge_failures: list[Exception] = []

    def merge(self, *args: Any, **kwargs: Any) -> str:
        if self.merge_failures:
            raise self.merge_failures.pop(0)
        return self._records.merge(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)


class World:
    """A claimed chunk of a job, its lease, and a TaskControl over it."""

    def __init__(self, storage: Storage, clock: FakeClock):
        self.clock = clock
        self.records = FlakyRecords(storage.records)
        flaky = replace(storage, records=self.records, closer=None)
        self.store = CheckpointStore(flaky, clock)
        self.store.create_job(JOB, "tests:Job", "jobs-q", {"rows": 10})
        self.store.add_chunks(JOB, 0, [{"first": 0}])
        task = self.store.get_task(JOB, "chunk", 0)
        self.claimed = self.store.write_task(
            task, {"state": "running", "owner": "me", "attempt": 1}, {"progress": "start"}
        )
        now = clock.monotonic()
        self.lease = Lease(
            "jobs-q",
            "msg-1",
            "receipt-1",
            LEASE_SECONDS,
            acquired_at=now,
            visible_at=now + LEASE_SECONDS,
        )
        self.stopping = threading.Event()
        self.control = TaskControl(
            self.store, self.claimed, self.lease, clock, INTERVAL, self.stopping
        )

    def stored(self) -> TaskRecord:
        return self.store.get_task(JOB, "chunk", 0)

    def stored_progress(self) -> Any:
        return self.store.value(self.stored().properties, "progress")

    def someone_else_writes(self, progress: Any) -> None:
        """Another worker claims the chunk and checkpoints (a fresh read, a fresh ETag)."""
        self.store.write_task(self.stored(), {"owner": "other"}, {"progress": progress})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    try:
        yield World(storage, clock)
    finally:
        storage.close()


def test_task_control_is_a_chunk_control(world: World):
    control: ChunkControl = world.control
    assert control.stopping is False


# --------------------------------------------------------------------------- throttling


def test_offer_writes_at_most_once_per_interval(world: World):
    # Given a chunk claimed just now (the claim counts as the last write)
    world.control.offer(1)
    world.clock.advance(4.9)
    world.control.offer(2)
    # Then nothing was written inside the first interval
    assert world.control.writes == 0
    assert world.stored_progress() == "start"

    # When the interval has passed, the next offer writes
    world.clock.advance(0.1)
    world.control.offer(3)
    assert world.control.writes == 1
    assert world.stored_progress() == 3

    # and the interval counts from that write
    world.clock.advance(4.9)
    world.control.offer(4)
    assert world.control.writes == 1
    world.clock.advance(0.1)
    world.control.offer(5)
    assert world.control.writes == 2
    assert world.stored_progress() == 5


def test_offers_coalesce_to_the_newest(world: World):
    # Given a thousand offers within one interval
    for row in range(1000):
        world.control.offer({"row": row})
    assert world.control.writes == 0

    # When the interval passes, one write holds the newest only
    world.clock.advance(INTERVAL)
    world.control.offer({"row": 1000})
    assert world.control.writes == 1
    assert world.stored_progress() == {"row": 1000}


def test_a_zero_interval_writes_every_offer(world: World):
    control = TaskControl(world.store, world.claimed, world.lease, world.clock, 0, world.stopping)
    for row in range(3):
        control.offer(row)
    assert control.writes == 3
    assert world.stored_progress() == 2


def test_flush_writes_the_newest_unwritten_state(world: World):
    world.control.offer(1)
    world.control.offer(2)
    world.control.flush()
    assert world.control.writes == 1
    assert world.stored_progress() == 2
    assert not world.control.has_unwritten_state


def test_flush_with_nothing_new_writes_nothing(world: World):
    world.control.flush()
    world.clock.advance(INTERVAL)
    world.control.offer(1)  # written now
    world.control.flush()
    assert world.control.writes == 1


def test_a_write_records_the_lease_end_for_status(world: World):
    world.clock.advance(INTERVAL)
    world.control.offer(1)
    lease_left = timedelta(seconds=LEASE_SECONDS - INTERVAL)
    assert world.stored().lease_until == world.clock.now() + lease_left


def test_newest_state_is_the_stored_one_until_something_is_offered(world: World):
    assert world.control.newest_state == "start"
    world.control.offer({"row": 9})
    assert world.control.newest_state == {"row": 9}


def test_large_state_spills_to_a_blob_and_reads_back(world: World):
    big = {"seen": list(range(20_000))}  # msgpack > 48 KiB
    world.clock.advance(INTERVAL)
    world.control.offer(big)
    stored = world.stored()
    assert stored.properties.get("progress_blob")
    assert world.stored_progress() == big


# --------------------------------------------------------------------------- fencing


def test_a_write_after_someone_else_wrote_is_lease_lost(world: World):
    # Given another worker wrote the record after our claim
    world.someone_else_writes("theirs")

    # When our next checkpoint write is due
    world.clock.advance(INTERVAL)
    with pytest.raises(LeaseLost, match="fenced"):
        world.control.offer("ours")

    # Then the lease is marked lost and their progress stands
    assert world.lease.lost
    assert world.stored_progress() == "theirs"
    assert world.stored().owner == "other"
    # and every later attempt is refused without touching the store
    with pytest.raises(LeaseLost):
        world.control.flush()
    with pytest.raises(LeaseLost):
        world.control.raise_if_stopped()
    assert world.control.writes == 0


def test_a_flush_after_someone_else_wrote_is_lease_lost(world: World):
    world.control.offer("ours")
    world.someone_else_writes("theirs")
    with pytest.raises(LeaseLost):
        world.control.flush()
    assert world.lease.lost
    assert world.stored_progress() == "theirs"


def test_a_record_deleted_under_us_is_lease_lost(world: World):
    partition = layout.shard_partition(JOB, 0)
    world.store.storage.records.delete(layout.TASKS_TABLE, partition, layout.chunk_row(0), etag="*")
    world.control.offer(1)
    with pytest.raises(LeaseLost):
        world.control.flush()
    assert world.lease.lost


def test_a_fenced_spill_leaves_no_blob_behind(world: World):
    world.someone_else_writes("theirs")
    world.control.offer({"seen": list(range(20_000))})
    with pytest.raises(LeaseLost):
        world.control.flush()
    assert list(world.store.storage.blobs.list(layout.DATA_CONTAINER, f"{JOB}/")) == []


def test_fenced_field_writes_are_lease_lost_too(world: World):
    world.someone_else_writes("theirs")
    with pytest.raises(LeaseLost):
        world.control.write(TaskChanges(state="done"))
    assert world.stored().state == "running"
    assert world.stored().owner == "other"


# --------------------------------------------------------------------------- stopping


def test_lease_expired_locally_raises_lease_lost_without_writing(world: World):
    # Given unwritten progress and a lease that ran out (the worker was paused)
    world.control.offer("unwritten")
    world.clock.advance(LEASE_SECONDS)
    world.stopping.set()  # even while the worker is also stopping
    assert world.control.stopping is True

    # Then the chunk is stopped with LeaseLost, and nothing is written
    with pytest.raises(LeaseLost, match="ran out"):
        world.control.raise_if_stopped()
    assert world.control.writes == 0
    assert world.stored_progress() == "start"


def test_lease_marked_lost_raises_lease_lost_without_writing(world: World):
    world.control.offer("unwritten")
    world.lease.lose("renewal refused: someone else has it")
    assert world.control.stopping is True
    with pytest.raises(LeaseLost, match="renewal refused"):
        world.control.raise_if_stopped()
    # a due write is refused too, before any round trip
    world.clock.advance(INTERVAL)
    with pytest.raises(LeaseLost):
        world.control.offer("later")
    assert world.control.writes == 0
    assert world.stored_progress() == "start"


def test_stopping_flushes_the_newest_then_raises_chunk_stopped(world: World):
    world.control.offer(1)
    world.control.offer(2)
    world.stopping.set()
    assert world.control.stopping is True

    with pytest.raises(ChunkStopped):
        world.control.raise_if_stopped()

    assert world.control.writes == 1
    assert world.stored_progress() == 2


def test_stopping_with_nothing_new_raises_without_writing(world: World):
    world.stopping.set()
    with pytest.raises(ChunkStopped):
        world.control.raise_if_stopped()
    assert world.control.writes == 0


def test_nothing_raised_while_the_lease_holds_and_no_one_stops(world: World):
    world.control.offer(1)
    world.clock.advance(LEASE_SECONDS - 0.01)
    world.control.raise_if_stopped()
    assert world.control.stopping is False


def test_a_renewed_lease_keeps_the_chunk_going(world: World):
    world.clock.advance(LEASE_SECONDS - 1)
    world.lease.visible_at = world.clock.monotonic() + LEASE_SECONDS  # the keeper renewed
    world.clock.advance(2)
    world.control.raise_if_stopped()


def _renewal_in_flight(world: World, renewed: bool) -> threading.Thread:
    """A renewal sent 1 s before the lease's end, holding the lease's lock as the keeper
    does while it waits for the service; answered 0.2 s (real time) after it starts,
    once the lease has run out on the fake clock."""
    world.clock.advance(LEASE_SECONDS - 1)
    sent_at = world.clock.monotonic()
    entered = threading.Event()

    def renew() -> None:
        with world.lease.lock:
            world.lease.renewing_since = sent_at
            entered.set()
            threading.Event().wait(0.2)
            world.lease.renewing_since = None
            if renewed:
                world.lease.visible_at = sent_at + LEASE_SECONDS
            else:
                world.lease.lose("renewal refused: someone else has it")

    thread = threading.Thread(target=renew)
    thread.start()
    assert entered.wait(10)
    world.clock.advance(2)  # the lease ran out locally while the answer is awaited
    return thread


def test_a_lease_run_out_while_its_renewal_is_answered_goes_on_once_renewed(world: World):
    renewal = _renewal_in_flight(world, renewed=True)

    # The chunk is not told to stop while the answer is awaited, and its checkpoint
    # waits for the answer instead of taking the lease for lost
    assert world.control.stopping is False
    world.control.raise_if_stopped()
    renewal.join(10)
    assert not world.lease.expired(world.clock.monotonic())


def test_a_lease_run_out_while_its_renewal_is_answered_is_lost_if_refused(world: World):
    renewal = _renewal_in_flight(world, renewed=False)

    with pytest.raises(LeaseLost, match="renewal refused"):
        world.control.raise_if_stopped()
    renewal.join(10)


def test_with_no_renewal_in_flight_nothing_is_waited_for(world: World):
    # The lease's lock held elsewhere (a delete, say) is no reason to wait
    world.clock.advance(LEASE_SECONDS + 1)
    with world.lease.lock:
        world.lease.wait_for_renewal(world.clock.monotonic())  # returns at once


def test_a_renewal_sent_after_the_lease_ran_out_is_not_waited_for(world: World):
    # A paused worker woken past its lease stops at once, whatever the keeper does now
    world.clock.advance(LEASE_SECONDS + 1)
    world.lease.renewing_since = world.clock.monotonic()
    assert world.control.stopping is True
    with pytest.raises(LeaseLost, match="ran out"):
        world.control.raise_if_stopped()


def test_an_answer_awaited_past_the_end_margin_is_given_up_on(world: World):
    world.clock.advance(LEASE_SECONDS - 1)
    world.lease.renewing_since = world.clock.monotonic()  # and it never comes back
    world.clock.advance(1 + 9)  # the end margin of a 30 s lease: 9 s
    assert world.control.stopping is True
    with pytest.raises(LeaseLost, match="ran out"):
        world.control.raise_if_stopped()


def test_leasing_on_the_record_writes_the_lease_end_asked_and_the_mark(world: World):
    world.control.offer("newest")
    until = world.clock.monotonic() + 17

    world.control.lease_on_record(world.lease, until)

    stored = world.stored()
    assert stored.properties[LEASE_ON_RECORD] is True
    assert stored.lease_until == world.clock.now() + timedelta(seconds=17)
    assert world.stored_progress() == "newest"  # the newest state goes with it


def test_leasing_on_a_record_someone_else_wrote_is_lease_lost(world: World):
    world.store.write_task(world.stored(), {"owner": "other"})

    with pytest.raises(LeaseLost):
        world.control.lease_on_record(world.lease, world.clock.monotonic() + 30)
    assert world.lease.lost


def test_nothing_is_leased_on_the_record_once_the_task_is_ending(world: World):
    ending = world.control.end()

    world.control.lease_on_record(world.lease, world.clock.monotonic() + 30)

    assert world.stored().etag == ending.etag  # the done mark's ETag stays valid


def test_chunk_checkpoint_goes_through_the_control(world: World):
    chunk = Chunk(
        job_id=JOB,
        index=0,
        payload={"first": 0},
        params={},
        state="start",
        attempt=1,
        control=world.control,
    )
    chunk.checkpoint(1)
    world.clock.advance(INTERVAL)
    chunk.checkpoint(2)
    assert world.stored_progress() == 2
    world.stopping.set()
    assert chunk.stopping is True
    with pytest.raises(ChunkStopped):
        chunk.checkpoint(3)
    assert world.stored_progress() == 3


# --------------------------------------------------------------------------- runner side


def test_write_carries_the_newest_progress_with_the_fields(world: World):
    world.control.offer({"row": 7})
    task = world.control.write(TaskChanges(state="retrying", owner=""))
    assert task.state == "retrying"
    assert world.stored().state == "retrying"
    assert world.stored_progress() == {"row": 7}
    assert not world.control.has_unwritten_state


def test_write_chains_etags(world: World):
    world.control.write(TaskChanges(state="running"))
    world.control.offer(1)
    world.control.flush()
    world.control.write(TaskChanges(state="retrying"))
    assert world.stored().etag == world.control.task.etag


def test_a_transient_write_failure_keeps_the_state_and_retries_an_interval_later(
    world: World,
):
    # Given a checkpoint write that fails for a passing reason (the service was busy)
    world.records.merge_failures.append(Throttled("server busy"))
    world.clock.advance(INTERVAL)
    world.control.offer({"row": 42})  # the chunk goes on: no exception

    # Then the state is kept unwritten, and written at the next due checkpoint
    assert world.control.has_unwritten_state
    assert world.control.newest_state == {"row": 42}
    assert world.stored_progress() == "start"
    world.clock.advance(INTERVAL - 0.1)
    world.control.offer({"row": 43})
    assert world.stored_progress() == "start"
    world.clock.advance(0.1)
    world.control.offer({"row": 44})
    assert world.stored_progress() == {"row": 44}


def test_a_transient_failure_leaves_the_state_for_the_failure_path_to_flush(world: World):
    world.records.merge_failures.append(Throttled("server busy"))
    world.clock.advance(INTERVAL)
    world.control.offer({"row": 42})
    world.control.write(TaskChanges(state="retrying"))
    assert world.stored_progress() == {"row": 42}
    assert world.stored().state == "retrying"


def test_a_flush_retries_passing_trouble_in_place_while_the_lease_lasts(world: World):
    # Given a store busy for three tries
    world.control.offer({"row": 7})
    world.records.merge_failures.extend([Throttled("server busy")] * 3)

    # When the state is flushed (a stop, a failure), it is retried in place and written
    world.control.flush()
    assert world.stored_progress() == {"row": 7}
    # after backing off on the (fake) clock, within the lease
    assert len(world.clock.sleeps) == 3
    assert world.clock.monotonic() < world.lease.visible_at


def test_a_flush_raises_once_the_lease_has_no_time_left_and_keeps_the_state(world: World):
    world.control.offer({"row": 7})
    world.records.merge_failures.extend([Throttled("server busy")] * 1_000)
    with pytest.raises(Throttled):
        world.control.flush()
    # It gave up before the lease ran out, and the state is still there to write
    assert world.clock.monotonic() < world.lease.visible_at
    assert world.control.newest_state == {"row": 7}
    world.records.merge_failures.clear()
    world.control.flush()
    assert world.stored_progress() == {"row": 7}


def _renewed(world: World) -> None:
    """What the lease keeper does on a renewal: a later deadline, then on_renewed."""
    world.lease.visible_at = world.clock.monotonic() + LEASE_SECONDS
    world.control.on_renewed(world.lease)


def test_a_record_refresh_that_fails_for_a_passing_reason_never_raises_into_the_keeper(
    world: World,
):
    # Given a store busy when a renewal refreshes the record (on the keeper's thread)
    world.control.offer("early")
    world.clock.advance(LEASE_SECONDS * 0.7)
    world.records.merge_failures.append(Throttled("server busy"))

    # When the keeper calls back, nothing is raised (the keeper renews other leases in
    # the same pass), and the state waits for the next checkpoint
    _renewed(world)
    assert world.control.newest_state == "early"
    assert world.control.has_unwritten_state
    assert not world.lease.lost


def test_on_renewed_records_each_new_deadline_once(world: World):
    world.control.offer("early")
    world.clock.advance(LEASE_SECONDS * 0.7)

    _renewed(world)

    # The record shows the new deadline (for status and duplicate detection), and the
    # newest state rode along
    assert world.control.writes == 1
    stored = world.stored()
    assert stored.lease_until == world.clock.now() + timedelta(seconds=LEASE_SECONDS)
    assert world.stored_progress() == "early"
    # The same deadline is not written twice
    world.control.on_renewed(world.lease)
    assert world.control.writes == 1


def test_once_ending_a_renewal_writes_nothing(world: World):
    # Given a chunk whose done mark is being written elsewhere (the finisher), conditional
    # on the ETag the control last wrote
    world.control.offer("last")
    ending = world.control.end()
    assert ending.etag == world.stored().etag

    # When the lease is renewed meanwhile
    world.clock.advance(LEASE_SECONDS * 0.7)
    _renewed(world)

    # Then the record is untouched, so that ETag still holds for the done mark
    assert world.control.writes == 0
    assert world.stored().etag == ending.etag


def test_on_renewed_skips_a_deadline_a_checkpoint_already_recorded(world: World):
    world.clock.advance(LEASE_SECONDS * 0.7)
    world.lease.visible_at = world.clock.monotonic() + LEASE_SECONDS
    world.control.offer(1)  # due: written with the new deadline
    assert world.control.writes == 1
    world.control.on_renewed(world.lease)
    assert world.control.writes == 1


def test_on_renewed_swallows_a_fence_and_marks_the_lease_lost(world: World):
    world.someone_else_writes("theirs")
    world.clock.advance(LEASE_SECONDS * 0.7)
    _renewed(world)  # no exception on the keeper's thread
    assert world.lease.lost
    with pytest.raises(LeaseLost):
        world.control.raise_if_stopped()
    assert world.stored_progress() == "theirs"


def test_offer_snapshots_the_state_and_refuses_what_msgpack_cannot_hold(tmp_path):
    """Mutating a checkpointed object afterwards changes nothing durable; a set fails at
    the checkpoint that gave it, not later in a flush."""
    from checkpoint.errors import CodecError

    clock = FakeClock()
    with open_storage(str(tmp_path / "store"), clock=clock) as storage:
        store = CheckpointStore(storage, clock)
        store.create_job("snap", "m:C", "snap-q", {})
        store.add_chunks("snap", 0, [{"i": 0}])
        task = store.write_task(store.get_task("snap", "chunk", 0), {"state": "running"})
        now = clock.monotonic()
        lease = Lease("snap-q", "m1", "r1", 30, acquired_at=now, visible_at=now + 30)
        control = TaskControl(store, task, lease, clock, 60.0, threading.Event())
        state = {"row": 1}
        control.offer(state)
        state["row"] = 99
        control.flush()
        assert store.value(control.task.properties, "progress") == {"row": 1}
        with pytest.raises(CodecError):
            control.offer({1, 2})


@pytest.mark.parametrize(
    ("order", "raised"), [("cancelled", "JobCancelled"), ("paused", "JobPaused")]
)
def test_a_stop_order_told_by_the_watcher_stops_the_chunk_at_its_next_checkpoint(
    world, order, raised
):
    control = world.control
    chunk = Chunk(
        job_id=JOB, index=0, payload={}, params={}, state=None, attempt=1, control=control
    )
    chunk.checkpoint(1)  # written: the first checkpoint of an interval
    chunk.checkpoint(2)  # kept in memory: the interval has not passed
    assert not chunk.stopping

    control.stop_for(order)  # by the stop-order watcher (runner.worker.stop_orders), no renewal

    # Then the chunk is told (a Spark job group's watcher polls this) ...
    assert chunk.stopping
    # ... and its next checkpoint saves the newest state and raises the stop order's error,
    # a ChunkStopped, so code that lets ChunkStopped through needs nothing new
    with pytest.raises(ChunkStopped) as stopped:
        chunk.checkpoint(3)
    assert type(stopped.value).__name__ == raised
    assert world.stored_progress() == 3
    # and the first order stands
    control.stop_for("paused" if order == "cancelled" else "cancelled")
    assert control.stop_order == order


# --------------------------------------------------------------------------- progress=


def test_progress_goes_with_the_newest_state_in_the_same_write(world: World):
    # Given offers with progress inside one interval
    world.control.offer(1, Progress(0.1, 1, 10))
    world.control.offer(2, Progress(0.2, 2, 10))
    assert world.control.writes == 0
    assert Progress.from_properties(world.stored().properties, "x") is None

    # When the interval passes, one write holds the newest state and its progress
    world.clock.advance(INTERVAL)
    world.control.offer(3, Progress(0.3, 3, 10))
    assert world.control.writes == 1
    stored = world.stored()
    assert world.stored_progress() == 3
    assert Progress.from_properties(stored.properties, "x") == Progress(0.3, 3, 10)
    assert stored.properties[CHECKPOINT_ON] == world.clock.now()


def test_an_offer_without_progress_keeps_the_last_said(world: World):
    world.control.offer(1, Progress(0.5))
    world.clock.advance(INTERVAL)
    world.control.offer(2)  # no progress said: 50 % still stands
    world.clock.advance(INTERVAL)
    world.control.offer(3)
    assert world.control.writes == 2
    assert Progress.from_properties(world.stored().properties, "x") == Progress(0.5)
    assert world.control.progress == Progress(0.5)


def test_the_flush_on_stop_writes_the_newest_progress(world: World):
    world.control.offer(7, Progress(0.7, 7, 10))
    world.stopping.set()
    with pytest.raises(ChunkStopped):
        world.control.raise_if_stopped()
    assert world.stored_progress() == 7
    assert Progress.from_properties(world.stored().properties, "x") == Progress(0.7, 7, 10)
