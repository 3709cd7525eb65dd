"""What ``runner status`` and ``runner poison`` report, read from the checkpoint store.

Azure cannot list invisible messages; the checkpoint store can say which chunks are
done, running (by whom, lease until when, how far), waiting, failed and retrying, or
poisoned — so status reads records, never queues.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from checkpoint.records import JobRecord, TaskRecord
from checkpoint.store import CheckpointStore
from jobs.errors import NotFound

#: Longest progress text shown per running chunk.
PROGRESS_CHARS = 80
#: Largest state given as a value in ``--json`` (as JSON text); larger ones are omitted.
PROGRESS_JSON_BYTES = 4096


def job_status(store: CheckpointStore, job: JobRecord, now: datetime) -> dict[str, Any]:
    """One job's state, chunk counts and running / failed chunks, JSON-ready."""
    counts = store.counts(job.job_id)
    running = list(store.chunks(job.job_id, ("running",)))
    retrying = list(store.chunks(job.job_id, ("retrying",)))
    planned = _planned(store, job)
    total = job.total if job.total is not None else planned
    settled = counts["done"] + counts["poisoned"] + len(running) + len(retrying)
    return {
        "job_id": job.job_id,
        "job_type": job.job_type,
        "queue": job.queue,
        "state": job.state,
        "error": job.error,
        "created_on": _iso(job.created_on),
        "updated_on": _iso(job.updated_on),
        "planning_done": job.total is not None,
        "chunks": {
            "total": total,
            "done": counts["done"],
            "running": len(running),
            "waiting": max(0, total - settled),
            "failed": len(retrying),
            "poisoned": counts["poisoned"],
        },
        "running": [_running(store, task, now) for task in running],
        "failed": [_failed(task) for task in retrying],
        "poisoned": poisoned_chunks(store, job.job_id)
        if counts["poisoned"] or job.state == "failed"
        else [],
        "finalize": _task_state(store, job.job_id, "final"),
    }


def poisoned_chunks(store: CheckpointStore, job_id: str) -> list[dict[str, Any]]:
    """Poisoned chunks of a job with their last error (planning / finalize included)."""
    return [_failed(task) for task in store.poisoned_tasks(job_id)]


def _planned(store: CheckpointStore, job: JobRecord) -> int:
    try:
        plan = store.get_task(job.job_id, "plan", 0)
    except NotFound:
        return 0
    return int(store.value(plan.properties, "progress") or 0)


def _task_state(store: CheckpointStore, job_id: str, kind: str) -> str | None:
    try:
        return store.get_task(job_id, kind, 0).state  # type: ignore[arg-type]
    except NotFound:
        return None


def _running(store: CheckpointStore, task: TaskRecord, now: datetime) -> dict[str, Any]:
    progress = store.value(task.properties, "progress")
    text = repr(progress)
    value = _as_json(progress)
    return {
        "index": task.index,
        "worker": task.owner,
        "attempt": task.attempt,
        "lease_until": _iso(task.lease_until),
        "lease_expired": task.lease_until is not None and task.lease_until <= now,
        "progress": value,
        "progress_omitted": value is None and progress is not None,
        "progress_text": text
        if len(text) <= PROGRESS_CHARS
        else text[: PROGRESS_CHARS - 3] + "...",
    }


def _as_json(value: Any) -> Any:
    """``value`` if it is plain JSON (str keys; no bytes, no datetimes) of at most
    :data:`PROGRESS_JSON_BYTES`, else None: tools get the state itself, or nothing."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    if len(text.encode("utf-8")) > PROGRESS_JSON_BYTES or json.loads(text) != value:
        return None  # too large, or changed on the way (tuples, int keys ...)
    return value


def _failed(task: TaskRecord) -> dict[str, Any]:
    error = task.error or {}
    return {
        "kind": task.kind,
        "index": task.index,
        "attempt": task.attempt,
        "state": task.state,
        "error_type": error.get("type"),
        "error_message": error.get("message"),
        "traceback": error.get("traceback"),
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
