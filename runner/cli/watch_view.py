"""The live view of ``runner status --watch``, drawn from one snapshot.

:func:`render_watch` is a pure function: a frame (a
:func:`runner.cli.snapshot.read_snapshot` with the watcher's rates, a
:class:`runner.cli.status_types.WatchFrame`) in, a rich renderable out. Every time shown is
relative to the snapshot's own ``taken_on``, so the same snapshot always draws the same
view, and a test renders it to a recording console without a terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from runner.cli.json_form import utc
from runner.cli.pace import duration, rate_words
from runner.cli.render import chunk_counts
from runner.cli.status_types import (
    AnyJob,
    FailedTask,
    JobCounts,
    JobStatus,
    Rate,
    RunningChunk,
    UnreadableJob,
    WatchFrame,
    WorkerStatus,
)

#: How the states are coloured (a terminal only; recorded text has none).
STATE_STYLES = {
    "waiting": "yellow",
    "blocked": "red",
    "planning": "yellow",
    "running": "cyan",
    "finalizing": "cyan",
    "done": "green",
    "failed": "red",
    "cancelled": "red",
    "paused": "magenta",
    "unreadable": "red",
}
ENDED_STATES = ("done", "failed", "cancelled")
BAR_WIDTH = 40
#: Rows shown at most: running chunks per job, failed chunks per job, ended jobs, workers.
MAX_CHUNK_ROWS = 12
MAX_FAILED_ROWS = 3
MAX_ENDED_JOBS = 5
MAX_WORKER_ROWS = 20


def render_watch(frame: WatchFrame) -> RenderableType:
    """The whole view: a header, each active job, the last ended ones, the workers."""
    snapshot = frame.snapshot
    now = snapshot.taken_on
    jobs = snapshot.jobs
    active = [job for job in jobs if job.state not in ENDED_STATES]
    ended = [job for job in jobs if isinstance(job, JobStatus) and job.state in ENDED_STATES]
    parts: list[RenderableType] = [_header(frame, now)]
    if not jobs:
        parts.append(Text("no jobs", style="dim"))
    for job in active:
        parts.extend([_job(job, frame.rates.get(job.job_id, Rate()), now), Text("")])
    left_out = left_out_line(snapshot.counts)
    if left_out:
        parts.extend([Text(left_out, style="dim"), Text("")])
    if ended:
        parts.extend([_ended(ended, ended_count(snapshot.counts, len(ended))), Text("")])
    parts.append(_workers(snapshot.workers, now))
    if frame.error:
        parts.append(Text(f"last refresh failed: {frame.error}", style="red"))
    return Group(*parts)


def left_out_line(counts: JobCounts | None) -> str | None:
    """What the list's limit left out (``... 3 more active, older (raise --limit)``), or
    None when nothing was."""
    if counts is None or counts.left_out <= 0:
        return None
    return f"... {counts.left_out:,} more active, older (raise --limit)"


def _header(frame: WatchFrame, now: datetime) -> Text:
    header = Text("chunkrunner", style="bold")
    if frame.storage:
        header.append(f"  {frame.storage}")
    header.append(f"  {utc(now)}", style="dim")
    if frame.interval_seconds:
        header.append(f"  every {frame.interval_seconds:g} s, Ctrl-C to quit", style="dim")
    return header


# --------------------------------------------------------------------------- jobs


def _job(job: AnyJob, rate: Rate, now: datetime) -> RenderableType:
    if isinstance(job, UnreadableJob):
        return Text(f"{job.job_id}  unreadable: {job.error}", style="red")
    title = Text(job.job_id, style="bold")
    title.append(f"  {job.job_type}  ", style="dim")
    title.append_text(_state(job))
    rows: list[RenderableType] = [title, _bar_line(job, rate), Text(chunk_counts(job))]
    if job.finalize:
        rows.append(Text(f"finalize: {job.finalize}"))
    if job.error:
        rows.append(Text(f"error: {job.error}", style="red"))
    if job.running:
        rows.append(_running(job.running, now))
    for failed in job.failed[:MAX_FAILED_ROWS]:
        rows.append(_failed(failed, now))
    return Group(*rows)


def _failed(task: FailedTask, now: datetime) -> Text:
    """``failed #6 attempt 1 of 5, next try in 40s: ValueError: row 100``."""
    name = f"#{task.index}" if task.kind == "chunk" else task.kind
    of = f" of {task.max_attempts}" if task.max_attempts else ""
    return Text(
        f"failed {name} attempt {task.attempt}{of}{_next_try(task, now)}: "
        f"{task.error_type}: {task.error_message}",
        style="red",
        overflow="ellipsis",
        no_wrap=True,
    )


def _next_try(task: FailedTask, now: datetime) -> str:
    """``, next try in 40s``; once due, how long it has waited for a free worker."""
    if not task.retry_at:
        return ""
    left = (task.retry_at - now).total_seconds()
    if left <= 0 or task.retry_due:
        return f", next try due {duration(-left)} ago, waiting for a worker"
    return f", next try in {duration(left)}"


def _state(job: JobStatus) -> Text:
    state = job.state
    text = Text(state, style=STATE_STYLES.get(state, ""))
    if job.paused and state != "paused":
        text.append("  paused", style=STATE_STYLES["paused"])
    return text


def _bar_line(job: JobStatus, rate: Rate) -> Table:
    chunks = job.chunks
    fraction = job.progress_fraction
    if fraction is None:
        fraction = chunks.done / chunks.total if chunks.total else 0.0
    total = f"{chunks.total:,}" + ("" if job.planning_done else "+ (planning)")
    said = [f"{fraction:4.0%}", f"{chunks.done:,}/{total} done", *rate_words(job, rate)]
    line = Table.grid(padding=(0, 1))
    line.add_row(
        ProgressBar(total=1.0, completed=fraction, width=BAR_WIDTH),
        Text("  ".join(said)),
    )
    return line


def _running(running: Sequence[RunningChunk], now: datetime) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False)
    for column in ("chunk", "worker", "attempt", "progress", "lease left", "checkpoint"):
        table.add_column(column, style="dim" if column == "attempt" else "", no_wrap=True)
    for chunk in running[:MAX_CHUNK_ROWS]:
        table.add_row(
            f"#{chunk.index}",
            Text(str(chunk.worker or "?")),  # Text: no markup or :emoji: in ids
            str(chunk.attempt),
            _chunk_progress(chunk),
            _lease_left(chunk, now),
            _age(chunk.checkpoint_on, now, none="none yet"),
        )
    if len(running) > MAX_CHUNK_ROWS:
        table.add_row(f"... {len(running) - MAX_CHUNK_ROWS:,} more", "", "", "", "", "")
    return table


def _chunk_progress(chunk: RunningChunk) -> str:
    fraction = chunk.progress_fraction
    if fraction is None:  # the state itself, short, if the chunk said no fraction
        return "-" if chunk.progress is None else chunk.progress_text[:24]
    if chunk.progress_total is None:
        return f"{fraction:.0%}"
    return f"{fraction:.0%} ({_count(chunk.progress_done)}/{_count(chunk.progress_total)})"


def _lease_left(chunk: RunningChunk, now: datetime) -> Text:
    until = chunk.lease_until
    if not until:
        return Text("?")
    left = (until - now).total_seconds()
    if left <= 0 or chunk.lease_expired:
        return Text("expired", style="red")
    return Text(duration(left))


def ended_count(counts: JobCounts | None, listed: int) -> int:
    """The store's ended jobs, from the catalogue's ``counts`` (else the ``listed``)."""
    if counts is None:
        return listed
    return max(listed, sum(counts.by_state.get(state, 0) for state in ENDED_STATES))


def _ended(jobs: Sequence[JobStatus], count: int) -> Table:
    """The most recently updated ended jobs, a line each, of ``count`` ended jobs."""
    newest = sorted(jobs, key=_updated)[-MAX_ENDED_JOBS:]
    table = Table(box=None, padding=(0, 1), show_header=False, show_edge=False, pad_edge=False)
    for job in newest:
        chunks = job.chunks
        table.add_row(
            Text(job.job_id, style="bold"),
            _state(job),
            f"{chunks.done:,}/{chunks.total:,} done",
            f"poisoned {chunks.poisoned:,}" if chunks.poisoned else "",
        )
    if count > len(newest):
        table.add_row(Text(f"... {count - len(newest):,} more ended", style="dim"))
    return table


def _updated(job: JobStatus) -> str:
    """When the job last changed, to sort by (before any time, if it has none)."""
    return utc(job.updated_on) or ""


# --------------------------------------------------------------------------- workers


def _workers(workers: Sequence[WorkerStatus], now: datetime) -> RenderableType:
    """The live workers a row each; those stopped or gone within the hour the heartbeat
    table keeps them (a restarted fleet leaves dozens) are only counted."""
    ordered = sorted((w for w in workers if not w.gone), key=lambda w: w.worker_id)
    if not ordered:
        said = f"none live{_not_shown(workers)}" if workers else "none seen"
        return Text(f"workers: {said}", style="dim")
    table = Table(title="workers", title_justify="left", box=None, padding=(0, 1), pad_edge=False)
    for column in ("worker", "serves", "running", "state", "last seen", "up"):
        table.add_column(column, no_wrap=True)
    for worker in ordered[:MAX_WORKER_ROWS]:
        table.add_row(
            Text(worker.worker_id),  # host:100:ab1c is no :100: emoji
            Text(", ".join(worker.queues)),
            _load(worker),
            _worker_state(worker),
            _age(worker.seen_on, now, suffix=" ago"),
            _age(worker.started_on, now),
        )
    if len(ordered) > MAX_WORKER_ROWS:
        table.add_row(f"... {len(ordered) - MAX_WORKER_ROWS:,} more", "", "", "", "", "")
    rest = _not_shown(workers).removeprefix("; ")
    return Group(table, Text(rest, style="dim")) if rest else table


def _not_shown(workers: Sequence[WorkerStatus]) -> str:
    """``; 3 stopped and 1 gone in the last hour``, or nothing."""
    stopped = sum(1 for w in workers if w.state == "stopped")
    gone = sum(1 for w in workers if w.gone) - stopped
    said = [f"{count:,} {what}" for count, what in ((stopped, "stopped"), (gone, "gone")) if count]
    return f"; {' and '.join(said)} in the last hour" if said else ""


def _load(worker: WorkerStatus) -> str:
    return f"{worker.running}/{worker.concurrency}" if worker.running else "idle"


def _worker_state(worker: WorkerStatus) -> Text:
    return Text(worker.state, style="yellow" if worker.state == "stopping" else "green")


# --------------------------------------------------------------------------- words


def _age(when: datetime | None, now: datetime, none: str = "?", suffix: str = "") -> Text:
    if not when:
        return Text(none, style="dim")
    return Text(duration((now - when).total_seconds()) + suffix)


def _count(value: float | None) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"
