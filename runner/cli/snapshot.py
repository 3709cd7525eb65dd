"""Everything ``runner status`` shows, read at once: the jobs (:mod:`runner.cli.status`) and
the workers, from their heartbeats (:mod:`checkpoint.workers`).

A job's report lists the workers serving its queues (``workers``); ``runner status
--watch`` renders a whole :func:`read_snapshot` per refresh.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from checkpoint.errors import BadRecord, JobNotFound
from checkpoint.records import JobRecord
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook, WorkerRecord
from runner.cli.lease_view import read_leases, with_leases
from runner.cli.limit_view import read_limits, with_limits
from runner.cli.selection import (
    DEFAULT_LISTING,
    Listing,
    reads_index,
    select_indexed,
    select_jobs,
)
from runner.cli.status import job_status, unreadable_job
from runner.cli.status_types import AnyJob, JobCounts, JobStatus, Snapshot, WorkerStatus


def read_report(
    store: CheckpointStore,
    job_id: str | None = None,
    workers: tuple[WorkerStatus, ...] | None = None,
    *,
    listing: Listing = DEFAULT_LISTING,
) -> list[AnyJob]:
    """The status of one job (``job_id``) or of the jobs ``listing`` chooses (by
    default the active ones, newest first: :mod:`runner.cli.selection`), each with the
    workers serving it (from ``workers`` if given, else read now).

    Raises:
        JobNotFound: there is no job ``job_id``.
    """
    if job_id:
        return _reports(store, [(job_id, _job_or_bad(store, job_id))], workers)
    return read_listed(store, listing, workers)[0]


def read_listed(
    store: CheckpointStore,
    listing: Listing = DEFAULT_LISTING,
    workers: tuple[WorkerStatus, ...] | None = None,
) -> tuple[list[AnyJob], JobCounts]:
    """The status of the jobs ``listing`` chooses, and every job counted by state.

    The choice is made on the catalogue's index (one range query) for the active jobs,
    else on the catalogue's three columns; only the jobs chosen are read in full, so the
    cost follows the page shown. A job deleted since the choice was made is left out, and
    so is one the index lists in a state its record has left (an earlier version's
    process ended it, leaving its active row)."""
    index = store.read_index() if reads_index(listing) else None
    if index is not None:
        chosen, counts = select_indexed(index, listing)
        recent = {entry.job_id for entry in index.recent}
    else:
        chosen, counts = select_jobs(store.scan_catalogue(), listing)
        recent = set(chosen)  # chosen on the records' own states
    found: list[tuple[str, JobRecord | BadRecord]] = []
    for found_id in chosen:
        try:
            job = _job_or_bad(store, found_id)
        except JobNotFound:
            continue
        if isinstance(job, BadRecord) or job.state in listing.wanted or found_id in recent:
            found.append((found_id, job))
    return _reports(store, found, workers), counts


def read_snapshot(
    store: CheckpointStore, job_id: str | None = None, listing: Listing = DEFAULT_LISTING
) -> Snapshot:
    """What ``--watch`` shows at one refresh: ``taken_on``, ``jobs`` (as
    :func:`read_report`), ``workers`` (every worker seen in the last hour) and, for a
    list, ``counts``."""
    now = store.clock.now()
    workers = read_workers(store, now)
    if job_id:
        jobs = read_report(store, job_id, workers)
        if isinstance(jobs[0], JobStatus):
            workers = jobs[0].workers  # one job watched: the workers serving it
        return Snapshot(taken_on=now, jobs=tuple(jobs), workers=workers)
    listed, counts = read_listed(store, listing, workers)
    return Snapshot(taken_on=now, jobs=tuple(listed), workers=workers, counts=counts)


def _reports(
    store: CheckpointStore,
    found: list[tuple[str, JobRecord | BadRecord]],
    workers: tuple[WorkerStatus, ...] | None,
) -> list[AnyJob]:
    now = store.clock.now()
    report: list[AnyJob] = [
        unreadable_job(found_id, job) if isinstance(job, BadRecord) else job_status(store, job, now)
        for found_id, job in found
    ]
    report = with_limits(report, read_limits(store, now))
    if any(isinstance(job, JobStatus) for job in report):  # (the workers page reads none)
        report = with_leases(report, read_leases(store, now))
    return with_workers(report, read_workers(store, now) if workers is None else workers)


def read_workers(store: CheckpointStore, now: datetime) -> tuple[WorkerStatus, ...]:
    """Every worker with a heartbeat record, in worker id order (a record that cannot be
    read is left out: its worker rewrites it within seconds)."""
    store.ensure()
    found = WorkerBook(store.storage.records).scan(store.budget())
    return tuple(worker_status(w, now) for w in found if isinstance(w, WorkerRecord))


def worker_status(worker: WorkerRecord, now: datetime) -> WorkerStatus:
    """One worker as of ``now``."""
    return WorkerStatus(
        worker_id=worker.worker_id,
        host=worker.host,
        pid=worker.pid,
        queues=worker.queues,
        job_types=worker.job_types,
        concurrency=worker.concurrency,
        running=worker.running,
        tasks=worker.tasks,
        state=worker.state,
        gone=worker.gone(now),
        started_on=worker.started_on,
        seen_on=worker.seen_on,
        seen_ago_seconds=round(max(0.0, (now - worker.seen_on).total_seconds()), 1),
        beat_seconds=worker.beat_seconds,
    )


def with_workers(report: list[AnyJob], workers: tuple[WorkerStatus, ...]) -> list[AnyJob]:
    """Each readable job's report with ``workers``: those whose heartbeat says they
    serve one of its queues."""
    return [
        replace(job, workers=tuple(w for w in workers if not set(job.queues).isdisjoint(w.queues)))
        if isinstance(job, JobStatus)
        else job
        for job in report
    ]


def _job_or_bad(store: CheckpointStore, job_id: str) -> JobRecord | BadRecord:
    """The job, or why its record cannot be read (status shows that, not a traceback)."""
    try:
        return store.get_job(job_id)
    except BadRecord as bad:
        return bad
