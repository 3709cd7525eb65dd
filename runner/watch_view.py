"""The live view of ``runner status --watch``, drawn from one snapshot.

:func:`render_watch` is a pure function: a snapshot (:func:`runner.snapshot.read_snapshot`,
with the watcher's ``rates`` added) in, a rich renderable out. Every time shown is
relative to the snapshot's own ``taken_on``, so the same snapshot always draws the same
view, and a test renders it to a recording console without a terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

#: How the states are coloured (a terminal only; recorded text has none).
STATE_STYLES = {
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


def render_watch(snapshot: Mapping[str, Any]) -> RenderableType:
    """The whole view: a header, each active job, the last ended ones, the workers."""
    now = _when(snapshot["taken_on"])
    jobs = list(snapshot.get("jobs", []))
    active = [job for job in jobs if job.get("state") not in ENDED_STATES]
    ended = [job for job in jobs if job.get("state") in ENDED_STATES]
    rates = snapshot.get("rates", {})
    parts: list[RenderableType] = [_header(snapshot, now)]
    if not jobs:
        parts.append(Text("no jobs", style="dim"))
    for job in active:
        parts.extend([_job(job, rates.get(job.get("job_id"), {}), now), Text("")])
    if ended:
        parts.extend([_ended(ended), Text("")])
    parts.append(_workers(snapshot.get("workers", []), now))
    if snapshot.get("error"):
        parts.append(Text(f"last refresh failed: {snapshot['error']}", style="red"))
    return Group(*parts)


def _header(snapshot: Mapping[str, Any], now: datetime) -> Text:
    header = Text("chunkrunner", style="bold")
    if snapshot.get("storage"):
        header.append(f"  {snapshot['storage']}")
    header.append(f"  {now.strftime('%Y-%m-%d %H:%M:%S')} UTC", style="dim")
    if snapshot.get("interval_seconds"):
        header.append(f"  every {snapshot['interval_seconds']:g} s, Ctrl-C to quit", style="dim")
    return header


# --------------------------------------------------------------------------- jobs


def _job(job: Mapping[str, Any], rate: Mapping[str, Any], now: datetime) -> RenderableType:
    if job.get("state") == "unreadable":
        return Text(f"{job['job_id']}  unreadable: {job.get('error')}", style="red")
    chunks = job["chunks"]
    title = Text(job["job_id"], style="bold")
    title.append(f"  {job.get('job_type', '')}  ", style="dim")
    title.append_text(_state(job))
    rows: list[RenderableType] = [title, _bar_line(job, rate)]
    rows.append(
        Text(
            "  ".join(
                f"{name} {chunks[name]:,}" for name in ("running", "waiting", "failed", "poisoned")
            )
        )
    )
    if job.get("finalize"):
        rows.append(Text(f"finalize: {job['finalize']}"))
    if job.get("error"):
        rows.append(Text(f"error: {job['error']}", style="red"))
    if job.get("running"):
        rows.append(_running(job["running"], now))
    for failed in job.get("failed", [])[:MAX_FAILED_ROWS]:
        rows.append(_failed(failed, now))
    return Group(*rows)


def _failed(task: Mapping[str, Any], now: datetime) -> Text:
    """``failed #6 attempt 1 of 5, next try in 40s: ValueError: row 100``."""
    name = f"#{task['index']}" if task.get("kind", "chunk") == "chunk" else task["kind"]
    of = f" of {task['max_attempts']}" if task.get("max_attempts") else ""
    retry = ""
    if task.get("retry_at"):
        retry = f", next try in {duration((_when(task['retry_at']) - now).total_seconds())}"
    return Text(
        f"failed {name} attempt {task['attempt']}{of}{retry}: "
        f"{task.get('error_type')}: {task.get('error_message')}",
        style="red",
        overflow="ellipsis",
        no_wrap=True,
    )


def _state(job: Mapping[str, Any]) -> Text:
    state = str(job.get("state"))
    text = Text(state, style=STATE_STYLES.get(state, ""))
    if job.get("paused") and state != "paused":
        text.append("  paused", style=STATE_STYLES["paused"])
    return text


def _bar_line(job: Mapping[str, Any], rate: Mapping[str, Any]) -> Table:
    chunks = job["chunks"]
    fraction = job.get("progress_fraction")
    if fraction is None:
        fraction = chunks["done"] / chunks["total"] if chunks["total"] else 0.0
    total = f"{chunks['total']:,}" + ("" if job.get("planning_done", True) else "+ (planning)")
    said = [f"{fraction:4.0%}", f"{chunks['done']:,}/{total} done"]
    speed = rate.get("chunks_per_second")
    if speed is not None and fraction < 1:
        said.append(f"{speed:.2f} chunks/s")
    eta = rate.get("eta_seconds")
    if eta is not None and job.get("state") not in ENDED_STATES:
        said.append(f"ETA {duration(eta)}")
    line = Table.grid(padding=(0, 1))
    line.add_row(
        ProgressBar(total=1.0, completed=fraction, width=BAR_WIDTH),
        Text("  ".join(said)),
    )
    return line


def _running(running: list[Mapping[str, Any]], now: datetime) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False)
    for column in ("chunk", "worker", "attempt", "progress", "lease left", "checkpoint"):
        table.add_column(column, style="dim" if column == "attempt" else "", no_wrap=True)
    for chunk in running[:MAX_CHUNK_ROWS]:
        table.add_row(
            f"#{chunk['index']}",
            str(chunk.get("worker") or "?"),
            str(chunk.get("attempt")),
            _chunk_progress(chunk),
            _lease_left(chunk, now),
            _age(chunk.get("checkpoint_on"), now, none="none yet"),
        )
    if len(running) > MAX_CHUNK_ROWS:
        table.add_row(f"... {len(running) - MAX_CHUNK_ROWS:,} more", "", "", "", "", "")
    return table


def _chunk_progress(chunk: Mapping[str, Any]) -> str:
    fraction = chunk.get("progress_fraction")
    if fraction is None:  # the state itself, short, if the chunk said no fraction
        return "-" if chunk.get("progress") is None else str(chunk.get("progress_text"))[:24]
    if chunk.get("progress_total") is None:
        return f"{fraction:.0%}"
    return f"{fraction:.0%} ({_count(chunk['progress_done'])}/{_count(chunk['progress_total'])})"


def _lease_left(chunk: Mapping[str, Any], now: datetime) -> Text:
    until = chunk.get("lease_until")
    if not until:
        return Text("?")
    left = (_when(until) - now).total_seconds()
    if left <= 0 or chunk.get("lease_expired"):
        return Text("expired", style="red")
    return Text(duration(left))


def _ended(jobs: list[Mapping[str, Any]]) -> Table:
    """The most recently updated ended jobs, a line each."""
    newest = sorted(jobs, key=lambda job: job.get("updated_on") or "")[-MAX_ENDED_JOBS:]
    table = Table(box=None, padding=(0, 1), show_header=False, show_edge=False, pad_edge=False)
    for job in newest:
        chunks = job["chunks"]
        table.add_row(
            Text(job["job_id"], style="bold"),
            _state(job),
            f"{chunks['done']:,}/{chunks['total']:,} done",
            f"poisoned {chunks['poisoned']:,}" if chunks["poisoned"] else "",
        )
    if len(jobs) > MAX_ENDED_JOBS:
        table.add_row(Text(f"... {len(jobs) - MAX_ENDED_JOBS:,} more ended", style="dim"))
    return table


# --------------------------------------------------------------------------- workers


def _workers(workers: list[Mapping[str, Any]], now: datetime) -> RenderableType:
    if not workers:
        return Text("workers: none seen", style="dim")
    # Live ones first, then the gone, each in id order.
    ordered = sorted(workers, key=lambda w: (bool(w.get("gone")), str(w.get("worker_id"))))
    table = Table(title="workers", title_justify="left", box=None, padding=(0, 1), pad_edge=False)
    for column in ("worker", "serves", "running", "state", "last seen", "up"):
        table.add_column(column, no_wrap=True)
    for worker in ordered[:MAX_WORKER_ROWS]:
        table.add_row(
            str(worker["worker_id"]),
            ", ".join(worker.get("queues", [])),
            _load(worker),
            _worker_state(worker),
            _age(worker.get("seen_on"), now, suffix=" ago"),
            _age(worker.get("started_on"), now),
        )
    if len(ordered) > MAX_WORKER_ROWS:
        table.add_row(f"... {len(ordered) - MAX_WORKER_ROWS:,} more", "", "", "", "", "")
    return table


def _load(worker: Mapping[str, Any]) -> str:
    if worker.get("gone"):
        return "-"
    running = worker.get("running", 0)
    return f"{running}/{worker.get('concurrency', '?')}" if running else "idle"


def _worker_state(worker: Mapping[str, Any]) -> Text:
    state = str(worker.get("state"))
    if state == "stopped":
        return Text("stopped", style="dim")
    if worker.get("gone"):
        return Text("gone", style="red")
    return Text(state, style="yellow" if state == "stopping" else "green")


# --------------------------------------------------------------------------- words


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


def _age(when: str | None, now: datetime, none: str = "?", suffix: str = "") -> Text:
    if not when:
        return Text(none, style="dim")
    return Text(duration((now - _when(when)).total_seconds()) + suffix)


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


def _when(iso: str) -> datetime:
    return datetime.fromisoformat(iso)
