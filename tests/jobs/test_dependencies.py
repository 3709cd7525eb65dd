"""Jobs that run after others (docs/semantics.md §23), on both backends, through the
worker's own code (the :class:`World` of tests/runner/world.py): a job submitted
``after=[...]`` waits, recorded, and starts by itself when the last of them is done;
a failed one blocks it, a cancelled or deleted one cancels it; a worker or a submit
that dies at any point of the hand-off strands nothing and starts nothing twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from checkpoint import messages
from checkpoint.errors import BadRecord, ConfigurationError, JobNotFound, StorageError
from checkpoint.storage import QueueMessage
from jobs import PipelineStop, dependencies, manage
from jobs.errors import JobIdTaken
from jobs.job_run import SimulatedCrash
from jobs.retention import delete as delete_job
from jobs.submit import submit
from runner.cli.redrive import redrive
from runner.worker.job_cache import FRESH_SECONDS
from tests.backends import Backend
from tests.runner.world import (
    FINALIZED,
    FIRST_BACKOFF_SECONDS,
    LEASE_SECONDS,
    Verdicts,
    World,
    make_world,
)

OK = {"payloads": [{"act": "ok"}, {"act": "ok"}]}


@pytest.fixture
def world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    yield from make_world(backend, monkeypatch)


def _id(name: str) -> str:
    return f"dep-{name}-{uuid.uuid4().hex[:8]}"


def _submit(world: World, name: str, after: list[str] = (), **options: Any) -> str:  # type: ignore[assignment]
    return submit(
        Verdicts, OK, job_id=_id(name), after=after, storage=world.backend.storage, **options
    )


def _kinds(handled: list[messages.TaskMessage], job_id: str) -> list[str]:
    return [message.kind for message in handled if message.job_id == job_id]


# --------------------------------------------------------------------------- waiting


def test_a_job_after_another_waits_recorded_then_starts_when_it_is_done(world: World):
    # Given a job, and one submitted to run after it
    first = _submit(world, "stage")
    second = _submit(world, "transform", after=[first])

    # Then the second is recorded waiting, plans nothing and has no message
    job = world.job_record(second)
    assert job.state == "waiting" and job.after == (first,) and job.total is None
    assert [m.job_id for m in world.visible()] == [first]

    # When the worker runs what there is
    handled = world.run_until_idle()

    # Then the first ran to its end, and only then the second, by itself
    assert _kinds(handled, first) == ["plan", "chunk", "chunk", "final"]
    assert _kinds(handled, second) == ["plan", "chunk", "chunk", "final"]
    order = [(m.job_id, m.kind) for m in handled]
    assert order.index((first, "final")) < order.index((second, "plan"))
    assert world.job_record(first).state == "done"
    assert world.job_record(first).dependents_started
    assert world.job_record(second).state == "done"
    assert len(FINALIZED[second]) == 1


def test_a_job_waits_for_every_job_it_names(world: World):
    # Given a job after two, one of them not yet run
    first, other = _submit(world, "a"), _submit(world, "b")
    manage.pause(other, storage=world.backend.storage)
    joined = _submit(world, "joined", after=[first, other])

    # When the first ends, then the joined one still waits for the other
    world.run_until_idle()
    assert world.job_record(first).state == "done"
    assert world.job_record(joined).state == "waiting"

    # When the other is resumed and ends, then the joined one starts and ends
    manage.resume(other, storage=world.backend.storage)
    world.clock.advance(FRESH_SECONDS)  # what the worker knew of the job is stale now
    world.run_until_idle()
    assert world.job_record(other).state == "done"
    assert world.job_record(joined).state == "done"


def test_a_job_submitted_after_a_job_already_done_starts_at_once(world: World):
    first = _submit(world, "done-first")
    world.run_until_idle()
    assert world.job_record(first).state == "done"

    second = _submit(world, "late", after=[first])

    assert world.job_record(second).state == "planning"
    assert [(m.job_id, m.kind) for m in world.visible()] == [(second, "plan")]
    world.run_until_idle()
    assert world.job_record(second).state == "done"


def test_a_chain_of_three_runs_in_order_with_nobody_watching(world: World):
    stage = _submit(world, "stage")
    transform = _submit(world, "transform", after=[stage])
    publish = _submit(world, "publish", after=[transform])

    handled = world.run_until_idle()

    order = [(m.job_id, m.kind) for m in handled]
    assert order.index((stage, "final")) < order.index((transform, "plan"))
    assert order.index((transform, "final")) < order.index((publish, "plan"))
    assert [world.job_record(j).state for j in (stage, transform, publish)] == ["done"] * 3


# --------------------------------------------------------------------------- blocked, cancelled


def test_a_failed_predecessor_blocks_its_dependent_and_says_why(world: World):
    # Given a job after one that fails (more chunks poisoned than it tolerates)
    first = _submit(world, "transform")
    second = _submit(world, "verify", after=[first])
    world.store.change_job(first, lambda job: {"state": "failed", "error": "3 chunk(s) poisoned"})

    # Then the dependent is not cancelled: it waits, blocked, and says why
    job = world.job_record(second)
    assert job.state == "waiting"
    preceding = dependencies.predecessors(world.store, job, world.store.budget())
    assert preceding.cancel_reason is None
    reason = dependencies.blocked_by(preceding)
    assert reason == f"blocked: step {first} failed (3 chunk(s) poisoned)"


def test_a_step_of_a_pipeline_is_named_by_its_step(world: World):
    pipeline = _id("orders")
    first = submit(
        Verdicts,
        OK,
        job_id=f"{pipeline}-transform",
        pipeline=pipeline,
        storage=world.backend.storage,
    )
    second = submit(
        Verdicts,
        OK,
        job_id=f"{pipeline}-verify",
        pipeline=pipeline,
        after=[first],
        storage=world.backend.storage,
    )
    world.store.change_job(first, lambda job: {"state": "failed", "error": "bad rows"})

    job = world.job_record(second)
    assert job.pipeline == pipeline
    preceding = dependencies.predecessors(world.store, job, world.store.budget())
    assert dependencies.blocked_by(preceding) == "blocked: step transform failed (bad rows)"


def test_a_cancelled_predecessor_cancels_its_waiting_dependents_and_theirs(world: World):
    stage = _submit(world, "stage")
    transform = _submit(world, "transform", after=[stage])
    publish = _submit(world, "publish", after=[transform])

    manage.cancel(stage, "wrong input", storage=world.backend.storage)

    job = world.job_record(transform)
    assert job.state == "cancelled"
    assert job.cancel_reason == f"runs after {stage}, which was cancelled"
    job = world.job_record(publish)
    assert job.state == "cancelled"
    assert job.cancel_reason == f"runs after {transform}, which was cancelled"
    # and nothing of theirs ever runs
    handled = world.run_until_idle()
    assert _kinds(handled, transform) == [] and _kinds(handled, publish) == []


def test_a_deleted_predecessor_cancels_its_waiting_dependents(world: World):
    first = _submit(world, "stage")
    second = _submit(world, "transform", after=[first])

    delete_job(first, force=True, storage=world.backend.storage)

    job = world.job_record(second)
    assert job.state == "cancelled"
    # (deleting the cancelled first job cancelled it first, then deleted it)
    assert job.cancel_reason in (
        f"runs after {first}, which was cancelled",
        f"runs after {first}, which was deleted",
    )
    assert world.store.dependents.of(first) == []


def test_a_job_waiting_on_a_job_deleted_when_done_is_not_touched(world: World):
    first = _submit(world, "stage")
    second = _submit(world, "transform", after=[first])
    world.run_until_idle()

    delete_job(first, storage=world.backend.storage)

    assert world.job_record(second).state == "done"


# --------------------------------------------------------------------------- refused


def test_after_naming_an_unknown_job_is_refused_and_records_nothing(world: World):
    missing = _id("missing")
    job_id = _id("orphan")
    with pytest.raises(JobNotFound, match=missing):
        submit(Verdicts, OK, job_id=job_id, after=[missing], storage=world.backend.storage)
    with pytest.raises(JobNotFound):
        world.job_record(job_id)


@pytest.mark.parametrize("after", [["not an id"], [""], ["-x"]])
def test_after_naming_a_bad_id_is_refused_in_one_line(world: World, after: list[str]):
    with pytest.raises(ConfigurationError, match="^after: invalid job id"):
        submit(Verdicts, OK, after=after, storage=world.backend.storage)


def test_submitting_again_alike_is_a_no_op_and_otherwise_refused(world: World):
    first, other = _submit(world, "a"), _submit(world, "b")
    second = _submit(world, "c", after=[first, other])
    waiting = world.job_record(second)

    # The same ids, in any order: the same job
    again = submit(Verdicts, OK, job_id=second, after=[other, first], storage=world.backend.storage)
    assert again == second
    assert world.job_record(second).incarnation == waiting.incarnation
    # Another set of jobs to run after, or another pipeline: refused
    with pytest.raises(JobIdTaken, match="to run after"):
        submit(Verdicts, OK, job_id=second, after=[first], storage=world.backend.storage)
    with pytest.raises(JobIdTaken, match="pipeline"):
        submit(
            Verdicts,
            OK,
            job_id=second,
            after=[first, other],
            pipeline="p",
            storage=world.backend.storage,
        )


def test_a_cycle_cannot_be_made(world: World):
    # A job can only name jobs that exist, and its own list never changes: so no job
    # can come to wait on itself, directly or through others.
    first = _submit(world, "a")
    second = _submit(world, "b", after=[first])
    with pytest.raises(ConfigurationError, match="after itself"):
        submit(Verdicts, OK, job_id=second, after=[second], storage=world.backend.storage)
    with pytest.raises(JobIdTaken):
        submit(Verdicts, OK, job_id=first, after=[second], storage=world.backend.storage)


# --------------------------------------------------------------------------- killed midway


def test_a_worker_dying_between_done_and_the_hand_off_strands_nothing(world: World):
    # Given a job after another, and a worker that dies as it has ended the first done,
    # before it looked at the first's dependents
    first = _submit(world, "stage")
    second = _submit(world, "transform", after=[first])
    original = dependencies.start_dependents

    def dies(*args: Any) -> Any:
        world.meanwhile.dead = True
        raise SimulatedCrash("killed before the hand-off")

    world.monkeypatch.setattr(dependencies, "start_dependents", dies)
    received: list[QueueMessage] = []
    with pytest.raises(SimulatedCrash):
        world.run_until_idle(received=received)
    world.meanwhile.dead = False
    world.monkeypatch.setattr(dependencies, "start_dependents", original)
    assert world.job_record(first).state == "done"
    assert not world.job_record(first).dependents_started
    assert world.job_record(second).state == "waiting"

    # When the first's finalize message comes back (it was not deleted)
    final = received[-1]
    assert messages.decode(final.body).kind == "final"
    world.let_pass(LEASE_SECONDS, final)
    handled = world.run_until_idle()

    # Then its hand-off ran again, finalize did not, and the second ran once
    assert _kinds(handled, first) == ["final"]
    assert _kinds(handled, second) == ["plan", "chunk", "chunk", "final"]
    assert len(FINALIZED[first]) == 1 and len(FINALIZED[second]) == 1
    assert world.job_record(first).dependents_started


def test_a_starter_dying_between_the_message_and_the_record_starts_it_once(world: World):
    # Given a waiting job whose starter sent its planning message, then died before
    # recording it planning
    first = _submit(world, "stage")
    second = _submit(world, "transform", after=[first])
    original = world.store.change_job

    def dies_recording(job_id: str, decide: Any, budget: Any = None) -> Any:
        if job_id == second:
            raise StorageError("the starter died here")
        return original(job_id, decide, budget)

    world.monkeypatch.setattr(world.store, "change_job", dies_recording)
    _run_until_idle_after_first(world, first)
    with pytest.raises(StorageError):
        dependencies.settle_waiting(
            world.store,
            world.backend.storage.queues,
            world.job_record(second),
            world.store.budget(),
        )
    world.monkeypatch.setattr(world.store, "change_job", original)
    assert world.job_record(second).state == "waiting"

    # When its planning message is received, and the hand-off runs again besides
    handled = world.run_until_idle()
    dependencies.start_dependents(
        world.store, world.backend.storage.queues, first, world.store.budget()
    )
    handled += world.run_until_idle()

    # Then its planning moved it on, and it ran once
    assert world.job_record(second).state == "done"
    assert _kinds(handled, second).count("chunk") == 2
    assert len(FINALIZED[second]) == 1


def _run_until_idle_after_first(world: World, first: str) -> None:
    """Run the first job to its end with its hand-off finding nothing to start (the
    test starts the dependent itself)."""
    original = dependencies.start_dependents
    world.monkeypatch.setattr(dependencies, "start_dependents", lambda *args: [])
    world.run_until_idle()
    world.monkeypatch.setattr(dependencies, "start_dependents", original)
    assert world.job_record(first).state == "done"


def test_a_submit_dying_between_the_note_and_the_record_is_finished_by_its_retry(
    world: World,
):
    # Given a job after another whose submit noted it, then died before recording it
    first = _submit(world, "stage")
    second = _id("transform")
    world.store.dependents.note(first, second)

    # When the first ends, its hand-off skips the job that does not exist
    world.run_until_idle()
    assert world.job_record(first).state == "done"

    # Then the submit's retry records it and, the first being done, starts it
    submit(Verdicts, OK, job_id=second, after=[first], storage=world.backend.storage)
    world.run_until_idle()
    assert world.job_record(second).state == "done"


def test_a_planning_message_sent_twice_runs_the_dependents_planning_once(world: World):
    # Given a hand-off whose send was applied, its answer lost, and sent again
    first = _submit(world, "stage")
    second = _submit(world, "transform", after=[first])
    _run_until_idle_after_first(world, first)
    job = world.job_record(second)
    dependencies.start(world.store, world.backend.storage.queues, job, world.store.budget())
    dependencies.start(world.store, world.backend.storage.queues, job, world.store.budget())

    handled = world.run_until_idle()

    assert _kinds(handled, second).count("plan") == 2
    assert _kinds(handled, second).count("chunk") == 2
    assert world.job_record(second).state == "done" and len(FINALIZED[second]) == 1


# --------------------------------------------------------------------------- PipelineStop


def test_a_finalize_raising_pipeline_stop_fails_its_job_and_blocks_the_next(world: World):
    # Given a verify step whose finalize finds differences, and a publish step after it
    verify = _submit(world, "verify")
    publish = _submit(world, "publish", after=[verify])

    def differs() -> None:
        raise PipelineStop("3 rows differ")

    # When its chunks run, then its finalize stops the pipeline
    handled: list[messages.TaskMessage] = []
    while found := world.receive_all():
        for message in found:
            task = messages.decode(message.body)
            if task.kind == "final" and task.job_id == verify:
                world.during(verify, differs)
            handled.append(task)
            world.deliver(message)

    # Then the step failed with those words, its finalize was not tried again, and the
    # step after it is blocked, saying why, with nothing of it run
    job = world.job_record(verify)
    assert (job.state, job.error) == ("failed", "3 rows differ")
    assert _kinds(handled, verify).count("final") == 1
    final = world.task(verify, "final")
    assert final.state == "poisoned" and final.attempt == 1
    waiting = world.job_record(publish)
    assert waiting.state == "waiting" and _kinds(handled, publish) == []
    preceding = dependencies.predecessors(world.store, waiting, world.store.budget())
    assert dependencies.blocked_by(preceding) == f"blocked: step {verify} failed (3 rows differ)"


# --------------------------------------------------------------------------- edges


def test_deleting_a_failed_predecessor_cancels_its_blocked_dependent(world: World):
    first = _submit(world, "transform")
    second = _submit(world, "verify", after=[first])
    world.store.change_job(first, lambda job: {"state": "failed", "error": "bad rows"})

    delete_job(first, storage=world.backend.storage)

    job = world.job_record(second)
    assert job.state == "cancelled"
    assert job.cancel_reason == f"runs after {first}, which was deleted"


def test_a_diamond_is_cancelled_once_through_either_side(world: World):
    # Given stage -> top -> (left, right) -> joined, and a note naming a job never
    # recorded (its submit died)
    stage = _submit(world, "stage")
    top = _submit(world, "top", after=[stage])
    left = _submit(world, "left", after=[top])
    right = _submit(world, "right", after=[top])
    joined = _submit(world, "joined", after=[left, right])
    world.store.dependents.note(left, _id("never-recorded"))

    manage.cancel(stage, "wrong input", storage=world.backend.storage)

    steps = (stage, top, left, right, joined)
    assert [world.job_record(job_id).state for job_id in steps] == ["cancelled"] * 5
    assert world.job_record(joined).cancel_reason in (
        f"runs after {left}, which was cancelled",
        f"runs after {right}, which was cancelled",
    )


def test_settling_or_cancelling_a_job_no_longer_waiting_changes_nothing(world: World):
    first = _submit(world, "stage")
    job = world.job_record(first)
    budget = world.store.budget()

    assert (
        dependencies.settle_waiting(world.store, world.backend.storage.queues, job, budget) == job
    )
    assert dependencies.cancel_waiting(world.store, first, "too late", budget) is None
    assert dependencies.cancel_waiting(world.store, _id("missing"), "gone", budget) is None
    assert world.job_record(first).state == "planning"


def test_after_may_be_one_id_given_alone(world: World):
    first = _submit(world, "stage")
    second = submit(Verdicts, OK, job_id=_id("one"), after=first, storage=world.backend.storage)
    assert world.job_record(second).after == (first,)


def test_a_garbled_after_makes_the_job_record_unreadable(world: World):
    first = _submit(world, "stage")
    world.garble_job(first, {"after": "not an id,x"})
    with pytest.raises(BadRecord, match="after 'not an id,x' names no job ids"):
        world.job_record(first)


# --------------------------------------------------------------------------- redrive


def test_a_redriven_step_ends_done_and_its_blocked_dependent_runs_by_itself(world: World):
    # Given a step with a chunk that fails each attempt, and a step after it
    params = {"payloads": [{"act": "ok"}, {"act": "fail"}]}
    first = submit(Verdicts, params, job_id=_id("transform"), storage=world.backend.storage)
    second = _submit(world, "verify", after=[first])

    # When it runs: the bad chunk fails, is retried after its backoff, and is poisoned
    received: list[QueueMessage] = []
    world.run_until_idle(received=received)
    retried = [m for m in received if messages.decode(m.body).index == 1]
    world.let_pass(FIRST_BACKOFF_SECONDS, retried[-1])
    world.run_until_idle()

    # Then the step failed at its end, and the one after it is blocked
    assert world.job_record(first).state == "failed"
    waiting = world.job_record(second)
    preceding = dependencies.predecessors(world.store, waiting, world.store.budget())
    assert dependencies.blocked_by(preceding) is not None
    done_before = [t.index for t in world.store.chunks(first) if t.state == "done"]
    assert done_before == [0]

    # When the cause is fixed and its poisoned chunk redriven
    world.monkeypatch.setattr(Verdicts, "process", _fixed(Verdicts.process))
    assert redrive(world.store, world.backend.storage.queues, first).count == 1
    again = world.run_until_idle()

    # Then only that chunk ran again, the step finalized once and ended done, and the
    # step after it started by itself and ran to its end
    assert [(m.kind, m.index) for m in again if m.job_id == first] == [("chunk", 1), ("final", 0)]
    assert world.job_record(first).state == "done" and len(FINALIZED[first]) == 1
    assert world.job_record(second).state == "done"
    assert _kinds(again, second) == ["plan", "chunk", "chunk", "final"]


def _fixed(process: Any) -> Any:
    """``process`` with its input fixed: a chunk that failed now succeeds."""

    def fixed(self: Any, chunk: Any) -> Any:
        if chunk.payload.get("act") == "fail":
            chunk.checkpoint("half")
            return chunk.index * 10
        return process(self, chunk)

    return fixed
