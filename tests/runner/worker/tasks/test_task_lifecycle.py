"""A task's life (runner/worker/tasks/life.py and its steps) run in this process on both
backends with a FakeClock (docs/semantics.md §2-§8): bad input and bad records poisoned,
a whole job from planning to done. Its branches by step: the claim in test_task_claim.py,
how an attempt ends in test_task_outcome.py, the finisher and the completion check that
follow it in test_task_completion.py.

Each test records a job with CheckpointStore calls, puts a message on the job's queue,
receives it as the worker loop does and hands it to ``runner.worker.tasks.life.handle`` on a worker
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

import uuid
from typing import Any

import pytest

from checkpoint import layout, messages
from checkpoint.records import SPILL_BYTES
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from runner.worker.tasks.life import handle
from tests.runner.world import (
    FINALIZED,
    LEASE_SECONDS,
    STATES,
    Other,
    Second,
    Verdicts,
    World,
)

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


# --------------------------------------------------------------------------- a whole job


def test_a_job_runs_from_planning_to_done_in_this_process(world: World):
    # Given a job just submitted
    job_id = world.job(None, params={"payloads": [{"act": "ok"}] * 3})
    world.send(job_id, "plan")

    # When its planning runs, then its chunks are recorded and enqueued with their
    # planned records, and the job is running
    assert handle(world.worker, world.queue, world.receive(), world.clock.monotonic()) is None
    job = world.job_record(job_id)
    assert job.state == "running" and job.total == 3
    assert world.progress(world.task(job_id, "plan")) == 3
    chunks = world.receive_all()
    assert [messages.decode(m.body).planned_etag is not None for m in chunks] == [True] * 3

    # When the chunks run, each is claimed from its planned record and done; the last
    # one's completion check enqueues finalize
    for message in chunks:
        assert handle(world.worker, world.queue, message, world.clock.monotonic()) is not None
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
    assert world.worker.keeper.leased() == []
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
    assert world.worker.keeper.leased() == []


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
