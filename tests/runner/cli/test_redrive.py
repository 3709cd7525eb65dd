"""Redriving a step that failed past its ``tolerated_failures`` (docs/semantics.md §23),
on both backends, through the worker's own code (tests/runner/world.py): its
poisoned chunks run again, its dropped ones get their messages back, it finalizes
once and ends done, and the step after it starts by itself. Nothing that succeeded runs
again, a redrive that dies at any write is finished by the next, a worker's stale record
of the failure deletes nothing, and a cancelled job is still not redriven.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from checkpoint.errors import BadRecord
from checkpoint.records import JobRecord
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import Fault, FaultyStorage, ScriptedFaults
from jobs import Pipeline
from jobs.chunk import Chunk
from jobs.job_run import SimulatedCrash
from jobs.submit import submit
from runner.cli import commands as cli
from runner.cli import redrive as redriving
from runner.cli.pipeline_view import PipelineNotFound
from runner.cli.redrive import redrive, redrive_pipeline
from runner.cli.render import render_status
from runner.cli.status import job_status
from runner.worker.stop_orders import CHECK_SECONDS
from runner.worker.tasks import feed
from tests.runner.world import FINALIZED, MEANWHILE, Unclosed, Verdicts, World

#: The step's chunks: two fail until fixed; with a window of 2 and 1 failure tolerated,
#: the second failure fails the step with chunk 3 fed but unrun and 4-5 never fed.
PAYLOADS = [{"act": act} for act in ("ok", "fail", "fail", "ok", "ok", "ok")]
#: What a storage call of each of these does is a write (or hides messages, a receive).
WRITES = {
    "records": {"insert", "replace", "merge", "upsert", "delete", "batch"},
    "queues": {"send", "send_many", "delete", "update", "receive"},
}


class Runs:
    """Each run of ``process``, as ``(job id, index)``; chunks that fail do so until
    ``fixed``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.fixed = False

    def process(self, job: Any, chunk: Chunk) -> Any:
        self.seen.append((chunk.job_id, chunk.index))
        MEANWHILE.get(chunk.job_id, lambda: None)()
        chunk.checkpoint("half")
        if chunk.payload["act"] == "fail" and not self.fixed:
            raise ValueError(f"bad row {chunk.index}")
        return chunk.index * 10

    def of(self, job_id: str) -> list[int]:
        return sorted(index for ran, index in self.seen if ran == job_id)


@pytest.fixture
def runs(world: World) -> Runs:
    made = Runs()
    world.monkeypatch.setattr(Verdicts, "process", lambda job, chunk: made.process(job, chunk))
    world.monkeypatch.setattr(Verdicts, "tolerated_failures", 1)
    world.monkeypatch.setattr(Verdicts, "non_retryable", (ValueError,))
    world.monkeypatch.setattr(Verdicts, "feed_window", 2)
    # A feeding step finding its window full looks again at once, not in a second that
    # the test's clock would have to be moved through.
    world.monkeypatch.setattr(feed, "FEED_IDLE_SECONDS", 0)
    return made


def _failed_step(world: World, then: bool = False) -> tuple[str, str | None]:
    """A step failed past its tolerance (and, ``then``, the step after it, blocked)."""
    storage = world.backend.storage
    first = submit(Verdicts, {"payloads": PAYLOADS}, job_id=_id("transform"), storage=storage)
    second = None
    if then:
        ok = {"payloads": PAYLOADS[:1]}
        second = submit(Verdicts, ok, job_id=_id("verify"), after=[first], storage=storage)
    world.run_until_idle()
    job = world.job_record(first)
    assert job.state == "failed" and job.cancelled_on is not None
    assert second is None or world.job_record(second).state == "waiting"
    return first, second


def _id(name: str) -> str:
    return f"redrive-{name}-{uuid.uuid4().hex[:8]}"


def _ends_done_once(
    world: World, runs: Runs, first: str, second: str | None, before: list[int]
) -> None:
    """Then: the fixed chunks and the dropped ones ran once more, nothing done ran again,
    the step finalized once and ended done, unmarked, and the next step ran."""
    world.run_until_idle()
    job = world.job_record(first)
    assert (job.state, job.cancelled_on, job.cancel_reason, job.redriving) == (
        "done",
        None,
        None,
        False,
    )
    assert runs.of(first) == sorted(before + [1, 2, 3, 4, 5])
    assert len(FINALIZED[first]) == 1 and FINALIZED[first][0] == [
        (index, index * 10) for index in range(6)
    ]
    if second is not None:
        assert world.job_record(second).state == "done" and runs.of(second) == [0]


def test_a_step_failed_past_its_tolerance_is_redriven_and_the_next_step_runs(
    world: World, runs: Runs
):
    # Given a step failed past its tolerance: 0 done, 1-2 poisoned, 3 dropped unrun
    first, second = _failed_step(world, then=True)
    assert runs.of(first) == [0, 1, 2]
    before = runs.of(first)

    # When the cause is fixed and it is redriven, by the command
    runs.fixed = True
    world.monkeypatch.setattr(cli, "open_storage", lambda *_, **__: Unclosed(world.backend.storage))
    said = CliRunner().invoke(cli.cli, ["poison", "redrive", first])

    # Then the poisoned chunks were moved back, and the feeding and chunk 4 sent again
    assert said.exit_code == 0, said.output
    assert (
        said.output == f"redrove 2 poisoned task(s) of {first}, and sent 2 dropped task(s) again\n"
    )
    # and the worker, whose record of the failure is not a second old, runs them all
    _ends_done_once(world, runs, first, second, before)


def test_redrive_of_a_pipeline_redrives_its_failed_step_alone_and_the_rest_runs(
    world: World, runs: Runs
):
    # Given a pipeline whose first step is done, second failed past its tolerance, and
    # third blocked behind it
    run = Pipeline(f"orders-{uuid.uuid4().hex[:8]}")
    stage = run.step("stage", Verdicts, {"payloads": PAYLOADS[:1]})
    transform = run.step("transform", Verdicts, {"payloads": PAYLOADS[:3]}, after=[stage])
    run.step("verify", Verdicts, {"payloads": PAYLOADS[:1]}, after=[transform])
    ids = run.submit(storage=world.backend.storage)
    world.run_until_idle()
    assert [world.job_record(j).state for j in ids] == ["done", "failed", "waiting"]

    # When the cause is fixed and the pipeline redriven, by the command
    runs.fixed = True
    world.monkeypatch.setattr(cli, "open_storage", lambda *_, **__: Unclosed(world.backend.storage))
    said = CliRunner().invoke(cli.cli, ["poison", "redrive", "--pipeline", run.pipeline_id])

    # Then a line per step in the order they run: only the failed one was redriven
    assert said.exit_code == 0, said.output
    assert said.output.splitlines() == [
        f"{ids[0]}: done, not redriven (only a failed step is)",
        f"redrove 2 poisoned task(s) of {ids[1]}",
        f"{ids[2]}: waiting, not redriven (only a failed step is)",
    ]
    # and the pipeline runs to its end, nothing done running again
    world.run_until_idle()
    assert [world.job_record(j).state for j in ids] == ["done"] * 3
    assert [runs.of(j) for j in ids] == [[0], [0, 1, 1, 2, 2], [0]]
    # With --json, an object per step; a second redrive redrives nothing
    again = CliRunner().invoke(
        cli.cli, ["poison", "redrive", "--pipeline", run.pipeline_id, "--json"]
    )
    assert [(o["job_id"], o["state"], o["redriven"]) for o in json.loads(again.output)] == [
        (j, "done", False) for j in ids
    ]
    # A step whose record cannot be read is said and left, and the command fails
    world.garble_job(ids[2], {"state": 42})
    garbled = CliRunner().invoke(cli.cli, ["poison", "redrive", "--pipeline", run.pipeline_id])
    assert f"{ids[2]}: not redriven, unreadable: job {ids[2]!r}: state 42" in garbled.output
    assert isinstance(garbled.exception, BadRecord)
    assert f"1 record(s) of pipeline {run.pipeline_id} cannot be read" in str(garbled.exception)
    # An unknown pipeline is one error; neither or both of a job and a pipeline, a misuse
    with pytest.raises(PipelineNotFound, match="no pipeline 'nope'"):
        redrive_pipeline(world.store, world.backend.storage.queues, "nope")
    assert CliRunner().invoke(cli.cli, ["poison", "redrive"]).exit_code == 2


def test_redrives_that_die_at_each_write_in_turn_are_finished_by_the_next(world: World, runs: Runs):
    # Given a failed step, fixed
    first, second = _failed_step(world)
    before = runs.of(first)
    runs.fixed = True

    # When redrives die one after another, each at one write later than the last (the
    # worker running whatever they sent between them), until one finishes
    for dies_at in range(1, 40):
        plan = DiesAt(dies_at)
        faulty = FaultyStorage(world.backend.storage, plan, sleep=world.clock.sleep).storage
        try:
            redrive(CheckpointStore(faulty, world.clock), faulty.queues, first)
        except SimulatedCrash:
            world.run_until_idle()
            continue
        break
    else:
        raise AssertionError("no redrive finished")
    assert dies_at > 3  # it died at several points before

    # Then the step still ends done once, each chunk having run once more at most
    _ends_done_once(world, runs, first, second, before)


def test_a_redrive_whose_writes_are_applied_with_their_answers_lost_runs_each_chunk_once(
    world: World, runs: Runs
):
    # Given a failed step, fixed
    first, second = _failed_step(world)
    before = runs.of(first)
    runs.fixed = True

    # When every kind of write the redrive makes is applied once with its answer lost
    plan = ScriptedFaults()
    for call in ("records.batch", "queues.send", "queues.send_many", "queues.delete"):
        plan.add(call, "ambiguous")
    plan.add("records.merge", "ambiguous")
    faulty = FaultyStorage(world.backend.storage, plan, sleep=world.clock.sleep).storage
    redrive(CheckpointStore(faulty, world.clock), faulty.queues, first)
    assert plan.pending == []

    # Then (messages sent twice run once, by the claim) it ends done once
    _ends_done_once(world, runs, first, second, before)


def test_a_job_failed_while_planning_plans_on_after_its_redrive(world: World, runs: Runs):
    # Given a job failed past its tolerance before its planning ran
    runs.fixed = True
    job_id = world.job(None, params={"payloads": PAYLOADS[:3]})
    _fail_past_tolerance(world, job_id)

    # When it is redriven
    done = redrive(world.store, world.backend.storage.queues, job_id)

    # Then its planning and feeding are sent again, and it plans and runs to its end
    assert (done.count, done.resent) == (0, 2)
    assert world.job_record(job_id).state == "planning"
    world.run_until_idle()
    assert world.job_record(job_id).state == "done" and runs.of(job_id) == [0, 1, 2]


@pytest.mark.parametrize("read", ["read", "unread"])
def test_a_chunk_stopped_by_the_failure_gives_its_message_back_once_redriven(
    world: World, runs: Runs, read: str
):
    # Given a running chunk whose job fails past its tolerance meanwhile, the worker's
    # watcher telling it to stop, and a redrive reopening the job before it stops (the
    # store not answering the worker's reads then, "unread")
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    meanwhile = [True]

    def fails_and_is_redriven() -> None:
        if meanwhile:
            meanwhile.clear()
            _fail_past_tolerance(world, job_id)
            world.clock.advance(CHECK_SECONDS)
            world.worker.stop_orders.check_due()
            redrive(world.store, world.backend.storage.queues, job_id)
            if read == "unread":
                world.meanwhile.busy.add("records.get")

    world.during(job_id, fails_and_is_redriven)

    # When it reaches its checkpoint
    message = world.deliver()
    world.meanwhile.busy.discard("records.get")

    # Then it stopped, and gave its message back rather than deleting it unrun
    assert message.id not in world.log.deleted
    assert world.log.visibility[message.id] == [0]
    assert world.task(job_id).state == "waiting"
    # and the chunk runs to its end once more, however many messages it has
    world.run_until_idle()
    assert world.job_record(job_id).state == "done"
    assert world.task(job_id).state == "done" and len(FINALIZED[job_id]) == 1


def test_an_unreadable_dropped_chunk_keeps_the_redrive_open_until_mended(world: World, runs: Runs):
    # Given a job failed past its tolerance, its chunk 0 fed and dropped, and garbled
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    world.set_task(job_id, "feed", {"progress": 2}, state="done")
    world.garble(job_id, {"attempt": "x"})
    _fail_past_tolerance(world, job_id)

    # When it is redriven
    done = redrive(world.store, world.backend.storage.queues, job_id)

    # Then chunk 0 is named, and the job stays marked for the next redrive
    assert [(kind, index) for kind, index, _ in done.unreadable] == [("chunk", 0)]
    assert "attempt 'x' is not a whole number" in done.unreadable[0][2]
    assert done.resent == 1 and world.job_record(job_id).redriving
    status = job_status(world.store, world.job_record(job_id), world.clock.now())
    assert f"if none is running, `runner poison redrive {job_id}` again" in render_status([status])
    # When it is mended and redriven again (sending a message at a time): chunk 0 gets
    # its message, the mark goes
    world.garble(job_id, {"attempt": 0})
    world.monkeypatch.setattr(redriving, "RESEND_PAGE_CHUNKS", 1)
    again = redrive(world.store, world.backend.storage.queues, job_id)
    assert (again.unreadable, again.resent) == ([], 2)
    assert not world.job_record(job_id).redriving
    world.run_until_idle()
    assert world.job_record(job_id).state == "done" and runs.of(job_id) == [0, 1]


def _fail_past_tolerance(world: World, job_id: str) -> JobRecord | None:
    """What a worker writes when a poisoned chunk takes the job past its tolerance."""
    now, reason = world.clock.now(), "2 chunk(s) poisoned when the job failed"
    return world.store.change_job(
        job_id,
        lambda job: {
            "state": "failed",
            "error": reason,
            "cancelled_on": now,
            "cancel_reason": reason,
        },
    )


class DiesAt:
    """A fault plan under which the process dies (as by SIGKILL) at its ``n``-th write,
    before it is applied: every call from then on raises."""

    def __init__(self, n: int):
        self._left = n
        self.dead = False

    def decide(self, service: str, method: str) -> Fault | None:
        if method in WRITES.get(service, ()):
            self._left -= 1
            self.dead = self.dead or self._left == 0
        if self.dead:
            raise SimulatedCrash(f"the redrive died before {service}.{method}")
        return None
