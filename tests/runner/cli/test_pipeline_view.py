"""A pipeline as a unit (issue 32, item 2), on both backends: ``jobs.Pipeline`` submits
its steps with derived ids (a re-run is a no-op), ``runner status --pipeline`` shows
every step in the order they run, with what each waits on or why it is blocked, and
``runner cancel|pause|resume --pipeline`` acts on every step not ended.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError
from jobs import Pipeline, manage
from jobs.errors import JobIdTaken
from jobs.retention import delete as delete_job
from jobs.submit import submit
from runner.cli import commands as cli
from runner.cli.pipeline_view import PipelineNotFound, pipeline_status
from runner.cli.render import render_status
from runner.cli.status import job_status
from runner.cli.status_types import JobStatus
from tests.backends import Backend
from tests.runner.cli.invoke import one_error_line, run_runner
from tests.runner.world import Unclosed, Verdicts, World, make_world

OK = {"payloads": [{"act": "ok"}]}


@pytest.fixture
def world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    storage = backend.storage
    monkeypatch.setattr(cli, "open_storage", lambda location, **_: Unclosed(storage))
    yield from make_world(backend, monkeypatch)


def _pipeline(world: World) -> Pipeline:
    run = Pipeline(f"orders-{uuid.uuid4().hex[:8]}")
    stage = run.step("stage", Verdicts, OK)
    transform = run.step("transform", Verdicts, OK, after=[stage])
    run.step("verify", Verdicts, OK, after=[transform])
    return run


def _invoke(world: World, *args: str) -> Any:
    result = CliRunner().invoke(cli.cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_a_pipeline_submits_its_steps_under_derived_ids_and_again_submits_nothing(world: World):
    run = _pipeline(world)

    ids = run.submit(storage=world.backend.storage)

    assert ids == [run.job_id(name) for name in ("stage", "transform", "verify")]
    jobs = [world.job_record(job_id) for job_id in ids]
    assert [job.state for job in jobs] == ["planning", "waiting", "waiting"]
    assert [job.pipeline for job in jobs] == [run.pipeline_id] * 3
    assert [job.after for job in jobs] == [(), (ids[0],), (ids[1],)]
    # A re-run of the same script: the same jobs, nothing new
    assert run.submit(storage=world.backend.storage) == ids
    assert [world.job_record(j).incarnation for j in ids] == [j.incarnation for j in jobs]
    # (a re-submit of a planning job sends its planning message again, in case the
    # first submit died before sending it: the claim runs one)
    assert {message.job_id for message in world.visible()} == {ids[0]}


def test_a_changed_step_is_refused_not_dropped(world: World):
    run = _pipeline(world)
    run.submit(storage=world.backend.storage)
    changed = Pipeline(run.pipeline_id)
    changed.step("stage", Verdicts, {"payloads": [{"act": "ok"}, {"act": "ok"}]})
    with pytest.raises(JobIdTaken, match="other params"):
        changed.submit(storage=world.backend.storage)


def test_a_step_name_that_makes_no_job_id_or_comes_twice_is_refused(world: World):
    run = Pipeline("orders")
    with pytest.raises(ConfigurationError, match="step 'a b'"):
        run.step("a b", Verdicts, OK)
    run.step("stage", Verdicts, OK)
    with pytest.raises(ConfigurationError, match="has a step 'stage' already"):
        run.step("stage", Verdicts, OK)


def test_status_of_a_pipeline_shows_every_step_in_order_with_what_it_waits_on(world: World):
    run = _pipeline(world)
    ids = run.submit(storage=world.backend.storage)

    found = pipeline_status(world.store, run.pipeline_id, world.clock.now())
    assert [step.job_id for step in found.steps] == ids
    assert (found.state, found.steps_done) == ("running", 0)
    steps = [step for step in found.steps if isinstance(step, JobStatus)]
    assert [step.waiting_on for step in steps] == [(), (ids[0],), (ids[1],)]

    text = _invoke(world, "status", "--pipeline", run.pipeline_id).output
    assert text.startswith(f"pipeline {run.pipeline_id}  running  0/3 steps done")
    assert text.index(ids[0]) < text.index(ids[1]) < text.index(ids[2])
    assert f"waiting on: {ids[1]} (starts when they are done)" in text

    shown = json.loads(_invoke(world, "status", "--pipeline", run.pipeline_id, "--json").output)
    assert shown["pipeline"] == run.pipeline_id
    assert [step["job_id"] for step in shown["steps"]] == ids
    assert [step["state"] for step in shown["steps"]] == ["planning", "waiting", "waiting"]


def test_a_failed_step_shows_the_next_blocked_with_the_reason(world: World):
    run = _pipeline(world)
    ids = run.submit(storage=world.backend.storage)
    world.store.change_job(ids[0], lambda job: {"state": "failed", "error": "2 rows differ"})

    found = pipeline_status(world.store, run.pipeline_id, world.clock.now())

    assert found.state == "failed"
    assert [step.state for step in found.steps] == ["failed", "blocked", "waiting"]
    blocked = found.steps[1]
    assert isinstance(blocked, JobStatus)
    assert blocked.blocked == "blocked: step stage failed (2 rows differ)"
    text = _invoke(world, "status", "--pipeline", run.pipeline_id).output
    assert "blocked: step stage failed (2 rows differ)" in text


def test_a_pipeline_that_ran_to_its_end_is_done(world: World):
    run = _pipeline(world)
    run.submit(storage=world.backend.storage)
    while found := world.receive_all():
        for message in found:
            world.deliver(message)

    status = pipeline_status(world.store, run.pipeline_id, world.clock.now())
    assert (status.state, status.steps_done) == ("done", 3)


def test_cancel_of_a_pipeline_cancels_every_step_not_ended(world: World):
    run = _pipeline(world)
    ids = run.submit(storage=world.backend.storage)
    unclosed = replace(world.backend.storage, closer=None)
    world.monkeypatch.setattr(manage, "open_storage", lambda *a, **k: unclosed)

    text = _invoke(world, "cancel", "--pipeline", run.pipeline_id, "--reason", "wrong day").output

    assert [world.job_record(j).state for j in ids] == ["cancelled"] * 3
    assert text.count(": cancelled, cancelled on") == 3
    found = pipeline_status(world.store, run.pipeline_id, world.clock.now())
    assert found.state == "cancelled"


def test_a_control_command_needs_a_job_or_a_pipeline(world: World):
    result = CliRunner().invoke(cli.cli, ["pause"])
    assert result.exit_code == 2 and "give a JOB_ID or --pipeline ID" in result.output


def test_an_unknown_pipeline_is_one_line(world: World):
    with pytest.raises(PipelineNotFound, match="no pipeline 'nope'"):
        pipeline_status(world.store, "nope", world.clock.now())


def test_an_unknown_pipeline_is_one_line_from_the_command(tmp_path: Path):
    store = tmp_path / "store"
    open_storage(str(store)).close()
    for command in (["status"], ["pause"], ["poison", "redrive"]):
        result = run_runner(tmp_path, *command, "--pipeline", "nope", "--storage", str(store))
        assert one_error_line(result) == (
            "runner: error: no pipeline 'nope': no job was submitted with --pipeline nope"
        )


def test_a_deleted_step_leaves_the_pipeline_and_a_lost_or_garbled_one_is_said(world: World):
    # Given a pipeline whose last step was deleted, one note naming a job never
    # recorded (its submit died), and a step whose record was garbled
    run = _pipeline(world)
    ids = run.submit(storage=world.backend.storage)
    manage.cancel(ids[0], storage=world.backend.storage)
    delete_job(ids[2], storage=world.backend.storage)
    world.store.pipeline_steps.note(run.pipeline_id, run.job_id("lost"))
    world.garble_job(ids[1], {"state": 42})

    found = pipeline_status(world.store, run.pipeline_id, world.clock.now())

    assert [step.job_id for step in found.steps] == [ids[0], ids[1]]
    assert found.steps[1].state == "unreadable"


def test_a_pipeline_waiting_on_a_job_outside_it_is_waiting(world: World):
    outside = submit(
        Verdicts, OK, job_id=f"outside-{uuid.uuid4().hex[:8]}", storage=world.backend.storage
    )
    manage.pause(outside, storage=world.backend.storage)
    run = Pipeline(f"later-{uuid.uuid4().hex[:8]}")
    run.step("only", Verdicts, OK, after=outside)
    run.submit(storage=world.backend.storage)

    found = pipeline_status(world.store, run.pipeline_id, world.clock.now())

    assert (found.state, found.steps_done) == ("waiting", 0)


def test_status_of_a_pipeline_is_not_mixed_with_other_selections(world: World):
    result = CliRunner().invoke(cli.cli, ["status", "some-job", "--pipeline", "p"])
    assert result.exit_code == 2 and "--pipeline shows one pipeline" in result.output


def test_the_list_of_jobs_gathers_a_pipelines_steps_under_its_name(world: World):
    run = _pipeline(world)
    ids = run.submit(storage=world.backend.storage)
    alone = submit(
        Verdicts, OK, job_id=f"alone-{uuid.uuid4().hex[:8]}", storage=world.backend.storage
    )
    jobs = [
        job_status(world.store, world.job_record(job_id), world.clock.now())
        for job_id in (ids[2], alone, ids[0], ids[1])
    ]

    text = render_status(jobs)

    head = f"pipeline {run.pipeline_id} (3 steps shown; runner status --pipeline {run.pipeline_id}"
    assert text.startswith(head)
    # its steps together, where its first one was; the other job after them
    heads = [text.index(f"\n{job_id}  ") for job_id in (ids[2], ids[0], ids[1], alone)]
    assert heads == sorted(heads)
    assert text.count("pipeline " + run.pipeline_id + " (") == 1
