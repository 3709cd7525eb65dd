"""The dashboard's page of a pipeline (``/pipelines/{pipeline_id}``): what ``runner
status --pipeline`` shows, read through :mod:`runner.cli.pipeline_view` (one source for
the command and the page), and the actions on every step at once, through what
``runner cancel|pause|resume --pipeline`` and ``runner poison redrive --pipeline`` call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from checkpoint.records import ENDED_JOB_STATES
from checkpoint.store import CheckpointStore
from jobs import manage
from runner.cli.dashboard.actions import DEFAULT_REASON
from runner.cli.pipeline_view import PipelineStatus, pipeline_jobs, pipeline_status
from runner.cli.redrive import redrive_pipeline
from runner.cli.status_types import JobStatus

#: What may be done to a pipeline from its page, in the page's order.
PIPELINE_ACTIONS = ("pause", "resume", "redrive", "cancel")
#: What the page says once each is done, of how many steps.
_DID = {
    "pause": "paused {} step(s)",
    "resume": "resumed {} step(s)",
    "redrive": "redrove {} failed step(s)",
    "cancel": "cancelled {} step(s)",
}


@dataclass(frozen=True)
class PipelineFrame:
    """A pipeline as read at ``taken_on``; ``error``: why the last read failed, if it did
    (the frame is then the last good one)."""

    status: PipelineStatus
    taken_on: datetime
    error: str | None = None


def read_pipeline(store: CheckpointStore, pipeline: str) -> PipelineFrame:
    """The pipeline now. Raises PipelineNotFound if it has no step."""
    now = store.clock.now()
    return PipelineFrame(pipeline_status(store, pipeline, now), now)


def stale_pipeline(frame: PipelineFrame, error: str) -> PipelineFrame:
    return replace(frame, error=error)


def pipeline_actions(status: PipelineStatus) -> tuple[str, ...]:
    """The actions that apply to some step: pause while one not ended runs unpaused,
    resume while one is paused, redrive while one has failed (or its redrive is
    unfinished), cancel while one has not ended."""
    steps = [step for step in status.steps if isinstance(step, JobStatus)]
    under_way = [step for step in steps if step.state not in ENDED_JOB_STATES]
    wanted = {
        "pause": any(not step.paused for step in under_way),
        "resume": any(step.paused for step in under_way),
        "redrive": any(step.state == "failed" or step.redriving for step in steps),
        "cancel": bool(under_way),
    }
    return tuple(action for action in PIPELINE_ACTIONS if wanted[action])


def act_on_pipeline(
    store: CheckpointStore, pipeline: str, action: str, form: Mapping[str, str]
) -> int:
    """Do ``action`` (one of :data:`PIPELINE_ACTIONS`) to every step it applies to, as
    its command does; returns how many steps it was done to. Raises what the command
    raises: PipelineNotFound, JobEnded (a step ended since it was listed), storage
    errors."""
    if action == "redrive":
        outcomes = redrive_pipeline(store, store.storage.queues, pipeline)
        return sum(1 for outcome in outcomes if outcome.redriven)
    storage, clock = store.storage, store.clock
    reason = form.get("reason", "").strip() or DEFAULT_REASON
    control: dict[str, Callable[[str], object]] = {
        "cancel": lambda job_id: manage.cancel(job_id, reason, storage=storage, clock=clock),
        "pause": lambda job_id: manage.pause(
            job_id, drain=bool(form.get("drain")), storage=storage, clock=clock
        ),
        "resume": lambda job_id: manage.resume(job_id, storage=storage, clock=clock),
    }
    found, _ = pipeline_jobs(store, pipeline)
    under_way = [job.job_id for job in found if not job.ended]
    for job_id in under_way:
        control[action](job_id)
    return len(under_way)


def pipeline_said(action: str | None, count: str | None) -> str | None:
    """What the page says of the action it was sent back from (``?did=&count=``), from
    known words only."""
    if action not in _DID:
        return None
    text = count or ""
    return _DID[action].format(int(text) if text.isdigit() else 0)
