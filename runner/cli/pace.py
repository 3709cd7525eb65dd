"""A job's pace as the store holds it: when it last moved, its rate and ETA, and the
words every view says them in.

Both are read from what workers write anyway, never from a write of their own: a chunk
done stamps its shard's counter row (``counted_on``, in the batch that counts it) and a
checkpoint stamps its chunk (``checkpoint_on``, in the write that stores the state). So
the first read of a job has a rate (chunks done, with the fractions its unfinished chunks
said, over the time since its planning started) and an ETA; ``--watch`` and the
dashboard then measure the rate over their own refreshes (:class:`runner.cli.watch.Rates`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from checkpoint.records import CHECKPOINT_ON, ENDED_JOB_STATES, JobRecord, TaskRecord
from runner.cli.status_types import JobStatus, Rate

#: The least time since a job's work began to give a rate from the store (less is noise).
STORED_RATE_MIN_SECONDS = 1.0


def last_moved(counted_on: datetime | None, tasks: Iterable[TaskRecord | None]) -> datetime | None:
    """When the job last moved: the newest of when a chunk was last counted done (or
    poisoned) and when any of ``tasks`` last wrote a checkpoint; None before either."""
    times = [counted_on] + [_checkpoint_on(task) for task in tasks if task is not None]
    return max((when for when in times if when is not None), default=None)


#: Job states without a rate: not begun, or ended.
_NO_RATE = ("waiting", *ENDED_JOB_STATES)


def stored_rate(
    job: JobRecord,
    done: float,
    total: int,
    began_on: datetime | None,
    now: datetime,
) -> Rate:
    """The job's rate since its work began (``began_on``: its planning's start, else its
    creation) and the ETA of what is left at that rate. None while it waits on the jobs
    it runs after (its work has not begun), while it is paused or once it has ended (as
    ``--watch`` says), and no ETA while it is still planning."""
    began_on = began_on or job.created_on
    if job.state in _NO_RATE or job.paused_on is not None or began_on is None:
        return Rate()
    seconds = (now - began_on).total_seconds()
    if seconds < STORED_RATE_MIN_SECONDS:
        return Rate()
    rate = max(0.0, done) / seconds
    left = max(0.0, total - done)
    eta = left / rate if rate > 0 and job.total is not None else None
    return Rate(chunks_per_second=rate, eta_seconds=eta)


def rate_words(job: JobStatus, rate: Rate) -> list[str]:
    """``0.25 chunks/s``, ``ETA 14s``; ``paused`` instead while the job is paused (it
    has no rate then, and no ETA); nothing once it has ended."""
    if job.state in ENDED_JOB_STATES:
        return []
    if job.paused:
        return ["paused"]
    said = []
    speed = rate.chunks_per_second
    fraction = job.progress_fraction
    if speed is not None and (fraction is None or fraction < 1):
        said.append(f"{speed:.2f} chunks/s")
    eta = rate.eta_seconds
    if eta is not None:
        said.append(f"ETA {duration(eta)}")
    return said


def moved_words(job: JobStatus, now: datetime) -> list[str]:
    """``moved 12s ago`` while the job has not ended and has moved at all."""
    if job.state in ENDED_JOB_STATES or job.last_progress_at is None:
        return []
    return [f"moved {duration((now - job.last_progress_at).total_seconds())} ago"]


def duration(seconds: float) -> str:
    """``45s``, ``2m05s``, ``1h02m``, ``3d04h``: two units at most."""
    whole = max(0, int(round(seconds)))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _checkpoint_on(task: TaskRecord) -> datetime | None:
    when = task.properties.get(CHECKPOINT_ON)
    return when if isinstance(when, datetime) else None
