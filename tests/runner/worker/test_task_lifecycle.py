"""Every branch of a task's life (runner/worker/tasks.py and its steps), and of the
finisher and the completion check that follow it, run in this process on both backends
with a FakeClock (docs/semantics.md §2-§8).

Each test records a job with CheckpointStore calls, puts a message on the job's queue,
receives it as the worker loop does and hands it to ``runner.worker.tasks.handle`` on a worker
built by ``runner.worker.loop.assemble``. What happens meanwhile (another worker's write, a store
outage) is injected at the storage protocol just before a given call of the worker's
(:class:`Meanwhile`, a fault plan).

Time: the worker runs on a FakeClock, so lease deadlines, retry budgets and record times
move only when a test, or a budget's wait, advances it. The embedded store shares that
clock, so its queue visibility moves with it. Azurite keeps server time, which no test can
advance: there a visibility is checked as what the worker asked the queue for (every
UpdateMessage is logged, :class:`QueueLog`), and a message whose hidden time would have
passed is made visible at once with its newest pop receipt (an UpdateMessage to
visibility 0, as a release does) instead of being waited for.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from checkpoint import layout, messages
from checkpoint.records import LEASE_ON_RECORD, SPILL_BYTES
from checkpoint.storage import QueueMessage
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from runner.worker.job_completion import set_job
from runner.worker.tasks import handle
from tests.runner.world import (
    FINALIZED,
    FIRST_BACKOFF_SECONDS,
    LEASE_SECONDS,
    OTHER_WORKER,
    STATES,
    THIS_WORKER,
    Other,
    Second,
    Verdicts,
    World,
)


def _wait_until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    """For the finisher's own thread (the only real thread here) to get somewhere."""
    ready = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        ready.wait(0.01)
    raise AssertionError("the finisher never got there")


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("job_class", [Other, Second], ids=["not-served", "another-queue"])
def test_a_message_of_a_type_not_run_from_this_queue_is_poisoned_and_fails_its_job(
    world: World, job_class: type[ChunkedJob]
):
    # Given a job of a type this worker does not run from this queue, its message here
    job_id = world.job([{"act": "ok"}], job_type=job_class.job_type())
    world.send(job_id, job_type=job_class.job_type())

    message = world.deliver()

    # Then the message is moved to the poison queue and the job fails (else it would
    # wait for ever); nothing ran
    reason = f"unknown job type {job_class.job_type()!r} on queue {world.queue!r}"
    assert world.poisoned() == [(message.body, reason)]
    assert world.in_queue() == 0
    job = world.job_record(job_id)
    assert job.state == "failed" and job.error == f"chunk message poisoned: {reason}"
    assert world.task(job_id).state == "waiting"


def test_a_stray_message_naming_another_type_is_poisoned_without_failing_the_job(world: World):
    job_id = world.job([{"act": "ok"}])
    world.send(job_id, job_type=Other.job_type())

    message = world.deliver()

    reason = f"unknown job type {Other.job_type()!r} on queue {world.queue!r}"
    assert world.poisoned() == [(message.body, reason)]
    assert world.job_record(job_id).state == "running"


def test_a_message_naming_no_job_is_poisoned(world: World):
    job_id = f"v-{uuid.uuid4().hex[:10]}"  # never recorded
    world.send(job_id)

    message = world.deliver()

    assert world.poisoned() == [(message.body, f"no job {job_id!r} in the checkpoint store")]
    assert world.in_queue() == 0


def test_a_message_of_a_job_whose_record_cannot_be_read_is_poisoned(world: World):
    job_id = world.job([{"act": "ok"}])
    world.garble_job(job_id, {"total": "two"})
    world.send(job_id)
    try:
        message = world.deliver()
    finally:
        world.garble_job(job_id, {"total": 1})  # Azurite's tables serve the whole session

    # Then only the message is poisoned: nothing can be written to a job nobody can read
    reason = f"job {job_id!r}: total 'two' is not a whole number >= 0"
    assert world.poisoned() == [(message.body, reason)]
    assert world.task(job_id).state == "waiting"


def test_a_message_naming_a_chunk_never_recorded_is_poisoned(world: World):
    job_id = world.job([{"act": "ok"}])
    world.send(job_id, index=7)

    message = world.deliver()

    assert world.poisoned() == [(message.body, f"no record of chunk 7 of job {job_id!r}")]
    assert world.job_record(job_id).state == "running"


# --------------------------------------------------------------------------- bad records


def test_a_garbled_chunk_record_is_poisoned_over_its_etag_and_fails_the_job(world: World):
    job_id = world.job([{"act": "ok"}])
    world.garble(job_id, {"state": 42})
    world.send(job_id)

    message = world.deliver()

    reason = f"chunk 0 of job {job_id!r}: state 42 is not one of {STATES}"
    task = world.task(job_id)  # readable again
    assert task.state == "poisoned" and task.attempt == 0
    assert task.error is not None and task.error["type"] == "BadRecord"
    assert task.error["message"] == reason
    assert world.poisoned() == [(message.body, reason)]
    assert world.store.counts(job_id) == {"done": 0, "poisoned": 1}
    assert world.job_record(job_id).state == "failed"


def test_a_chunk_whose_payload_cannot_be_read_is_poisoned_before_its_code_runs(world: World):
    job_id = world.job([{"act": "ok"}])
    world.garble(job_id, {"payload": "typed in a storage explorer"})
    world.send(job_id)

    message = world.deliver()

    reason = f"chunk 0 of job {job_id!r}: payload is a str, not msgpack bytes"
    task = world.task(job_id)
    assert task.state == "poisoned" and task.attempt == 1 and not task.has_progress
    assert task.error == {"type": "BadRecord", "message": reason, "traceback": ""}
    assert world.poisoned() == [(message.body, reason)]
    assert world.job_record(job_id).state == "failed"


def test_a_garbled_record_that_says_it_ended_only_has_its_message_poisoned(world: World):
    # Given a chunk record that says done (so it was counted then), garbled since
    job_id = world.job([{"act": "ok"}])
    world.garble(job_id, {"state": "done", "attempt": "x"})
    world.send(job_id)

    message = world.deliver()

    reason = f"chunk 0 of job {job_id!r}: attempt 'x' is not a whole number >= 0"
    assert world.poisoned() == [(message.body, reason)]
    assert world.store.task_as_found(job_id, "chunk", 0).properties["attempt"] == "x"
    assert world.store.counts(job_id) == {"done": 0, "poisoned": 0}


def test_a_garbled_record_rewritten_while_being_poisoned_is_left_to_its_writer(world: World):
    # Given a garbled chunk record that someone mends just as the worker poisons it
    job_id = world.job([{"act": "ok"}])
    world.garble(job_id, {"attempt": "x"})
    world.meanwhile.before("records.batch", lambda: world.garble(job_id, {"attempt": 0}))
    world.send(job_id)

    message = world.deliver()

    # Then the worker leaves record and message alone: the message lapses and comes back
    assert world.task(job_id).state == "waiting"
    assert world.poisoned() == []
    assert world.untouched(message)
    assert world.store.counts(job_id) == {"done": 0, "poisoned": 0}


def test_a_garbled_counter_met_on_the_way_poisons_the_message(world: World):
    # Given a done chunk delivered again, whose shard counter was garbled since
    job_id = world.job([{"act": "ok"}])
    world.end_chunk(job_id, "done")
    world.garble(job_id, {"done": "one"}, row=layout.COUNTS_ROW)
    world.send(job_id)

    message = world.deliver()

    # Then its completion check cannot read the counter, every delivery would fail the
    # same way, so the message is poisoned with the reason
    reason = f"shard 0 counter of job {job_id!r}: {{'done': 'one', 'poisoned': 0}} is not counts"
    assert world.poisoned() == [(message.body, reason)]
    assert world.task(job_id).state == "done"


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
    assert message.id not in world.log.deleted and world.worker.keeper.held() == []

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


def test_a_chunk_failing_below_max_attempts_is_retried_after_its_backoff(world: World):
    job_id = world.job([{"act": "fail"}])
    world.send(job_id)

    message = world.deliver()

    # Then the error and the newest state are recorded, the attempt counts
    task = world.task(job_id)
    assert task.state == "retrying" and task.attempt == 1 and task.owner is None
    assert task.error is not None
    assert (task.error["type"], task.error["message"]) == ("ValueError", "bad row 0")
    assert "ValueError: bad row 0" in task.error["traceback"]
    assert world.progress(task) == "half"
    # and the queue brings the message back after the backoff, no worker waits for it
    assert world.comes_back_after(message, FIRST_BACKOFF_SECONDS).dequeue_count == 2
    assert world.job_record(job_id).state == "running"


def test_a_chunk_failing_its_last_attempt_is_poisoned_and_fails_the_job(world: World):
    job_id = world.job([{"act": "fail"}])
    world.set_task(job_id, state="retrying", attempt=1)
    world.send(job_id)

    message = world.deliver()

    reason = "failed on attempt 2 of 2: ValueError('bad row 0')"
    task = world.task(job_id)
    assert task.state == "poisoned" and task.attempt == 2
    assert task.error is not None and task.error["message"] == "bad row 0"
    assert world.progress(task) == "half"
    assert world.poisoned() == [(message.body, reason)]
    assert world.in_queue() == 0
    assert world.store.counts(job_id) == {"done": 0, "poisoned": 1}
    job = world.job_record(job_id)
    assert job.state == "failed" and job.error is not None and "1 chunk(s) poisoned" in job.error


def test_planning_failing_its_last_attempt_is_poisoned_and_fails_the_job(world: World):
    job_id = world.job(None, params={"split": "fail"})
    world.set_task(job_id, "plan", state="retrying", attempt=1)
    world.send(job_id, "plan")

    message = world.deliver()

    reason = "failed on attempt 2 of 2: ValueError('split failed')"
    plan = world.task(job_id, "plan")
    assert plan.state == "poisoned" and plan.attempt == 2
    assert world.poisoned() == [(message.body, reason)]
    job = world.job_record(job_id)
    assert job.state == "failed" and job.error == f"plan poisoned: {reason}"


def test_a_result_msgpack_cannot_hold_fails_the_attempt(world: World):
    job_id = world.job([{"act": "unencodable"}])
    world.send(job_id)

    message = world.deliver()

    task = world.task(job_id)
    assert task.state == "retrying" and task.attempt == 1
    assert task.error is not None and task.error["type"] == "CodecError"
    assert task.error["message"].startswith("result is not msgpack-able")
    assert world.progress(task) == "half"
    assert world.log.visibility[message.id] == [FIRST_BACKOFF_SECONDS]
    assert world.store.counts(job_id) == {"done": 0, "poisoned": 0}


# --------------------------------------------------------------------------- stops


def test_a_chunk_whose_lease_ran_out_while_it_ran_stops_writing_nothing(world: World):
    # Given a chunk whose process is paused past its lease (the keeper could not renew)
    job_id = world.job([{"act": "ok"}])
    world.during(job_id, lambda: world.clock.advance(LEASE_SECONDS))
    world.send(job_id)

    message = world.deliver()

    # Then it stops at its checkpoint: its state is not flushed (the chunk may be
    # someone else's now) and the message is left to the next receiver
    task = world.task(job_id)
    assert task.state == "running" and task.owner == THIS_WORKER and task.attempt == 1
    assert not task.has_progress
    assert world.untouched(message)


def test_a_failure_after_another_worker_took_the_chunk_over_is_not_recorded(world: World):
    job_id = world.job([{"act": "fail"}])
    world.during(job_id, world.take_over(job_id))
    world.send(job_id)

    message = world.deliver()

    task = world.task(job_id)
    assert task.owner == OTHER_WORKER and task.attempt == 2 and task.error is None
    assert world.untouched(message)


def test_a_stopping_worker_hands_the_chunk_back_with_its_state_and_its_attempt(world: World):
    job_id = world.job([{"act": "ok"}])
    world.during(job_id, world.worker.stopping.set)
    world.send(job_id)

    message = world.deliver()

    task = world.task(job_id)
    assert task.state == "waiting" and task.attempt == 0 and task.owner is None
    assert world.progress(task) == "half"
    # visible again at once, for another worker to resume
    assert world.log.visibility[message.id] == [0]
    assert [m.job_id for m in world.visible()] == [job_id]


@pytest.mark.parametrize("spilled", ["payload", "params"])
def test_a_busy_read_of_a_spilled_value_is_retried_while_the_lease_lasts(
    world: World, spilled: str
):
    # Given a chunk whose payload, or its job's params, was spilled to a blob, and the
    # next blob reads failing busy
    pad = "x" * SPILL_BYTES
    payload = {"act": "ok", "pad": pad} if spilled == "payload" else {"act": "ok"}
    job_id = world.job([payload], params={"pad": pad} if spilled == "params" else None)
    world.meanwhile.busy_times["blobs.get"] = 3
    world.send(job_id)

    world.deliver()

    # Then the read is tried again in place (semantics §15), and the chunk runs
    task = world.task(job_id)
    assert task.state == "done" and task.attempt == 1
    assert world.meanwhile.busy_times["blobs.get"] == 0


def test_planning_retries_a_busy_read_of_its_spilled_params(world: World):
    job_id = world.job(None, params={"payloads": [{"act": "ok"}], "pad": "x" * SPILL_BYTES})
    world.meanwhile.busy_times["blobs.get"] = 3
    world.send(job_id, "plan")

    world.deliver()

    job = world.job_record(job_id)
    assert job.state == "running" and job.total == 1
    assert world.task(job_id, "plan").attempt == 1


def test_storage_trouble_reading_the_payload_hands_the_chunk_back_unfailed(world: World):
    # Given a chunk whose payload was spilled to a blob, and blob reads failing busy
    job_id = world.job([{"act": "ok", "pad": "x" * SPILL_BYTES}])
    world.meanwhile.busy.add("blobs.get")
    world.send(job_id)

    message = world.deliver()

    # Then, its lease spent retrying, the chunk is handed back: not the user's failure,
    # so its attempt is given back and no error recorded
    assert world.faulty.counts.calls["blobs.get"] > 1
    task = world.task(job_id)
    assert task.state == "waiting" and task.attempt == 0 and task.error is None
    assert world.log.visibility[message.id] == [0]


def test_a_hand_back_the_store_cannot_take_leaves_the_message_to_lapse(world: World):
    job_id = world.job([{"act": "ok", "pad": "x" * SPILL_BYTES}])
    world.meanwhile.busy.add("blobs.get")
    world.meanwhile.before("blobs.get", lambda: world.meanwhile.busy.add("records.merge"))
    world.send(job_id)

    message = world.deliver()

    # Then nothing could be written: the attempt counts, as a crash's would
    task = world.task(job_id)
    assert task.state == "running" and task.attempt == 1 and task.owner == THIS_WORKER
    assert world.untouched(message)


def test_a_hand_back_after_another_worker_took_the_chunk_writes_nothing(world: World):
    job_id = world.job([{"act": "ok", "pad": "x" * SPILL_BYTES}])
    world.meanwhile.busy.add("blobs.get")
    world.meanwhile.before("blobs.get", world.take_over(job_id))
    world.send(job_id)

    message = world.deliver()

    task = world.task(job_id)
    assert task.owner == OTHER_WORKER and task.attempt == 2
    assert world.untouched(message)


def test_a_finalize_that_ends_after_being_taken_over_is_fenced(world: World):
    # Given a finalize that another worker claims while it runs (a long pause, say)
    job_id = world.job([{"act": "ok"}])
    world.end_chunk(job_id, "done")
    world.store.update_job(world.job_record(job_id), state="finalizing")
    world.during(job_id, world.take_over(job_id, "final"))
    world.send(job_id, "final")

    message = world.deliver()

    # Then its end is not recorded, the job is not marked done, the message is left
    assert FINALIZED[job_id] == [[(0, 0)]]
    assert world.task(job_id, "final").owner == OTHER_WORKER
    assert world.job_record(job_id).state == "finalizing"
    assert world.untouched(message)


def test_a_chunk_taken_over_while_being_poisoned_is_left_to_its_new_owner(world: World):
    # Given a chunk out of attempts, that another worker claims as this one poisons it
    job_id = world.job([{"act": "ok"}])
    world.running_elsewhere(job_id, attempt=2, lease_left_seconds=-1)
    world.meanwhile.before("records.batch", world.take_over(job_id))
    world.send(job_id)

    message = world.deliver()

    task = world.task(job_id)
    assert task.state == "running" and task.owner == OTHER_WORKER and task.attempt == 3
    assert world.poisoned() == []
    assert world.untouched(message)
    assert world.store.counts(job_id) == {"done": 0, "poisoned": 0}
    assert world.job_record(job_id).state == "running"


# --------------------------------------------------------------------------- a whole job


def test_a_job_runs_from_planning_to_done_in_this_process(world: World):
    # Given a job just submitted
    job_id = world.job(None, params={"payloads": [{"act": "ok"}] * 3})
    world.send(job_id, "plan")

    # When its planning runs, then its chunks are recorded and enqueued with their
    # planned records, and the job is running
    assert handle(world.worker, world.queue, world.receive(), world.clock.monotonic()) is False
    job = world.job_record(job_id)
    assert job.state == "running" and job.total == 3
    assert world.progress(world.task(job_id, "plan")) == 3
    chunks = world.receive_all()
    assert [messages.decode(m.body).planned_etag is not None for m in chunks] == [True] * 3

    # When the chunks run, each is claimed from its planned record and done; the last
    # one's completion check enqueues finalize
    for message in chunks:
        assert handle(world.worker, world.queue, message, world.clock.monotonic()) is True
    assert [(t.state, t.attempt) for t in world.store.chunks(job_id)] == [("done", 1)] * 3
    assert world.job_record(job_id).state == "finalizing"

    # When finalize runs, then it sees every result and the job is done
    final = world.deliver()
    assert messages.decode(final.body).kind == "final"
    assert world.job_record(job_id).state == "done"
    assert FINALIZED[job_id] == [[(0, 0), (1, 10), (2, 20)]]
    assert world.in_queue() == 0

    # And a planning message sent again (a re-submit) is deleted unrun, changing nothing
    world.send(job_id, "plan")
    world.deliver()
    assert world.job_record(job_id).state == "done" and world.in_queue() == 0
    assert len(FINALIZED[job_id]) == 1
    # (the finisher was never started: the slot's thread finished the chunks)
    assert world.worker.finisher.stop(timeout=1)


def test_a_job_with_no_chunks_goes_from_planning_to_finalize(world: World):
    job_id = world.job(None, params={"payloads": []})
    world.send(job_id, "plan")

    world.deliver()

    job = world.job_record(job_id)
    assert job.state == "finalizing" and job.total == 0
    world.deliver()
    assert world.job_record(job_id).state == "done"
    assert FINALIZED[job_id] == [[]]


# --------------------------------------------------------------------------- finisher


def test_a_finished_chunk_taken_over_before_its_done_mark_is_fenced(world: World):
    job_id = world.job([{"act": "ok"}])
    world.meanwhile.before("records.batch", world.take_over(job_id))
    world.send(job_id)

    message = world.deliver()

    # Then nothing of its end is written, no completion check, and the message is left
    task = world.task(job_id)
    assert task.state == "running" and task.owner == OTHER_WORKER
    assert world.store.counts(job_id) == {"done": 0, "poisoned": 0}
    assert world.job_record(job_id).state == "running"
    assert world.untouched(message)


def test_a_done_mark_the_store_cannot_take_leaves_the_chunk_to_be_redone(world: World):
    # Given batches failing busy for as long as the chunk's lease lasts
    job_id = world.job([{"act": "ok"}])
    world.meanwhile.busy.add("records.batch")
    world.send(job_id)

    message = world.deliver()

    # Then nothing of its end is written and its message is left to come back
    task = world.task(job_id)
    assert task.state == "running" and task.owner == THIS_WORKER and task.attempt == 1
    assert world.store.counts(job_id) == {"done": 0, "poisoned": 0}
    assert world.untouched(message)


def test_a_failed_completion_check_keeps_the_message_and_the_next_delivery_checks(world: World):
    # Given record reads failing once the chunk's done mark is written
    job_id = world.job([{"act": "ok"}])
    world.meanwhile.before("records.batch", lambda: world.meanwhile.busy.add("records.get"))
    world.send(job_id)

    message = world.deliver()

    # Then the chunk is done and counted, but the job not seen complete: the message is
    # kept (not deleted)
    assert world.task(job_id).state == "done"
    assert world.store.counts(job_id) == {"done": 1, "poisoned": 0}
    assert world.job_record(job_id).state == "running"
    assert world.untouched(message)

    # When the store is back and the message comes back, then the check is made again
    world.meanwhile.busy.clear()
    world.let_pass(LEASE_SECONDS, message)
    again = world.deliver()
    assert again.id == message.id and message.id in world.log.deleted
    assert world.job_record(job_id).state == "finalizing"
    assert [m.kind for m in world.visible()] == ["final"]


def test_the_finisher_thread_outlives_a_group_that_raises(world: World):
    # Given a running finisher, and the job record garbled as chunk 0's mark is written
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    finisher = world.worker.finisher
    finisher.start()
    world.meanwhile.before("records.batch", lambda: world.garble_job(job_id, {"total": "two"}))
    try:
        world.send(job_id, index=0)
        first = world.deliver()
        # When its completion check cannot read the job
        _wait_until(finisher.idle)
        assert world.worker.keeper.held() == []  # dropped: the message will lapse
        world.garble_job(job_id, {"total": 2})

        # Then the thread goes on finishing chunks handed over later
        world.send(job_id, index=1)
        second = world.deliver()
        assert finisher.stop(timeout=30)
    finally:
        world.garble_job(job_id, {"total": 2})
    assert world.store.counts(job_id) == {"done": 2, "poisoned": 0}
    assert second.id in world.log.deleted and first.id not in world.log.deleted
    assert world.job_record(job_id).state == "finalizing"


# --------------------------------------------------------------------------- completion


def test_finalize_is_enqueued_once_however_often_completion_is_checked(world: World):
    job_id = world.job([{"act": "ok"}])
    world.end_chunk(job_id, "done")

    budget = world.store.budget()
    world.worker.completion.check(job_id, budget, shard=0)
    world.worker.completion.check(job_id, budget)

    assert world.job_record(job_id).state == "finalizing"
    assert [m.kind for m in world.visible()] == ["final"]


def test_a_job_whose_chunks_ended_with_some_poisoned_fails_unfinalized(world: World):
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    world.end_chunk(job_id, "done", index=0)
    world.end_chunk(job_id, "poisoned", index=1)

    world.worker.completion.check(job_id, world.store.budget(), shard=0)

    job = world.job_record(job_id)
    assert job.state == "failed"
    assert job.error == f"1 chunk(s) poisoned; see `runner poison list {job_id}`"
    assert world.visible() == []


def test_completion_leaves_a_job_still_planning_to_its_planning(world: World):
    job_id = world.job(None)

    world.worker.completion.check(job_id, world.store.budget(), shard=0)

    assert world.job_record(job_id).state == "planning"
    assert world.visible() == []


def test_a_job_update_racing_another_writer_is_decided_again_on_the_fresh_record(world: World):
    # Given a job that another worker fails just as this one would move it on
    job_id = world.job([{"act": "ok"}])
    world.meanwhile.before(
        "records.batch",  # a change of state: the job and its index rows in one batch
        lambda: world.store.update_job(world.job_record(job_id), state="failed", error="x"),
    )

    changed = set_job(
        world.worker.store,
        job_id,
        world.store.budget(),
        only_from=("running",),
        state="finalizing",
    )

    # Then the change is not made over the other writer's: the job is no longer running
    assert changed is False
    assert world.job_record(job_id).state == "failed"


# --------------------------------------------------------------------------- found by these tests


def test_a_garbled_counter_fails_the_job_and_poisons_the_chunk_after_its_attempts(world: World):
    # Given a chunk whose shard counter was garbled before the chunk ended
    job_id = world.job([{"act": "ok"}])
    world.garble(job_id, {"done": "one"}, row=layout.COUNTS_ROW)
    world.send(job_id)

    # When it runs: its done mark cannot be counted
    message = world.deliver()

    # Then the job fails saying why, and the chunk is run again, not renewed for ever
    reason = f"shard 0 counter of job {job_id!r}: {{'done': 'one', 'poisoned': 0}} is not counts"
    assert world.job_record(job_id).state == "failed"
    assert world.job_record(job_id).error == reason
    assert world.worker.keeper.held() == []
    # and once its attempts are spent, it is poisoned instead of cycling
    world.let_pass(LEASE_SECONDS, message)
    again = world.deliver()
    world.let_pass(LEASE_SECONDS, again)
    last = world.deliver()
    assert world.poisoned() == [(last.body, reason)]
    assert world.in_queue() == 0


def test_a_finished_chunk_the_finisher_cannot_end_is_not_renewed_for_ever(world: World):
    # Given a finisher that fails with something other than a storage error
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)

    def broken(group: Any) -> None:
        raise RuntimeError("a bug in the finisher")

    world.monkeypatch.setattr(world.worker.finisher, "finish", broken)

    with pytest.raises(RuntimeError):
        world.deliver()

    # Then the lease was dropped: the message lapses and comes back
    assert world.worker.keeper.held() == []


def test_a_chunk_that_saved_no_new_state_ends_without_rewriting_the_stored_one(world: World):
    # Given a chunk resumed from a large (spilled) state that saves nothing new
    job_id = world.job([{"act": "ok"}])
    big = "x" * (SPILL_BYTES + 1)
    world.set_task(job_id, values={"progress": big})
    world.during(job_id, lambda: None)
    world.monkeypatch.setattr(Verdicts, "checkpoint_interval_seconds", 60.0)
    blob_before = world.task(job_id).properties.get("progress_blob")
    assert blob_before

    def no_checkpoint(self: Verdicts, chunk: Chunk) -> int:
        return 7

    world.monkeypatch.setattr(Verdicts, "process", no_checkpoint)
    world.send(job_id)
    world.deliver()

    task = world.task(job_id)
    assert task.state == "done"
    assert task.properties.get("progress_blob") == blob_before  # not written again
    assert world.progress(task) == big
