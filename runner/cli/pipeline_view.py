"""``runner status --pipeline ID``: every step of a pipeline, in order, as one view.

A pipeline's steps are the jobs submitted with ``pipeline=ID`` (``jobs.Pipeline`` or
``runner submit --pipeline``), read from the pipeline's own notes
(:mod:`checkpoint.catalogue.dependents`), never from the catalogue. Steps are shown in
the order they run: each after the steps it waits on, then by when it was submitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from checkpoint.errors import BadRecord, JobNotFound
from checkpoint.records import JobRecord
from checkpoint.store import CheckpointStore
from runner.cli.status import job_status, unreadable_job
from runner.cli.status_types import AnyJob, JobStatus, UnreadableJob

#: The job states in which a step is under way: its pipeline is then ``running``.
RUNNING_STATES = ("planning", "running", "finalizing")


class PipelineNotFound(JobNotFound):
    """No job was submitted as a step of this pipeline."""


@dataclass(frozen=True)
class PipelineStatus:
    """A pipeline: its state, how many of its steps are done, and each step."""

    pipeline: str
    state: str
    steps_done: int
    steps: tuple[AnyJob, ...]


def pipeline_status(store: CheckpointStore, pipeline: str, now: datetime) -> PipelineStatus:
    """Every step of ``pipeline`` as ``runner status`` shows a job. Raises
    PipelineNotFound if it has none."""
    found, unreadable = pipeline_jobs(store, pipeline)
    steps = [job_status(store, job, now) for job in found]
    done = sum(1 for step in steps if step.state == "done")
    return PipelineStatus(pipeline, _state(steps), done, (*steps, *unreadable))


def pipeline_jobs(
    store: CheckpointStore, pipeline: str
) -> tuple[list[JobRecord], list[UnreadableJob]]:
    """The records of ``pipeline``'s steps in the order they run, and the steps whose
    record cannot be read. Raises PipelineNotFound if it has none."""
    found: list[JobRecord] = []
    unreadable: list[UnreadableJob] = []
    for job_id in store.pipeline_steps.of(pipeline):
        try:
            found.append(store.get_job(job_id))
        except JobNotFound:
            continue  # its submit died before recording it
        except BadRecord as bad:
            unreadable.append(unreadable_job(job_id, bad))
    if not found and not unreadable:
        raise PipelineNotFound(
            f"no pipeline {pipeline!r}: no job was submitted with --pipeline {pipeline}"
        )
    return in_running_order(found), unreadable


def in_running_order(jobs: Sequence[JobRecord]) -> list[JobRecord]:
    """Each job after the jobs of ``jobs`` it runs after, else by submission time."""
    by_id = {job.job_id: job for job in jobs}
    placed: list[JobRecord] = []
    seen: set[str] = set()

    def place(job: JobRecord) -> None:
        if job.job_id in seen:
            return
        seen.add(job.job_id)
        for before in job.after:
            if before in by_id:
                place(by_id[before])
        placed.append(job)

    for job in sorted(jobs, key=lambda j: (j.created_on is None, j.created_on, j.job_id)):
        place(job)
    return placed


def _state(steps: Sequence[JobStatus]) -> str:
    states = {step.state for step in steps}
    if states == {"done"}:
        return "done"
    for ended in ("cancelled", "failed"):
        if ended in states:
            return ended
    if states & set(RUNNING_STATES):
        return "running"
    return "waiting"


def render_pipeline(status: PipelineStatus, render_job: Callable[[AnyJob], str]) -> str:
    """A header line, then each step as ``render_job`` shows a job."""
    total = len(status.steps)
    head = f"pipeline {status.pipeline}  {status.state}  {status.steps_done}/{total} steps done"
    return "\n\n".join([head, *(render_job(step) for step in status.steps)])
