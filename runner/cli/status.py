"""What ``runner status`` and ``runner poison`` report, read from the checkpoint store.

Azure cannot list invisible messages; the checkpoint store can say which chunks are
done, running (by whom, lease until when, how far), waiting, failed and retrying, or
poisoned — so status reads records, never queues.

A record that cannot be read (garbled by another version or a hand edit) never stops a
report: it is listed under ``unreadable`` with what is wrong, and the rest is shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, TypedDict, cast

from checkpoint import checks
from checkpoint.errors import BadRecord, NotFound
from checkpoint.records import (
    CHECKPOINT_ON,
    CONTROL_KINDS,
    PROGRESS_FRACTION,
    JobRecord,
    Progress,
    TaskKind,
    TaskRecord,
)
from checkpoint.storage import Where
from checkpoint.store import CheckpointStore
from jobs import dependencies
from runner.cli.json_form import bounded_user_value, to_json, user_text
from runner.cli.pace import last_moved, stored_rate
from runner.cli.status_types import (
    ChunkCounts,
    FailedTask,
    JobStatus,
    RunningChunk,
    Unreadable,
    UnreadableJob,
)

#: Longest progress text shown per running chunk.
PROGRESS_CHARS = 80


def job_status(store: CheckpointStore, job: JobRecord, now: datetime) -> JobStatus:
    """One job's state, chunk counts and running / failed chunks (no workers: those are
    :func:`runner.cli.snapshot.with_workers`'s)."""
    bad: list[Unreadable] = []
    # With its total known, only the shards holding the job's chunks are read (one for a
    # job of up to 32 chunks, instead of 16).
    counts, counted_on = _counts(store, job, bad)
    running = _chunks(store, job.job_id, "running", bad, job.total)
    retrying = _chunks(store, job.job_id, "retrying", bad, job.total)
    handed_back = _handed_back(store, job, bad)
    control_tasks = [_control_task(store, job.job_id, kind, bad) for kind in CONTROL_KINDS]
    planned = _planned(store, control_tasks[0], bad)
    total = job.total if job.total is not None else planned
    unfinished = running + retrying + handed_back
    fraction = job_fraction(total, counts["done"], unfinished)
    plan = control_tasks[0]
    began_on = plan.properties.get("started_on") if plan is not None else None
    rate = stored_rate(
        job,
        (fraction or 0.0) * total,
        total,
        began_on if isinstance(began_on, datetime) else None,
        now,
    )
    settled = counts["done"] + counts["poisoned"] + len(running) + len(retrying)
    # A job with cancelled_on set (cancelled, or failed past its tolerance) drops its
    # chunks unrun as they surface, and retries none: nothing of it is waiting.
    dropped = job.cancelled_on is not None
    unclaimed = max(0, total - settled)
    waiting_on, blocked = _predecessors(store, job)
    return JobStatus(
        job_id=job.job_id,
        job_type=job.job_type,
        queue=job.queue,
        queues=job.queues,
        # Blocked is a waiting job one of whose predecessors failed: shown, not stored
        # (a redrive that lets that one end done starts it with nobody writing here).
        state="blocked" if blocked else job.state,
        error=job.error,
        paused=job.paused_on is not None,
        paused_on=job.paused_on,
        drain=job.drain,
        cancelled_on=job.cancelled_on,
        cancel_reason=job.cancel_reason,
        created_on=job.created_on,
        updated_on=job.updated_on,
        last_progress_at=last_moved(counted_on, [*unfinished, plan]),
        planning_done=job.total is not None,
        chunks=ChunkCounts(
            total=total,
            done=counts["done"],
            running=len(running),
            waiting=0 if dropped else unclaimed,
            failed=len(retrying),
            poisoned=counts["poisoned"],
            cancelled=unclaimed if dropped else 0,
        ),
        progress_fraction=fraction,
        chunks_per_second=rate.chunks_per_second,
        eta_seconds=rate.eta_seconds,
        running=tuple(_running(store, task, now, bad) for task in running),
        # Chunks retrying, and planning or finalize while it retries: each failure is
        # shown as soon as it is recorded, with when the next try is.
        failed=tuple(
            _failed(task, now, retried=not dropped)
            for task in [
                *(t for t in control_tasks if t is not None and t.state == "retrying"),
                *retrying,
            ]
        ),
        poisoned=tuple(poisoned_chunks(store, job.job_id, bad, now, job.total))
        if counts["poisoned"] or job.state == "failed"
        else (),
        finalize=control_tasks[-1].state if control_tasks[-1] is not None else None,
        unreadable=tuple({(b.kind, b.index): b for b in bad}.values()),
        priority=job.priority,
        after=job.after,
        waiting_on=waiting_on,
        blocked=blocked,
        pipeline=job.pipeline,
        redriving=job.redriving,
    )


def _predecessors(store: CheckpointStore, job: JobRecord) -> tuple[tuple[str, ...], str | None]:
    """A waiting job's predecessors not done yet, and why it is blocked (or None)."""
    if job.state != "waiting":
        return (), None
    preceding = dependencies.predecessors(store, job, store.budget())
    return tuple(before.job_id for before in preceding.not_done), dependencies.blocked_by(preceding)


def unreadable_job(job_id: str, bad: BadRecord) -> UnreadableJob:
    """What status says of a job whose record cannot be read."""
    return UnreadableJob(job_id=job_id, error=str(bad), unreadable=(_unreadable("job", 0, bad),))


def poisoned_chunks(
    store: CheckpointStore,
    job_id: str,
    bad: list[Unreadable] | None = None,
    now: datetime | None = None,
    total: int | None = None,
) -> list[FailedTask]:
    """Poisoned chunks of a job with their last error (planning, feeding and finalize
    included); ``total``: the job's chunks, if known.

    Records that cannot be read are left out, and added to ``bad`` if given."""
    bad = [] if bad is None else bad
    now = store.clock.now() if now is None else now
    found = [_failed(task, now) for task in _chunks(store, job_id, "poisoned", bad, total)]
    for kind in CONTROL_KINDS:
        task = _control_task(store, job_id, kind, bad)
        if task is not None and task.state == "poisoned":
            found.append(_failed(task, now))
    return found


def _counts(
    store: CheckpointStore, job: JobRecord, bad: list[Unreadable]
) -> tuple[dict[str, int], datetime | None]:
    try:
        return store.counts_and_counted_on(job.job_id, total=job.total)
    except BadRecord as unreadable:
        bad.append(_unreadable("counter", 0, unreadable))
        return {"done": 0, "poisoned": 0}, None


def _handed_back(store: CheckpointStore, job: JobRecord, bad: list[Unreadable]) -> list[TaskRecord]:
    """Chunks waiting again (paused, cancelled or stopped mid-chunk) that had said how
    far they got: their saved progress counts. A query asks only for those, so the
    chunks never claimed are not read; a done job has none."""
    if job.state == "done":
        return []
    saved = [Where(PROGRESS_FRACTION, "gt", 0.0)]
    found = []
    for index, task in store.scan_chunks(job.job_id, ("waiting",), where=saved, total=job.total):
        if isinstance(task, BadRecord):
            bad.append(_unreadable("chunk", index, task))
        else:
            found.append(task)
    return found


def _chunks(
    store: CheckpointStore, job_id: str, state: str, bad: list[Unreadable], total: int | None
) -> list[TaskRecord]:
    """The job's chunks in ``state`` (of ``total``, if known); those that cannot be read
    go to ``bad``."""
    found = []
    for index, task in store.scan_chunks(job_id, (state,), total=total):
        if isinstance(task, BadRecord):
            bad.append(_unreadable("chunk", index, task))
        else:
            found.append(task)
    return found


def _control_task(
    store: CheckpointStore, job_id: str, kind: TaskKind, bad: list[Unreadable]
) -> TaskRecord | None:
    """The job's planning or finalize record, or None if absent or unreadable (then in
    ``bad``)."""
    try:
        return store.get_task(job_id, kind, 0)
    except NotFound:
        return None
    except BadRecord as unreadable:
        bad.append(_unreadable(kind, 0, unreadable))
        return None


def _unreadable(kind: str, index: int, bad: BadRecord) -> Unreadable:
    return Unreadable(kind=kind, index=index, problem=str(bad))


def _planned(store: CheckpointStore, plan: TaskRecord | None, bad: list[Unreadable]) -> int:
    """How many chunks planning has recorded, as its progress says."""
    if plan is None:
        return 0
    try:
        progress = store.value(plan.properties, "progress", of=plan.name)
    except BadRecord as unreadable:
        bad.append(_unreadable("plan", 0, unreadable))
        return 0
    return progress if checks.is_whole(progress) else 0


def _running(
    store: CheckpointStore, task: TaskRecord, now: datetime, bad: list[Unreadable]
) -> RunningChunk:
    try:
        progress = store.value(task.properties, "progress", of=task.name)
    except BadRecord as unreadable:
        bad.append(_unreadable("chunk", task.index, unreadable))
        progress = None
    value, omitted = bounded_user_value(progress)
    # How far the chunk said it got (``chunk.checkpoint(..., progress=)``), when it last
    # wrote a state, and when this attempt started.
    said = _progress(task, bad)
    checkpoint_on = task.properties.get(CHECKPOINT_ON)
    started_on = task.properties.get("started_on")
    return RunningChunk(
        index=task.index,
        worker=task.owner,
        attempt=task.attempt,
        lease_until=task.lease_until,
        lease_expired=task.lease_until is not None and task.lease_until <= now,
        progress=value,
        progress_omitted=omitted,
        progress_text=user_text(progress, PROGRESS_CHARS),
        progress_fraction=said.fraction if said else None,
        progress_done=said.done if said else None,
        progress_total=said.total if said else None,
        checkpoint_on=checkpoint_on if isinstance(checkpoint_on, datetime) else None,
        started_on=started_on if isinstance(started_on, datetime) else None,
    )


def _progress(task: TaskRecord, bad: list[Unreadable] | None = None) -> Progress | None:
    try:
        return Progress.from_properties(task.properties, task.name)
    except BadRecord as unreadable:
        if bad is not None:
            bad.append(_unreadable("chunk", task.index, unreadable))
        return None


def job_fraction(total: int, done: int, unfinished: list[TaskRecord]) -> float | None:
    """How far the job got, 0-1: its done chunks, plus the fraction each unfinished
    chunk (running, retrying, or waiting again after it was handed back) said it got,
    over its chunks (None before it has any)."""
    if total <= 0:
        return None
    said = sum(progress.fraction for task in unfinished if (progress := _progress(task)))
    return round(min(1.0, (done + said) / total), 6)


def _failed(task: TaskRecord, now: datetime, retried: bool = True) -> FailedTask:
    """A retrying or poisoned task's last failure; ``retried`` False: its job drops it
    (cancelled), so it has no next try."""
    error = task.error or {}
    retry_at = _time_or_none(task.properties.get("retry_at"))
    if task.state != "retrying" or not retried:
        retry_at = None
    retryable = task.properties.get("retryable")
    return FailedTask(
        kind=task.kind,
        index=task.index,
        attempt=task.attempt,
        state=task.state,
        max_attempts=_whole_or_none(task.properties.get("max_attempts")),
        retryable=retryable if isinstance(retryable, bool) else None,
        retry_at=retry_at,
        # Due and not yet received: every worker serving the queue is busy (or none is).
        retry_due=retry_at is not None and retry_at <= now,
        error_type=error.get("type"),
        error_message=error.get("message"),
        traceback=error.get("traceback"),
    )


def _whole_or_none(value: Any) -> int | None:
    return value if checks.is_whole(value) else None


def _time_or_none(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


class ReportRow(TypedDict):
    """One row of ``runner report``: a :class:`FailedTask` in its JSON form with the
    chunk's payload. A dict, not a dataclass: it is written as it is, a JSON line or a
    CSV row, its keys (:data:`REPORT_COLUMNS`) in this order."""

    kind: str
    index: int
    state: str
    attempt: int
    max_attempts: int | None
    retryable: bool | None
    retry_at: str | None
    retry_due: bool
    payload: Any
    payload_omitted: bool
    error_type: str | None
    error_message: str | None
    traceback: str | None


#: The columns of ``runner report --csv``, in order (the keys of ``--json``).
REPORT_COLUMNS = tuple(ReportRow.__annotations__)


def failure_report(store: CheckpointStore, job_id: str) -> Iterator[ReportRow]:
    """Every failed (retrying) or poisoned task of the job, planning, feeding and finalize
    first,
    then chunks in index order: payload summary, attempts, last error and traceback.
    Read page by page, so a report of a million chunks streams."""
    job = store.get_job(job_id)
    retried, now = job.cancelled_on is None, store.clock.now()
    for kind in CONTROL_KINDS:
        try:
            task = store.get_task(job_id, kind, 0)
        except NotFound:
            continue
        if task.state in ("retrying", "poisoned"):
            yield _reported(store, task, now, retried)
    for _, found in store.scan_chunks(job_id, ("retrying", "poisoned")):
        if isinstance(found, TaskRecord):  # status lists unreadable records
            yield _reported(store, found, now, retried)


def _reported(store: CheckpointStore, task: TaskRecord, now: datetime, retried: bool) -> ReportRow:
    failed = to_json(_failed(task, now, retried))
    payload, omitted = None, False
    if task.kind == "chunk":  # planning and finalize have the job's params, not a payload
        try:
            payload = store.value(task.properties, "payload", of=task.name)
        except BadRecord:  # status names the unreadable record; the report goes on
            omitted = True
        else:
            payload, omitted = bounded_user_value(payload)
    entry = {**failed, "payload": payload, "payload_omitted": omitted}
    return cast(ReportRow, {column: entry[column] for column in REPORT_COLUMNS})
