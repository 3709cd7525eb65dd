"""How a claimed task's attempt ends (runner/worker/tasks/outcome.py): failed and retried after
its backoff or poisoned, stopped by a lost lease, handed back unfailed, fenced once
another worker took it over.

Built as tests/runner/worker/tasks/test_task_lifecycle.py's tests are (tests/runner/world.py):
in this process, on both backends, the worker on a FakeClock.
"""

from __future__ import annotations

import pytest

from checkpoint.records import SPILL_BYTES
from tests.runner.world import (
    FINALIZED,
    FIRST_BACKOFF_SECONDS,
    LEASE_SECONDS,
    OTHER_WORKER,
    THIS_WORKER,
    World,
)

# --------------------------------------------------------------------------- failures


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
