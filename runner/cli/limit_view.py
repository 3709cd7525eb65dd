"""The shared limits as ``runner limit`` and ``runner status`` show them: read from the
store (:mod:`checkpoint.limits.book`) as typed values (:class:`LimitStatus`), and their text.

A job's limits are those named after its queue (its class's ``rate_limit`` and
``max_running``, or set by hand for it) and the resources its class names (the
catalogue records which job types name each, as their workers said at start).

A running limit's count is that of the chunks running on its queue, not only of the
slots held: chunks that started before the limit was set hold none (a worker takes a
slot as it receives), so the slots alone said ``0/1 running`` with two chunks
running. Each count is a lower bound of the truth: slots count chunks admitted and not
yet in a heartbeat, the live workers' heartbeats count every chunk they run, a beat
late. The larger is shown, and ``(over)`` when it passes the limit.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from datetime import datetime

from checkpoint.errors import BadRecord, JobNotFound
from checkpoint.limits.book import Limit, LimitBook
from checkpoint.limits.rows import BY_HAND
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook, WorkerRecord
from runner.cli.status_types import AnyJob, JobStatus, LimitStatus

log = logging.getLogger(__name__)


def read_limits(store: CheckpointStore, now: datetime) -> tuple[LimitStatus, ...]:
    """Every limit in the store, by name (rate before running); one that cannot be read
    is logged and left out."""
    store.ensure()
    found = LimitBook(store.storage.records, store.clock).scan(store.budget())
    readable = [limit for limit in found if not isinstance(limit, BadRecord)]
    for bad in (limit for limit in found if isinstance(limit, BadRecord)):
        log.warning("a limit cannot be read: %s", bad)
    running = running_chunks(store, now) if any(one.running for one in readable) else Counter()
    return tuple(shown for limit in readable for shown in limit_status(limit, now, running))


def running_chunks(store: CheckpointStore, now: datetime) -> Counter[str]:
    """Chunks running now by their job's queue, as the live workers' heartbeats say
    (one read of each job they run, for its queue)."""
    by_job: Counter[str] = Counter()
    for worker in WorkerBook(store.storage.records).scan(store.budget()):
        if isinstance(worker, WorkerRecord) and not worker.gone(now):
            by_job.update(task.rsplit("#", 1)[0] for task in worker.tasks if "#" in task)
    by_queue: Counter[str] = Counter()
    for job_id, count in by_job.items():
        try:
            by_queue[store.get_job(job_id).queue] += count
        except (JobNotFound, BadRecord):
            continue  # deleted since, or unreadable: status says so on its own line
    return by_queue


def limit_status(
    limit: Limit, now: datetime, running: Counter[str] | None = None
) -> list[LimitStatus]:
    """``limit``'s rate and running parts as of ``now``; ``running``: the chunks
    running by queue (:func:`running_chunks`), else only the slots held count."""
    shown = []
    if limit.rate is not None:
        bucket = limit.rate.refilled(now)
        shown.append(
            LimitStatus(
                name=limit.name,
                kind="rate",
                value=bucket.rate.text,
                set_by=bucket.source,
                rate_per_second=bucket.rate.per_second,
                tokens=round(bucket.tokens, 3),
                burst=bucket.burst,
                max_running=None,
                running=None,
                named_by=limit.named_by,
            )
        )
    if limit.running is not None:
        slots = limit.running
        shown.append(
            LimitStatus(
                name=limit.name,
                kind="running",
                value=str(slots.max_running),
                set_by=slots.source,
                rate_per_second=None,
                tokens=None,
                burst=None,
                max_running=slots.max_running,
                running=max(slots.in_use(now), (running or Counter())[limit.name]),
                named_by=limit.named_by,
            )
        )
    return shown


def with_limits(report: list[AnyJob], limits: tuple[LimitStatus, ...]) -> list[AnyJob]:
    """Each readable job's report with the limits that apply to it."""
    return [
        replace(job, limits=tuple(one for one in limits if _applies(one, job)))
        if isinstance(job, JobStatus)
        else job
        for job in report
    ]


def _applies(limit: LimitStatus, job: JobStatus) -> bool:
    return limit.name == job.queue or job.job_type in limit.named_by


def limit_line(limit: LimitStatus) -> str:
    """``orders-db  rate 50/s  (set by hand)  12.0/50 tokens``."""
    who = "by hand" if limit.set_by == BY_HAND else f"by {limit.set_by or 'unknown'}"
    if limit.kind == "rate":
        held = f"{limit.tokens:.1f}/{limit.burst:.1f} tokens"
    else:
        held = f"{limit.running}/{limit.max_running} running"
        if (limit.running or 0) > (limit.max_running or 0):
            held += " (over)"
    return f"{limit.name}  {limit.kind} {limit.value}  (set {who})  {held}"


def render_limits(limits: tuple[LimitStatus, ...]) -> str:
    if not limits:
        return "no limits"
    return "\n".join(limit_line(limit) for limit in limits)
