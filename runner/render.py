"""``runner status`` and ``runner poison list`` for people: text with progress bars."""

from __future__ import annotations

from typing import Any

BAR_CHARS = 30
_STATE_COLORS = {
    "done": "32",
    "failed": "31",
    "running": "36",
    "finalizing": "36",
    "planning": "33",
}


def bar(done: float, total: int, width: int = BAR_CHARS) -> str:
    """``[#########.....]  60%`` for done of total."""
    share = min(1.0, done / total) if total else 1.0
    filled = round(share * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {share:4.0%}"


def render_status(report: list[dict[str, Any]], color: bool = False) -> str:
    if not report:
        return "no jobs"
    return "\n\n".join(_job(job, color) for job in report)


def _job(job: dict[str, Any], color: bool) -> str:
    if job["state"] == "unreadable":
        return f"{job['job_id']}  unreadable: {job['error']}"
    chunks = job["chunks"]
    state = job["state"]
    if color:
        state = f"\x1b[{_STATE_COLORS.get(state, '0')}m{state}\x1b[0m"
    total = f"{chunks['total']:,}" + ("" if job["planning_done"] else "+ (planning)")
    shown_total = chunks["total"] if job["planning_done"] else chunks["total"] + 1
    lines = [
        f"{job['job_id']}  {job['job_type']}  {state}",
        f"  {bar(_done(job), shown_total)}  {chunks['done']:,}/{total} done",
        "  "
        + "  ".join(
            f"{name} {chunks[name]:,}" for name in ("running", "waiting", "failed", "poisoned")
        ),
    ]
    if job["finalize"]:
        lines.append(f"  finalize: {job['finalize']}")
    if job["error"]:
        lines.append(f"  error: {job['error']}")
    for chunk in job["running"]:
        expired = " (lease expired: worker gone?)" if chunk["lease_expired"] else ""
        lines.append(
            f"  running #{chunk['index']} on {chunk['worker']} attempt {chunk['attempt']}, "
            f"lease until {chunk['lease_until']}{expired}, progress {chunk['progress_text']}"
            + _said(chunk)
        )
    for chunk in job["failed"]:
        lines.append(
            f"  failed  #{chunk['index']} attempt {chunk['attempt']}: "
            f"{chunk['error_type']}: {chunk['error_message']}"
        )
    for task in job.get("poisoned", []):
        lines.append(
            f"  poisoned {_task_name(task)} after {task['attempt']} attempt(s): "
            f"{task['error_type']}: {task['error_message']}"
        )
    for bad in job.get("unreadable", []):
        lines.append(f"  unreadable: {bad['problem']}")
    if job.get("workers") and job["state"] not in ("done", "failed", "cancelled"):
        lines.append(f"  workers: {_workers(job['workers'])}")
    return "\n".join(lines)


def _done(job: dict[str, Any]) -> float:
    """Chunks done, counting the fractions running chunks said (for the bar)."""
    chunks, fraction = job["chunks"], job.get("progress_fraction")
    return float(fraction * chunks["total"]) if fraction is not None else float(chunks["done"])


def _said(chunk: dict[str, Any]) -> str:
    """``, 43% done (430/1,000)`` when the chunk said how far it got."""
    fraction = chunk.get("progress_fraction")
    if fraction is None:
        return ""
    if chunk.get("progress_total") is None:
        return f", {fraction:.0%} done"
    done, total = chunk["progress_done"], chunk["progress_total"]
    return f", {fraction:.0%} done ({done:,}/{total:,})"


def _workers(workers: list[dict[str, Any]]) -> str:
    """``w:1:ab (2 running), w:2:cd (idle); 1 gone``."""
    live = [w for w in workers if not w["gone"]]
    shown = [
        f"{w['worker_id']} ({w['running']} running)" if w["running"] else f"{w['worker_id']} (idle)"
        for w in live
    ]
    gone = len(workers) - len(live)
    return (", ".join(shown) or "none live") + (f"; {gone} gone" if gone else "")


def render_poisoned(job_id: str, found: list[dict[str, Any]]) -> str:
    if not found:
        return f"{job_id}: no poisoned chunks"
    lines = [f"{job_id}: {len(found)} poisoned"]
    for task in found:
        lines.append(
            f"  {_task_name(task)} after {task['attempt']} attempt(s): "
            f"{task['error_type']}: {task['error_message']}"
        )
        if task.get("traceback"):
            last = task["traceback"].strip().splitlines()[-3:]
            lines.extend(f"      {line}" for line in last)
    return "\n".join(lines)


def _task_name(task: dict[str, Any]) -> str:
    return f"chunk #{task['index']}" if task["kind"] == "chunk" else task["kind"]
