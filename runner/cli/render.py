"""``runner status`` and ``runner poison list`` for people: text with progress bars."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from checkpoint.records import CONTROL_WORDS, ENDED_JOB_STATES
from runner.cli.json_form import utc
from runner.cli.lease_view import lease_words
from runner.cli.limit_view import limit_line
from runner.cli.pace import moved_words, rate_words
from runner.cli.selection import DEFAULT_LISTING, Listing
from runner.cli.status import ReportRow
from runner.cli.status_types import (
    AnyJob,
    FailedTask,
    JobCounts,
    JobStatus,
    Rate,
    RunningChunk,
    UnreadableJob,
    WorkerStatus,
)
from runner.cli.tracebacks import user_traceback

BAR_CHARS = 30
#: Longest payload shown in a failure report (characters of its JSON).
PAYLOAD_CHARS = 120
#: Where ``runner report`` left the engine's frames out of a traceback.
FOLDED = "{n} engine frame(s) above your code left out: runner report --full shows them"
_STATE_COLORS = {
    "waiting": "33",
    "blocked": "31",
    "done": "32",
    "failed": "31",
    "running": "36",
    "finalizing": "36",
    "planning": "33",
    "cancelled": "35",
}


def bar(done: float, total: int, width: int = BAR_CHARS) -> str:
    """``[#########.....]  60%`` for done of total."""
    share = min(1.0, done / total) if total else 1.0
    filled = round(share * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {share:4.0%}"


def render_status(
    report: Sequence[AnyJob],
    color: bool = False,
    counts: JobCounts | None = None,
    listing: Listing = DEFAULT_LISTING,
    now: datetime | None = None,
) -> str:
    """The jobs of ``report``, then what the list left out (:func:`listing_line`) if
    ``counts`` are given; with ``now``, when each job last moved (``moved 12s ago``)."""
    left_out = listing_line(counts, listing) if counts else None
    if not report:
        if counts is None or not counts.total:
            return "no jobs"
        empty = "no active jobs" if not (listing.states or listing.every) else "no jobs"
        return empty + (f"; {left_out.removeprefix('and ')}" if left_out else "")
    shown = "\n\n".join(_group(group, color, now) for group in _by_pipeline(report))
    return shown + (f"\n\n{left_out}" if left_out else "")


def render_job(job: AnyJob, color: bool = False, now: datetime | None = None) -> str:
    """One job's block, as ``runner status JOB_ID`` shows it."""
    return _job(job, color, now)


def _by_pipeline(report: Sequence[AnyJob]) -> list[list[AnyJob]]:
    """The jobs in their order, each pipeline's steps gathered where its first one is
    (``runner status`` groups a pipeline's jobs); a job of none is a group of its own."""
    groups: list[list[AnyJob]] = []
    of_pipeline: dict[str, list[AnyJob]] = {}
    for job in report:
        pipeline = job.pipeline if isinstance(job, JobStatus) else None
        if pipeline is None:
            groups.append([job])
        elif pipeline in of_pipeline:
            of_pipeline[pipeline].append(job)
        else:
            of_pipeline[pipeline] = [job]
            groups.append(of_pipeline[pipeline])
    return groups


def _group(group: list[AnyJob], color: bool, now: datetime | None) -> str:
    """One job, or a pipeline's steps under a line naming it."""
    shown = "\n\n".join(_job(job, color, now) for job in group)
    first = group[0]
    if not isinstance(first, JobStatus) or first.pipeline is None:
        return shown
    steps = "step" if len(group) == 1 else "steps"
    head = (
        f"pipeline {first.pipeline} ({len(group)} {steps} shown; "
        f"runner status --pipeline {first.pipeline} shows them all)"
    )
    return f"{head}\n\n{shown}"


def listing_line(counts: JobCounts, listing: Listing) -> str | None:
    """One line for what a list leaves out: by default the ended jobs
    counted by state (``and 9,874 ended jobs: 9,800 done, 60 failed, 14 cancelled
    (runner status --all, or --state done)``); with ``--state``, ``--all`` or
    ``--limit``, how many more matched. None when nothing is left out."""
    lines = []
    if counts.left_out > 0:
        lines.append(f"and {counts.left_out:,} more, older (raise --limit)")
    ended = {state: counts.by_state.get(state, 0) for state in ENDED_JOB_STATES}
    ended = {state: number for state, number in ended.items() if number}
    total = sum(ended.values())
    if total and not (listing.states or listing.every):
        # A failed job is what a reader most wants to find; else the largest group.
        most = "failed" if "failed" in ended else max(ended, key=lambda state: ended[state])
        each = ", ".join(f"{number:,} {state}" for state, number in ended.items())
        jobs = "job" if total == 1 else "jobs"
        lines.append(f"and {total:,} ended {jobs}: {each} (runner status --all, or --state {most})")
    return "\n".join(lines) or None


def _job(job: AnyJob, color: bool, now: datetime | None = None) -> str:
    if isinstance(job, UnreadableJob):
        return f"{job.job_id}  unreadable: {job.error}"
    chunks = job.chunks
    state = job.state
    if color:
        state = f"\x1b[{_STATE_COLORS.get(state, '0')}m{state}\x1b[0m"
    if job.paused and job.state not in ("done", "failed", "cancelled"):
        drain = ", running chunks let finish" if job.drain else ""
        state += f" (paused since {utc(job.paused_on)}{drain}; `runner resume` continues)"
    total = f"{chunks.total:,}" + ("" if job.planning_done else "+ (planning)")
    shown_total = chunks.total if job.planning_done else chunks.total + 1
    priority = f"  priority {job.priority}" if job.priority else ""
    lines = [f"{job.job_id}  {job.job_type}  {state}{priority}"]
    planning = _planning_failure(job)
    if job.state in ("waiting", "blocked"):
        pass  # nothing planned yet: the lines below say what it waits for
    elif planning is None:
        # The state line says a pause already; the bar line says the pace.
        pace = [] if job.paused else rate_words(job, Rate(job.chunks_per_second, job.eta_seconds))
        pace += moved_words(job, now) if now is not None else []
        done = f"{chunks.done:,}/{total} done"
        lines.append("  ".join([f"  {bar(_done(job), shown_total)}", done, *pace]))
        lines.append("  " + chunk_counts(job))
    else:
        # Nothing was planned: a bar of 0/0 would hide the one thing to know.
        lines.append("  " + _planning_failed(planning, job.dropped))
    if job.pipeline:
        lines.append(f"  pipeline: {job.pipeline}")
    if job.blocked:
        lines.append(f"  {job.blocked}")
        lines.append(
            "  it starts once that job ends done (fix the cause, then runner poison redrive)"
        )
    elif job.waiting_on:
        lines.append(f"  waiting on: {', '.join(job.waiting_on)} (starts when they are done)")
    if job.finalize:
        lines.append(f"  finalize: {job.finalize}")
    if job.cancelled_on:
        why = job.cancel_reason or "no reason given"
        what = "cancelled" if job.state == "cancelled" else "remaining chunks cancelled"
        lines.append(f"  {what} on {utc(job.cancelled_on)}: {why}")
    if job.error and job.error != job.cancel_reason and planning is None:
        lines.append(f"  error: {job.error}")
    if job.redriving:
        lines.append(
            f"  a redrive is under way; if none is running, `runner poison redrive "
            f"{job.job_id}` again finishes it"
        )
    for chunk in job.running:
        expired = " (lease expired: worker gone?)" if chunk.lease_expired else ""
        # A fresh attempt's state is None until its first checkpoint is written.
        saved = (
            "no checkpoint yet"
            if chunk.progress is None and not chunk.progress_omitted
            else f"progress {chunk.progress_text}"
        )
        lines.append(
            f"  running #{chunk.index} on {chunk.worker} attempt {chunk.attempt}, "
            f"lease until {utc(chunk.lease_until)}{expired}, {saved}" + _said(chunk)
        )
    for task in job.failed:
        if task is planning:
            continue
        of = f" of {task.max_attempts}" if task.max_attempts else ""
        retry = _next_try(task.state, utc(task.retry_at), task.retry_due, dropped=job.dropped)
        lines.append(
            f"  failed  {_task_name(task.kind, task.index)} attempt {task.attempt}{of}{retry}: "
            f"{task.error_type}: {task.error_message}"
        )
    for task in job.poisoned:
        if task is planning:
            continue
        lines.append(
            f"  poisoned {_task_name(task.kind, task.index)} after {task.attempt} attempt(s)"
            f"{_final(task.retryable)}: {task.error_type}: {task.error_message}"
        )
    for bad in job.unreadable:
        lines.append(f"  unreadable: {bad.problem}")
    if job.workers and job.state not in ("done", "failed", "cancelled"):
        lines.append(f"  workers: {_workers(job.workers)}")
    for limit in job.limits:
        lines.append(f"  limit {limit_line(limit)}")
    if job.lease is not None:
        lines.append(f"  lease {lease_words(job.lease)}")
    return "\n".join(lines)


def planning_words(job: JobStatus) -> str | None:
    """What a job with no chunk yet says of its failing planning (:func:`_planning_failed`),
    or None: every view shows this instead of a bar of 0/0."""
    planning = _planning_failure(job)
    return None if planning is None else _planning_failed(planning, job.dropped)


def _planning_failure(job: JobStatus) -> FailedTask | None:
    """The failed (retrying) or poisoned planning of a job that has no chunk yet."""
    if job.planning_done or job.chunks.total:
        return None
    tasks = [*job.poisoned, *job.failed]
    return next((task for task in tasks if task.kind == "plan"), None)


def _planning_failed(task: FailedTask, dropped: bool) -> str:
    """``failed in planning after 5 attempt(s): KeyError: 'numbers'``, or while it
    retries ``planning failed (attempt 3 of 5), next try at T: ...``."""
    error = f"{task.error_type}: {task.error_message}"
    if task.state == "poisoned":
        final = _final(task.retryable)
        return f"failed in planning after {task.attempt} attempt(s){final}: {error}"
    of = f" of {task.max_attempts}" if task.max_attempts else ""
    retry = _next_try(task.state, utc(task.retry_at), task.retry_due, dropped=dropped)
    return f"planning failed (attempt {task.attempt}{of}){retry}: {error}"


def chunk_counts(job: JobStatus) -> str:
    """``running 2  waiting 1  failed 1  poisoned 0``; a job that drops its remaining
    chunks (cancelled) has none waiting: ``cancelled N`` counts them instead."""
    chunks = job.chunks
    middle = chunks.cancelled if job.dropped else chunks.waiting
    counted = (
        ("running", chunks.running),
        ("cancelled" if job.dropped else "waiting", middle),
        ("failed", chunks.failed),
        ("poisoned", chunks.poisoned),
    )
    return "  ".join(f"{name} {count:,}" for name, count in counted)


def _next_try(state: str, retry_at: str | None, retry_due: bool, dropped: bool = False) -> str:
    """``, next try at T``, ``, next try due since T (waiting for a worker)``, or, once
    its job drops its chunks (``dropped``: cancelled), that it is not retried."""
    if dropped and state == "retrying":
        return ", not retried (cancelled)"
    if retry_due:
        return f", next try due since {retry_at} (waiting for a worker)"
    if retry_at:
        return f", next try at {retry_at}"
    return ""


def _done(job: JobStatus) -> float:
    """Chunks done, counting the fractions running chunks said (for the bar)."""
    chunks, fraction = job.chunks, job.progress_fraction
    return float(fraction * chunks.total) if fraction is not None else float(chunks.done)


def _said(chunk: RunningChunk) -> str:
    """``, 43% done (430/1,000)`` when the chunk said how far it got."""
    fraction = chunk.progress_fraction
    if fraction is None:
        return ""
    if chunk.progress_total is None:
        return f", {fraction:.0%} done"
    done, total = chunk.progress_done, chunk.progress_total
    return f", {fraction:.0%} done ({done:,}/{total:,})"


def _workers(workers: Sequence[WorkerStatus]) -> str:
    """``w:1:ab (2 running), w:2:cd (idle); 1 gone``."""
    live = [w for w in workers if not w.gone]
    shown = [
        f"{w.worker_id} ({w.running} running)" if w.running else f"{w.worker_id} (idle)"
        for w in live
    ]
    gone = len(workers) - len(live)
    return (", ".join(shown) or "none live") + (f"; {gone} gone" if gone else "")


def render_poisoned(job_id: str, found: Sequence[FailedTask]) -> str:
    if not found:
        return f"{job_id}: no poisoned chunks"
    lines = [f"{job_id}: {len(found)} poisoned"]
    for task in found:
        lines.append(
            f"  {_task_name(task.kind, task.index)} after {task.attempt} attempt(s)"
            f"{_final(task.retryable)}: {task.error_type}: {task.error_message}"
        )
        if task.traceback:
            last = task.traceback.strip().splitlines()[-3:]
            lines.extend(f"      {line}" for line in last)
    return "\n".join(lines)


def render_report(job_id: str, entries: Iterable[ReportRow], full: bool = False) -> str:
    """The report's text; each traceback from the user's first frame unless ``full``
    (:mod:`runner.cli.tracebacks`)."""
    lines, count = [], 0
    for entry in entries:
        count += 1
        of = f" of {entry['max_attempts']}" if entry["max_attempts"] else ""
        retry = _next_try(entry["state"], entry["retry_at"], entry["retry_due"])
        lines.append(
            f"{_task_name(entry['kind'], entry['index'])} {entry['state']} after attempt "
            f"{entry['attempt']}{of}{_final(entry['retryable'])}{retry}"
        )
        if entry["payload_omitted"]:
            lines.append("  payload: (not shown: unreadable, or over 4 KiB as JSON)")
        elif entry["kind"] == "chunk":
            lines.append(f"  payload: {_short_json(entry['payload'])}")
        lines.append(f"  {entry['error_type']}: {entry['error_message']}")
        if entry["traceback"]:
            shown = entry["traceback"] if full else user_traceback(entry["traceback"], FOLDED)
            lines.extend(f"    {line}" for line in shown.rstrip().splitlines())
    if not count:
        return f"{job_id}: no failed or poisoned chunks"
    return "\n".join([f"{job_id}: {count} failed or poisoned", *lines])


def report_csv_row(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A report entry as a CSV row: a payload as its JSON text, booleans as in JSON
    (``true``, ``false``), null as an empty cell."""
    return {column: _csv_cell(value) for column, value in entry.items()}


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value


def _final(retryable: bool | None) -> str:
    """`` (not retryable)`` for a failure that will not get better by trying again."""
    return " (not retryable)" if retryable is False else ""


def _short_json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= PAYLOAD_CHARS else text[: PAYLOAD_CHARS - 3] + "..."


def _task_name(kind: str, index: int) -> str:
    if kind == "chunk":
        return f"chunk #{index}"
    return CONTROL_WORDS[kind]
