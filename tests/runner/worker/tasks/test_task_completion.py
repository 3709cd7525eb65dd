"""What follows a finished chunk: the finisher's done marks (runner/worker/tasks/chunk_finisher.py)
and the completion check that finalizes or fails the job (runner/worker/tasks/job_completion.py).

Built as tests/runner/worker/tasks/test_task_lifecycle.py's tests are (tests/runner/world.py):
in this process, on both backends, the worker on a FakeClock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from runner.worker.tasks.job_completion import set_job
from tests.runner.world import (
    LEASE_SECONDS,
    OTHER_WORKER,
    THIS_WORKER,
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
        assert world.worker.keeper.leased() == []  # dropped: the message will lapse
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
