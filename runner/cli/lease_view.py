"""The job types' adaptive leases as ``runner lease``, ``runner status`` and the dashboard
show them: each type's shared row (:mod:`checkpoint.lease_book`) read as the workers read
it (:class:`~runner.worker.leases.learned.LearnedLease`), as a typed value
(:class:`LeaseStatus`), and its text.

A row nobody can read (garbled by hand, or by another version) is shown as unreadable
with the reason, never left out: it is the one its workers are starting again from the
class's bounds for.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from checkpoint.errors import BadRecord
from checkpoint.lease_book import LeaseBook
from checkpoint.storage import Record
from checkpoint.store import CheckpointStore
from runner.cli.status_types import AnyJob, JobStatus, LeaseStatus
from runner.worker.leases.learned import LearnedLease


def read_leases(store: CheckpointStore, now: datetime) -> tuple[LeaseStatus, ...]:
    """Every job type's lease in the store (one query), by job type."""
    store.ensure()
    rows = LeaseBook(store.storage.records).scan(store.budget())
    return tuple(sorted((lease_status(row, now) for row in rows), key=lambda s: s.job_type))


def read_lease(store: CheckpointStore, job_type: str, now: datetime) -> LeaseStatus | None:
    """``job_type``'s lease, None when its type has no row."""
    store.ensure()
    row = LeaseBook(store.storage.records).read(job_type, store.budget())
    return None if row is None else lease_status(row, now)


def lease_status(row: Record, now: datetime) -> LeaseStatus:
    """A type's row as of ``now`` (its row key is the job type)."""
    job_type = row.row_key
    try:
        if row.unreadable is not None:
            raise BadRecord(f"learned lease of {job_type}: {row.unreadable}")
        learned = LearnedLease.from_record(job_type, row)
    except BadRecord as bad:
        return LeaseStatus(job_type, "unreadable", *(None,) * 8, error=str(bad))
    return learned_status(learned, now)


def learned_status(learned: LearnedLease, now: datetime) -> LeaseStatus:
    return LeaseStatus(
        job_type=learned.job_type,
        state="learned" if learned.pinned_seconds is None else "pinned",
        lease_seconds=learned.in_force,
        learned_seconds=learned.lease_seconds,
        pinned_seconds=learned.pinned_seconds,
        low_seconds=round(learned.bounds.low_seconds),
        high_seconds=round(learned.bounds.high_seconds),
        lateness_percentile_seconds=learned.lateness_percentile_seconds,
        lateness_samples=learned.lateness.samples,
        lost_last_hour=learned.lost_in_last_hour(now),
    )


def with_leases(report: list[AnyJob], leases: tuple[LeaseStatus, ...]) -> list[AnyJob]:
    """Each readable job's report with its type's lease, if its type has a row."""
    by_type = {lease.job_type: lease for lease in leases}
    return [
        replace(job, lease=by_type.get(job.job_type)) if isinstance(job, JobStatus) else job
        for job in report
    ]


def lease_words(lease: LeaseStatus) -> str:
    """``42 s (learned, bounds 10-600 s)  lateness p99.9 2 s of 3,400 renewals  1 lost in
    the last hour``; a pin says what was learned too; an unreadable row why."""
    if lease.state == "unreadable":
        return f"unreadable: {lease.error}"
    if lease.state == "pinned":
        how = f"pinned; learned {lease.learned_seconds} s"
    else:
        how = "learned"
    samples = lease.lateness_samples or 0
    if samples:
        renewals = "renewal" if samples == 1 else "renewals"
        lateness = (
            f"lateness p99.9 {lease.lateness_percentile_seconds:g} s of {samples:,} {renewals}"
        )
    else:
        lateness = "no renewal reported yet"
    bounds = f"{lease.low_seconds}-{lease.high_seconds} s"
    lost = f"{lease.lost_last_hour:,} lost in the last hour"
    return f"{lease.lease_seconds} s ({how}, bounds {bounds})  {lateness}  {lost}"


def lease_line(lease: LeaseStatus) -> str:
    """``runner lease``'s line of one type: its name, then :func:`lease_words`."""
    return f"{lease.job_type}  {lease_words(lease)}"


def render_leases(leases: tuple[LeaseStatus, ...]) -> str:
    if not leases:
        return "no learned or pinned leases (workers of adaptive types write them as they renew)"
    return "\n".join(lease_line(lease) for lease in leases)
