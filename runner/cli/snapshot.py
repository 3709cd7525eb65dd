"""Everything ``runner status`` shows, read at once: the jobs (:mod:`runner.cli.status`) and
the workers, from their heartbeats (:mod:`checkpoint.workers`).

A job's report lists the workers serving its queue (``workers``); ``runner status
--watch`` renders a whole :func:`read_snapshot` per refresh.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from checkpoint.errors import BadRecord
from checkpoint.records import JobRecord
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook, WorkerRecord
from runner.cli.json_form import utc
from runner.cli.selection import select_jobs
from runner.cli.status import job_status, unreadable_job


def read_report(
    store: CheckpointStore,
    job_id: str | None = None,
    workers: list[dict[str, Any]] | None = None,
    *,
    states: Collection[str] = (),
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The status of one job (``job_id``) or of every job (newest first, only those in
    ``states`` if given, at most ``limit``: :func:`runner.cli.selection.select_jobs`), each
    with the workers serving it (from ``workers`` if given, else read now).

    Raises:
        JobNotFound: there is no job ``job_id``.
    """
    found = (
        [(job_id, _job_or_bad(store, job_id))]
        if job_id
        else select_jobs(store.scan_jobs(), states, limit)
    )
    now = store.clock.now()
    report = [
        unreadable_job(found_id, job) if isinstance(job, BadRecord) else job_status(store, job, now)
        for found_id, job in found
    ]
    return with_workers(report, read_workers(store, now) if workers is None else workers)


def read_snapshot(store: CheckpointStore, job_id: str | None = None) -> dict[str, Any]:
    """What ``--watch`` shows at one refresh: ``taken_on``, ``jobs`` (as
    :func:`read_report`) and ``workers`` (every worker seen in the last hour)."""
    now = store.clock.now()
    workers = read_workers(store, now)
    jobs = read_report(store, job_id, workers)
    if job_id and "workers" in jobs[0]:
        workers = jobs[0]["workers"]  # one job watched: the workers serving it
    return {"taken_on": utc(now), "jobs": jobs, "workers": workers}


def read_workers(store: CheckpointStore, now: datetime) -> list[dict[str, Any]]:
    """Every worker with a heartbeat record, JSON-ready, in worker id order (a record
    that cannot be read is left out: its worker rewrites it within seconds)."""
    store.ensure()
    found = WorkerBook(store.storage.records).scan(store.budget())
    return [worker_status(w, now) for w in found if isinstance(w, WorkerRecord)]


def worker_status(worker: WorkerRecord, now: datetime) -> dict[str, Any]:
    """One worker as ``--json`` shows it."""
    return {
        "worker_id": worker.worker_id,
        "host": worker.host,
        "pid": worker.pid,
        "queues": list(worker.queues),
        "job_types": list(worker.job_types),
        "concurrency": worker.concurrency,
        "running": worker.running,
        "tasks": list(worker.tasks),
        "state": worker.state,
        "gone": worker.gone(now),
        "started_on": utc(worker.started_on),
        "seen_on": utc(worker.seen_on),
        "seen_ago_seconds": round(max(0.0, (now - worker.seen_on).total_seconds()), 1),
        "beat_seconds": worker.beat_seconds,
    }


def with_workers(
    report: list[dict[str, Any]], workers: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each readable job's report with ``workers``: those whose heartbeat says they
    serve its queue."""
    for job in report:
        if "queue" in job:
            job["workers"] = [w for w in workers if job["queue"] in w["queues"]]
    return report


def _job_or_bad(store: CheckpointStore, job_id: str) -> JobRecord | BadRecord:
    """The job, or why its record cannot be read (status shows that, not a traceback)."""
    try:
        return store.get_job(job_id)
    except BadRecord as bad:
        return bad
