"""``runner status --watch`` without a terminal: one plain line per job per refresh.

Piped, redirected or in CI there is no screen to redraw: the live view would be printed
whole at each refresh, wrapped at 80 columns, its bars blank. A progress log wants one
whole line a job instead, that ``grep`` and ``tail -f`` read: when, which job, its
state, its counts, its rate and ETA. Like :func:`runner.cli.watch_view.render_watch` this is
a pure function of a snapshot.
"""

from __future__ import annotations

from datetime import datetime

from runner.cli.json_form import utc
from runner.cli.pace import rate_words
from runner.cli.render import chunk_counts
from runner.cli.status_types import AnyJob, JobStatus, Rate, UnreadableJob, WatchFrame
from runner.cli.watch_view import ENDED_STATES, MAX_ENDED_JOBS, ended_count, left_out_line


def plain_lines(frame: WatchFrame, active_before: set[str], first: bool) -> list[str]:
    """The lines of one refresh: each job not ended; a job that ended since the last
    refresh (in ``active_before``), once; on the ``first`` refresh the last few ended
    jobs too, as the live view shows them, and how many the limit left out. A failed
    refresh is one line saying so."""
    when = _stamp(frame.snapshot.taken_on)
    if frame.error:
        return [f"refresh failed: {frame.error} (last read {when})"]
    jobs = frame.snapshot.jobs
    ended = [job for job in jobs if isinstance(job, JobStatus) and job.state in ENDED_STATES]
    recent = sorted(ended, key=lambda job: utc(job.updated_on) or "")[-MAX_ENDED_JOBS:]
    shown = [
        job
        for job in jobs
        if job.state not in ENDED_STATES or job.job_id in active_before or (first and job in recent)
    ]
    if not shown:
        count = ended_count(frame.snapshot.counts, len(ended))
        return [f"{when}  no job running" + (f" ({count:,} ended)" if count else "")]
    lines = [f"{when}  {job_line(job, frame.rates.get(job.job_id, Rate()))}" for job in shown]
    left_out = left_out_line(frame.snapshot.counts)
    if first and left_out:
        lines.append(f"{when}  {left_out}")
    return lines


def job_line(job: AnyJob, rate: Rate) -> str:
    """``copy-rows-1  running  56%  4/8 done  running 2  waiting 1  failed 1  poisoned 0
    0.25 chunks/s  ETA 14s``."""
    if isinstance(job, UnreadableJob):
        return f"{job.job_id}  unreadable: {job.error}"
    chunks = job.chunks
    fraction = job.progress_fraction
    if fraction is None:
        fraction = chunks.done / chunks.total if chunks.total else 0.0
    total = f"{chunks.total:,}" + ("" if job.planning_done else "+ (planning)")
    said = [
        job.job_id,
        job.state,
        f"{fraction:.0%}",
        f"{chunks.done:,}/{total} done",
        chunk_counts(job),
        *rate_words(job, rate),
    ]
    return "  ".join(said)


def active_jobs(frame: WatchFrame) -> set[str]:
    """The ids of the snapshot's jobs that have not ended."""
    return {job.job_id for job in frame.snapshot.jobs if job.state not in ENDED_STATES}


def _stamp(when: datetime) -> str:
    """``2026-11-25T17:20:12.000000Z``, as every output shows a time."""
    return utc(when)
