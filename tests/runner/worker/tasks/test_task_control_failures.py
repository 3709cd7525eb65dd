"""``TaskControl`` when storage fails, on both backends: checkpoints that cannot be
written, a stop whose flush fails or is fenced, the state a failure path keeps, and the
runner's own storage steps inside a task (``runner_side``).

The store's writes go through :class:`~checkpoint.testing.faults.FaultyStorage` with scripted
faults; the lease and the retries run on a FakeClock, so nothing really sleeps.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator

import pytest

from checkpoint.clock import FakeClock
from checkpoint.errors import LeaseLost, NotFound, StorageTrouble, Throttled
from checkpoint.settle import Writer
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults
from jobs.errors import ChunkStopped
from runner.worker.leases.lease import Lease
from runner.worker.tasks.control import TaskControl, runner_side
from tests.backends import Backend

LEASE_SECONDS = 30
INTERVAL_SECONDS = 5.0


class World:
    """A claimed chunk, its lease, and a TaskControl writing through faulty storage."""

    def __init__(self, backend: Backend):
        self.faults = ScriptedFaults()
        self.clock = FakeClock()
        faulty = FaultyStorage(backend.storage, self.faults).storage
        self.store = CheckpointStore(faulty, self.clock)
        self.plain = CheckpointStore(backend.storage)
        self.job_id = f"tc-{uuid.uuid4().hex[:10]}"
        self.plain.create_job(self.job_id, "tests:Job", "tc-q", {})
        self.plain.add_chunks(self.job_id, 0, [{"first": 0}])
        self.writer = Writer()
        claimed = self.plain.write_task(
            self.plain.get_task(self.job_id, "chunk", 0),
            {"state": "running", "owner": "me", "attempt": 1},
            {"progress": "start"},
            token=self.writer.next(),
        )
        now = self.clock.monotonic()
        self.lease = Lease(
            "tc-q", "m-1", "r-1", LEASE_SECONDS, acquired_at=now, visible_at=now + LEASE_SECONDS
        )
        self.stopping = threading.Event()
        self.control = TaskControl(
            self.store,
            claimed,
            self.lease,
            self.clock,
            INTERVAL_SECONDS,
            self.stopping,
            self.writer,
        )

    def stored_progress(self) -> object:
        task = self.plain.get_task(self.job_id, "chunk", 0)
        return self.plain.value(task.properties, "progress")

    def someone_else_writes(self) -> None:
        task = self.plain.get_task(self.job_id, "chunk", 0)
        self.plain.write_task(task, {"owner": "other"}, {"progress": "theirs"})


@pytest.fixture
def world(backend: Backend) -> Iterator[World]:
    subject = World(backend)
    yield subject
    assert subject.faults.pending == [], "a scripted fault never happened"


def test_a_stop_whose_flush_finds_the_store_busy_to_the_end_still_stops(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given a newest state not yet written, a lease about to run out, a busy store
    world.control.offer(7)
    world.clock.advance(LEASE_SECONDS - 0.1)
    world.faults.add("records.merge", "busy")
    world.stopping.set()

    # When the chunk reaches its checkpoint, it stops
    with caplog.at_level(logging.WARNING, logger="runner.worker.tasks.control"):
        with pytest.raises(ChunkStopped):
            world.control.raise_if_stopped()

    # Then the failure is logged, and the state is kept for the stop path to write again
    assert "before stopping failed" in caplog.text
    assert world.control.has_unwritten_state and world.control.newest_state == 7
    assert world.stored_progress() == "start"


def test_a_stop_whose_flush_is_fenced_is_lease_lost_not_a_stop(world: World):
    world.control.offer(7)
    world.someone_else_writes()
    world.stopping.set()

    with pytest.raises(LeaseLost, match="fenced"):
        world.control.raise_if_stopped()

    assert world.lease.lost
    assert world.stored_progress() == "theirs"


def test_a_hand_back_flushes_the_newest_state_retrying_a_busy_store(world: World):
    # Given a lease whose receipt was lost, near its end, and a state not yet written
    world.control.offer(9)
    world.lease.receipt_lost = True
    world.clock.advance(LEASE_SECONDS * 0.8)
    world.faults.add("records.merge", "busy")

    # When the chunk reaches its checkpoint, it is handed back with its state written
    with pytest.raises(ChunkStopped, match="handed back"):
        world.control.raise_if_stopped()

    assert world.stored_progress() == 9
    assert not world.control.has_unwritten_state


def test_a_checkpoint_the_store_is_too_busy_for_is_written_at_the_next_one(world: World):
    world.clock.advance(INTERVAL_SECONDS)
    world.faults.add("records.merge", "busy")

    world.control.offer(1)  # due, but the store is busy: not retried in place
    assert world.stored_progress() == "start" and world.control.has_unwritten_state
    world.control.offer(2)  # not due again yet
    assert world.stored_progress() == "start"
    world.clock.advance(INTERVAL_SECONDS)
    world.control.offer(3)

    assert world.stored_progress() == 3
    assert world.control.writes == 1


def test_a_checkpoint_applied_with_its_answer_lost_is_ours(world: World):
    world.clock.advance(INTERVAL_SECONDS)
    world.faults.add("records.merge", "ambiguous")

    world.control.offer(4)

    assert world.stored_progress() == 4
    assert not world.control.has_unwritten_state and not world.lease.lost


# --------------------------------------------------------------------------- runner_side


def test_the_runners_own_storage_step_that_fails_is_storage_trouble():
    def busy() -> None:
        raise Throttled("ServerBusy")

    with pytest.raises(StorageTrouble, match="reading the payload: ServerBusy") as caught:
        runner_side(busy, "reading the payload")

    assert isinstance(caught.value.__cause__, Throttled)


def test_a_lost_lease_in_the_runners_own_step_stays_lease_lost():
    def fenced() -> None:
        raise LeaseLost("taken over")

    with pytest.raises(LeaseLost, match="taken over"):
        runner_side(fenced, "reading the payload")


def test_the_runners_own_step_returns_what_it_read(world: World):
    assert runner_side(lambda: world.store.get_job(world.job_id).state, "reading") == "planning"
    with pytest.raises(StorageTrouble) as caught:
        runner_side(lambda: world.store.get_task(world.job_id, "chunk", 5), "reading chunk 5")
    assert isinstance(caught.value.__cause__, NotFound)
