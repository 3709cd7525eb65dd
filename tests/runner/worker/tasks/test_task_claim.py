"""Whether a delivery may run its task (runner/worker/tasks/claim.py): a task done, poisoned,
running elsewhere, leased on its record or started max_attempts times already, and the
claim itself (docs/semantics.md §4).

Built as tests/runner/worker/tasks/test_task_lifecycle.py's tests are (tests/runner/world.py):
in this process, on both backends, the worker on a FakeClock.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest

from checkpoint import messages
from checkpoint.records import LEASE_ON_RECORD
from checkpoint.storage import QueueMessage
from tests.runner.world import (
    FINALIZED,
    LEASE_SECONDS,
    OTHER_WORKER,
    World,
)

# --------------------------------------------------------------------------- verdicts


def test_a_done_chunk_delivered_again_is_deleted_unrun_and_its_job_completed(world: World):
    # Given a job whose one chunk was marked done by a worker that died before the
    # completion check (the chunk would fail if it ran again)
    job_id = world.job([{"act": "fail"}])
    world.end_chunk(job_id, "done")
    world.send(job_id)

    message = world.deliver()

    # Then the message is deleted unrun, and the completion check made then
    assert message.id in world.log.deleted
    task = world.task(job_id)
    assert task.state == "done" and task.attempt == 1
    assert world.job_record(job_id).state == "finalizing"
    assert [m.kind for m in world.visible()] == ["final"]


def _record_reads(world: World) -> int:
    calls = world.faulty.counts.calls
    return calls["records.get"] + calls["records.query"]


def test_a_done_chunk_delivered_again_after_its_job_moved_on_costs_no_completion_check(
    world: World,
):
    # Given a job already finalizing (its completion check was made) and a duplicate
    # message of one of its done chunks (a send retried after its answer was lost)
    job_id = world.job([{"act": "ok"}])
    world.end_chunk(job_id, "done")
    world.store.update_job(world.job_record(job_id), state="finalizing")
    world.send(job_id)
    reads_before = _record_reads(world)

    message = world.deliver()

    # Then it is deleted unrun after reading the chunk's record and nothing else
    assert message.id in world.log.deleted
    assert _record_reads(world) - reads_before <= 2  # the job's (unless cached), the chunk's
    assert world.visible() == []  # no second finalize message


def test_a_poisoned_chunk_delivered_again_is_deleted_unrun(world: World):
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    world.end_chunk(job_id, "poisoned")
    before = world.task(job_id)
    world.send(job_id)

    message = world.deliver()

    assert message.id in world.log.deleted and world.in_queue() == 0
    assert world.task(job_id).etag == before.etag
    assert world.poisoned() == []
    assert world.job_record(job_id).state == "running"  # chunk 1 has not ended


def test_a_delete_the_store_refuses_all_lease_long_leaves_the_message_to_come_back(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given a done chunk delivered again, and a store that refuses every delete
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    world.end_chunk(job_id, "done")
    world.send(job_id)
    world.meanwhile.busy.add("queues.delete")

    # When it is handled: one warning, no exception for the worker loop to catch
    with caplog.at_level(logging.WARNING):
        message = world.deliver()
    assert not [r for r in caplog.records if r.exc_info is not None]
    assert "comes back when its lease runs out" in caplog.text
    assert message.id not in world.log.deleted and world.worker.keeper.leased() == []

    # Then once the store answers again and the lease has run out, it is deleted unrun
    world.meanwhile.busy.clear()
    world.let_pass(LEASE_SECONDS, message)
    world.deliver()
    assert message.id in world.log.deleted and world.in_queue() == 0


def test_a_poison_move_the_store_refuses_all_lease_long_is_made_when_it_comes_back(
    world: World, caplog: pytest.LogCaptureFixture
):
    job_id = f"v-{uuid.uuid4().hex[:10]}"  # never recorded
    world.send(job_id)
    world.meanwhile.busy.add("queues.send")

    with caplog.at_level(logging.WARNING):
        message = world.deliver()
    assert world.poisoned() == [] and world.untouched(message)
    assert not [r for r in caplog.records if r.exc_info is not None]

    world.meanwhile.busy.clear()
    world.let_pass(LEASE_SECONDS, message)
    world.deliver()
    assert world.poisoned() == [(message.body, f"no job {job_id!r} in the checkpoint store")]
    assert world.in_queue() == 0


def test_a_duplicate_delivery_of_a_chunk_running_elsewhere_is_deleted_unrun(world: World):
    job_id = world.job([{"act": "ok"}])
    world.running_elsewhere(job_id, attempt=1, lease_left_seconds=10)
    before = world.task(job_id)
    world.send(job_id)

    message = world.deliver()

    assert message.id in world.log.deleted and world.in_queue() == 0
    assert world.task(job_id).etag == before.etag


def test_a_chunk_whose_holder_let_its_lease_lapse_is_claimed_and_run(world: World):
    job_id = world.job([{"act": "ok"}])
    world.running_elsewhere(job_id, attempt=1, lease_left_seconds=-1)
    world.send(job_id)

    message = world.deliver()

    task = world.task(job_id)
    assert task.state == "done" and task.attempt == 2 and task.owner is None
    assert world.store.value(task.properties, "result") == 0
    assert message.id in world.log.deleted
    assert world.job_record(job_id).state == "finalizing"


def test_planning_delivered_again_after_it_was_done_sets_the_job_running(world: World):
    # Given a planning that recorded its two chunks and was marked done, by a worker
    # that died before it updated the job
    job_id = world.job(None, params={"payloads": [{"act": "ok"}] * 2})
    world.store.add_chunks(job_id, 0, [{"act": "ok"}] * 2)
    world.set_task(job_id, "plan", values={"progress": 2}, state="done", attempt=1)
    world.send(job_id, "plan")

    message = world.deliver()

    job = world.job_record(job_id)
    assert job.state == "running" and job.total == 2
    assert message.id in world.log.deleted
    assert world.visible() == []  # no finalize: the chunks are still to run


def test_finalize_delivered_again_after_it_was_done_ends_the_job(world: World):
    job_id = world.job([{"act": "ok"}])
    world.end_chunk(job_id, "done")
    world.store.update_job(world.job_record(job_id), state="finalizing")
    world.set_task(job_id, "final", state="done", attempt=1)
    world.send(job_id, "final")

    message = world.deliver()

    assert world.job_record(job_id).state == "done"
    assert message.id in world.log.deleted
    assert job_id not in FINALIZED


def _finalize_held_on_record(world: World, lease_left_seconds: float) -> tuple[str, QueueMessage]:
    """A finalize running on another worker that lost its message's pop receipt and
    holds the task by its record (``lease_until`` that far ahead); its message is
    delivered here meanwhile."""
    job_id = world.job([{"act": "ok"}])
    world.end_chunk(job_id, "done")
    world.store.update_job(world.job_record(job_id), state="finalizing")
    world.send(job_id, "final")
    message = world.receive()
    world.set_task(
        job_id,
        "final",
        state="running",
        owner=OTHER_WORKER,
        message_id=message.id,
        attempt=1,
        lease_until=world.clock.now() + timedelta(seconds=lease_left_seconds),
        **{LEASE_ON_RECORD: True},
    )
    return job_id, message


def test_a_delivery_of_a_finalize_held_on_its_record_hides_the_message_again(world: World):
    job_id, message = _finalize_held_on_record(world, lease_left_seconds=20)
    before = world.task(job_id, "final")

    world.deliver(message)

    # Not taken over, no attempt, the record untouched: the message hidden a lease
    assert world.task(job_id, "final").etag == before.etag
    assert world.log.visibility[message.id] == [LEASE_SECONDS]
    assert message.id not in world.log.deleted and job_id not in FINALIZED


def test_a_finalize_whose_record_hold_ran_out_is_taken_over_and_the_mark_cleared(world: World):
    job_id, message = _finalize_held_on_record(world, lease_left_seconds=-1)

    world.deliver(message)

    final = world.task(job_id, "final")
    assert final.state == "done" and final.attempt == 2  # the owner is cleared when done
    assert not final.properties.get(LEASE_ON_RECORD)
    assert job_id in FINALIZED and world.job_record(job_id).state == "done"


# --------------------------------------------------------------------------- attempts


def test_a_chunk_started_max_attempts_times_is_poisoned_without_running(world: World):
    # Given a chunk whose last allowed attempt died: its holder's lease lapsed
    job_id = world.job([{"act": "ok"}])
    world.running_elsewhere(job_id, attempt=2, lease_left_seconds=-1)
    world.send(job_id)

    message = world.deliver()

    reason = (
        "started 2 times without finishing (max_attempts=2); the last attempt died or "
        "lost its lease"
    )
    task = world.task(job_id)
    assert task.state == "poisoned" and task.attempt == 2 and not task.has_progress
    assert task.error == {"type": "RuntimeError", "message": reason, "traceback": ""}
    assert world.poisoned() == [(message.body, reason)]
    assert world.in_queue() == 0
    job = world.job_record(job_id)
    assert job.state == "failed"
    assert job.error == f"1 chunk(s) poisoned; see `runner poison list {job_id}`"


def test_a_message_delivered_too_often_is_poisoned_though_never_claimed(world: World):
    # Given a chunk message sent by planning (it carries the planned record), received
    # and handed back unrun 8 times (graceful stops, say)
    job_id = world.job(None, params={"payloads": [{"act": "ok"}]})
    world.send(job_id, "plan")
    world.deliver()
    for _ in range(2 * 4):
        world.log.make_visible(world.queue, world.receive().id)
    message = world.receive()
    assert message.dequeue_count == 9
    assert messages.decode(message.body).planned_etag is not None

    world.deliver(message)

    # Then the dequeue count, over max_attempts x 4, poisons it without a claim
    reason = "delivered 9 times without finishing"
    task = world.task(job_id)
    assert task.state == "poisoned" and task.attempt == 0
    assert world.poisoned() == [(message.body, reason)]
    assert world.job_record(job_id).state == "failed"


def test_a_chunk_changed_since_planning_is_read_and_claimed_as_usual(world: World):
    # Given a planned chunk message whose record changed since (its first attempt failed)
    job_id = world.job(None, params={"payloads": [{"act": "ok"}]})
    world.send(job_id, "plan")
    world.deliver()
    world.set_task(job_id, state="retrying", attempt=1)

    message = world.deliver()

    # Then the claim from the planned record fails, and the record read and claimed
    assert messages.decode(message.body).planned_etag is not None
    task = world.task(job_id)
    assert task.state == "done" and task.attempt == 2
    assert world.job_record(job_id).state == "finalizing"


def test_a_chunk_claimed_first_by_another_worker_is_released_for_a_lease(world: World):
    # Given another worker that claims the chunk between this one's read and its claim
    job_id = world.job([{"act": "ok"}])
    world.meanwhile.before("records.merge", world.take_over(job_id))
    world.send(job_id)

    message = world.deliver()

    # Then this worker runs nothing and hands the message back, hidden for a lease
    task = world.task(job_id)
    assert task.owner == OTHER_WORKER and task.attempt == 1 and not task.has_progress
    assert world.comes_back_after(message, LEASE_SECONDS).dequeue_count == 2
