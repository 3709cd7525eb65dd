"""Notes of parked messages (checkpoint.parks): what a release does with each note, on
both backends, through the races and ambiguous writes a note meets. How a worker parks
and a resume or a cancel releases is tested through the worker's own code in
tests/runner/worker/test_job_control.py."""

from __future__ import annotations

import uuid

import pytest

from checkpoint import layout, messages, parks
from checkpoint.clock import FakeClock
from checkpoint.parks import Released
from checkpoint.records import TaskKind
from checkpoint.retries import Budget
from checkpoint.storage import QueueMessage, Record, Storage
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults
from tests.backends import Backend
from tests.runner.world import Meanwhile

#: Long enough that a copy seen visible in a test was brought back, not let out.
PARKED_SECONDS = 600


class Parked:
    """A fresh queue and job id on a backend whose tasks table exists."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.storage = backend.storage
        self.clock = backend.clock or FakeClock()
        CheckpointStore(self.storage, self.clock).ensure()
        self.queue = backend.queue()
        self.job_id = f"p-{uuid.uuid4().hex[:10]}"

    def budget(self) -> Budget:
        return CheckpointStore(self.storage, self.clock).budget()

    def park(self, index: int = 0, kind: TaskKind = "chunk") -> QueueMessage:
        """A copy sent out of sight, and its note, as a worker's park leaves them."""
        body = messages.encode(messages.TaskMessage(kind, "parks", self.job_id, index))
        copy = self.storage.queues.send(self.queue, body, delay_seconds=PARKED_SECONDS)
        parks.note(self.storage.records, self.job_id, kind, index, self.queue, copy, self.budget())
        return copy

    def release(self, storage: Storage | None = None) -> Released:
        used = storage or self.storage
        return parks.release(used.records, used.queues, self.job_id, self.budget())

    def visible(self) -> list[str]:
        found = self.storage.queues.receive(self.queue, max_messages=32)
        return sorted(message.id for message in found)

    def notes(self) -> list[Record]:
        partition = layout.park_partition(self.job_id)
        return list(self.storage.records.query(layout.TASKS_TABLE, partition))

    def faulty(self, plan: ScriptedFaults | Meanwhile) -> Storage:
        return FaultyStorage(self.storage, plan, sleep=self.clock.sleep).storage


@pytest.fixture
def parked(backend: Backend) -> Parked:
    return Parked(backend)


def test_a_release_brings_back_every_noted_copy_page_by_page_and_drops_the_notes(
    parked: Parked, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(parks, "PAGE_ROWS", 2)
    copies = [parked.park(index) for index in range(3)]
    copies += [parked.park(kind="plan"), parked.park(kind="final")]
    assert len(parked.notes()) == 5

    assert parked.release() == Released(visible=5)

    assert parked.visible() == sorted(copy.id for copy in copies)
    assert parked.notes() == []
    assert parked.release() == Released()  # nothing left: nothing done


def test_a_task_parked_again_keeps_one_note_naming_its_newest_copy(parked: Parked):
    parked.park(7)
    newest = parked.park(7)
    (note,) = parked.notes()
    assert note.row_key == layout.chunk_row(7) and note.properties["message_id"] == newest.id


def test_a_note_written_again_between_read_and_drop_is_kept_for_the_next_release(
    parked: Parked,
):
    # Given two notes, the first rewritten (its task parked again) after the release
    # read them and before it drops them
    parked.park(0)
    parked.park(1)
    again: list[QueueMessage] = []
    meanwhile = Meanwhile()
    meanwhile.before("records.batch", lambda: again.append(parked.park(0)))

    released = parked.release(parked.faulty(meanwhile))

    # Then both copies read are back, the newer note stays, and the next release takes it
    assert released == Released(visible=2)
    (note,) = parked.notes()
    assert note.properties["message_id"] == again[0].id
    assert parked.release() == Released(visible=1) and parked.notes() == []


def test_a_drop_applied_with_its_answer_lost_is_settled_by_reading(parked: Parked):
    parked.park(0)
    parked.park(1)
    plan = ScriptedFaults(("records.batch", "ambiguous"))

    assert parked.release(parked.faulty(plan)) == Released(visible=2)

    assert plan.pending == [] and parked.notes() == []


def test_a_copy_made_visible_with_the_answer_lost_is_back_all_the_same(parked: Parked):
    copy = parked.park(0)
    plan = ScriptedFaults(("queues.update", "ambiguous"))

    # The update, tried again by the SDK, finds the receipt changed: skipped, quietly
    assert parked.release(parked.faulty(plan)) == Released(skipped=1)

    assert plan.pending == [] and parked.visible() == [copy.id] and parked.notes() == []


def test_notes_that_cannot_be_read_or_reach_nothing_are_skipped_and_dropped(parked: Parked):
    partition = layout.park_partition(parked.job_id)
    records = parked.storage.records
    unreadable = {"queue": parked.queue, "message_id": 5, "pop_receipt": "r"}
    empty = {"queue": parked.queue, "message_id": "", "pop_receipt": ""}
    queue_gone = {"queue": "q-gone-" + uuid.uuid4().hex[:8], "message_id": "m", "pop_receipt": "r"}
    for row, properties in (("c1", unreadable), ("c2", empty), ("c3", queue_gone)):
        records.upsert(layout.TASKS_TABLE, partition, row, properties)
    copy = parked.park(9)
    parked.storage.queues.delete(parked.queue, copy.id, copy.pop_receipt or "")

    assert parked.release() == Released(skipped=4)

    assert parked.notes() == [] and parked.visible() == []
