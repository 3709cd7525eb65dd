"""What a running task shows the outside: its ids on every log line, its start, resume
and end lines, and its place among the worker's running tasks (the heartbeat's).

The lines (``runner.worker.tasks`` logger, with the ids of :mod:`runner.worker.observing.logs`), the
last two at WARNING::

    chunk 3 of job-x started (attempt 1)
    chunk 3 of job-x resumed (attempt 2) from its checkpoint of 2026-11-22T01:50:10+00:00,
        43% (430/1,000)
    chunk 3 of job-x finished in 4.2 s (attempt 2)
    chunk 3 of job-x failed (attempt 1): ValueError('bad row 17')
    chunk 3 of job-x stopped: lease lost (...)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from checkpoint.clock import utc_text
from checkpoint.errors import BadRecord
from checkpoint.records import CHECKPOINT_ON, Progress, TaskRecord
from runner.worker.observing.heartbeat import RunningTasks
from runner.worker.observing.logs import TASK_LOGGER, TaskIds, task_ids
from runner.worker.tasks.task_kinds import KINDS

log = logging.getLogger(TASK_LOGGER)


def ids_of(task: TaskRecord) -> TaskIds:
    return TaskIds(task.job_id, task.kind, task.index, task.attempt)


@contextmanager
def task_running(
    worker_id: str, running: RunningTasks, claimed: TaskRecord, before: TaskRecord | None
) -> Iterator[bool]:
    """The block in which a claimed task runs: its lines carry its ids, the worker's
    heartbeat lists it, and its start (or resume) is logged first. Gives whether the
    attempt :func:`resumes` an earlier one's state.

    Args:
        claimed: the record as claimed (its attempt is this one's).
        before: the record as read before the claim (None for a planned claim, which
            never ran), to say what the task resumes from.
    """
    ids, resumed = ids_of(claimed), resumes(before)
    with task_ids(ids, worker_id), running.running(ids):
        if log.isEnabledFor(logging.INFO):  # the line is not made for nobody
            log.info(start_line(claimed, before))
        yield resumed


def resumes(before: TaskRecord | None) -> bool:
    """True when the task's record as read before the claim holds a state an earlier
    attempt left, which this attempt resumes from (what the log says and metrics count)."""
    return before is not None and before.has_progress


def start_line(claimed: TaskRecord, before: TaskRecord | None) -> str:
    """``chunk 3 of job-x started (attempt 1)``, or ``... resumed (attempt 2) from its
    checkpoint of TIME, 43% (430/1,000)`` when an earlier attempt left a state."""
    name = task_name(claimed)
    if before is None or not resumes(before):
        return f"{name} started (attempt {claimed.attempt})"
    written = before.properties.get(CHECKPOINT_ON) or before.updated_on
    when = f" of {utc_text(written)}" if isinstance(written, datetime) else ""
    try:
        progress = Progress.from_properties(before.properties, before.name)
    except BadRecord:
        progress = None
    how_far = f", {progress}" if progress is not None else ""
    return f"{name} resumed (attempt {claimed.attempt}) from its checkpoint{when}{how_far}"


def finished_line(task: TaskRecord, seconds: float) -> str:
    """``chunk 3 of job-x finished in 4.2 s (attempt 1)``."""
    return f"{task_name(task)} finished in {seconds:.1f} s (attempt {task.attempt})"


def task_name(task: TaskRecord) -> str:
    return KINDS[task.kind].title(task.job_id, task.index)
