"""The four kinds of task as objects: one per name a record or message carries, each
deciding the steps it takes its own way."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import pytest

from checkpoint.records import JobRecord, JobState, TaskKind
from runner.worker.tasks.task_kinds import ChunkKind, FeedKind, FinalKind, PlanKind, kind_of


def test_every_kind_a_record_can_name_has_its_object() -> None:
    for name in get_args(TaskKind):
        assert kind_of(name).name == name


def test_only_a_chunk_takes_a_slot_moves_to_resume_and_is_counted() -> None:
    slotted = {name for name in get_args(TaskKind) if kind_of(name).takes_slot}
    moving = {name for name in get_args(TaskKind) if kind_of(name).moves_to_resume}
    counted = {name for name in get_args(TaskKind) if kind_of(name).in_chunk_metrics}
    finished = {name for name in get_args(TaskKind) if kind_of(name).ends_in_finisher}
    assert slotted == moving == counted == finished == {"chunk"}


def test_only_feeding_waits_for_its_running_step_and_only_finalize_holds_on_record() -> None:
    assert [n for n in get_args(TaskKind) if kind_of(n).waits_while_running] == ["feed"]
    assert FinalKind.watch_lease is not ChunkKind.watch_lease
    assert PlanKind.watch_lease is FeedKind.watch_lease is ChunkKind.watch_lease


@pytest.mark.parametrize(
    ("kind", "followed_in"),
    [
        ("plan", {"running", "finalizing", "done", "failed", "cancelled"}),
        ("feed", set(get_args(JobState))),
        ("chunk", {"finalizing", "done"}),
        # finalize is followed by its job's hand-off to the jobs waiting on it
        # (test_a_done_finalize_is_followed_once_its_dependents_started)
        ("final", set()),
    ],
)
def test_what_follows_a_done_task_is_known_done_from_the_job_state(
    kind: TaskKind, followed_in: set[str]
) -> None:
    for state in get_args(JobState):
        assert kind_of(kind).followed_already(_job_in(state)) == (state in followed_in)


def _job_in(state: JobState) -> JobRecord:
    return JobRecord(
        job_id="job-x",
        job_type="m:C",
        queue="q",
        state=state,
        total=None,
        created_on=None,
        updated_on=None,
        error=None,
        etag="",
        properties={},
    )


def test_log_lines_name_a_chunk_by_index_and_the_others_by_their_word() -> None:
    assert kind_of("chunk").title("job-x", 3) == "chunk 3 of job-x"
    assert kind_of("plan").title("job-x", 0) == "planning of job-x"
    assert kind_of("feed").title("job-x", 0) == "feeding of job-x"
    assert kind_of("final").title("job-x", 0) == "finalize of job-x"


def test_a_done_finalize_is_followed_once_its_dependents_started() -> None:
    final = kind_of("final")
    assert not final.followed_already(_job_in("done"))
    assert final.followed_already(replace(_job_in("done"), dependents_started=True))
    assert not final.followed_already(replace(_job_in("running"), dependents_started=True))
