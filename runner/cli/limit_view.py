"""The shared limits as ``runner limit`` and ``runner status`` show them: read from the
store (:mod:`checkpoint.quotas`) as typed values (:class:`LimitStatus`), and their text.

A job's limits are those named after its queue (its class's ``rate_limit`` and
``max_running``, or set by hand for it) and the resources its class names (the
catalogue records which job types name each, as their workers said at start).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from checkpoint.errors import BadRecord
from checkpoint.quota_records import BY_HAND
from checkpoint.quotas import Limit, QuotaBook
from checkpoint.store import CheckpointStore
from runner.cli.status_types import AnyJob, JobStatus, LimitStatus

log = logging.getLogger(__name__)


def read_limits(store: CheckpointStore, now: datetime) -> tuple[LimitStatus, ...]:
    """Every limit in the store, by name (rate before running); one that cannot be read
    is logged and left out."""
    store.ensure()
    found = QuotaBook(store.storage.records, store.clock).scan(store.budget())
    shown: list[LimitStatus] = []
    for limit in found:
        if isinstance(limit, BadRecord):
            log.warning("a limit cannot be read: %s", limit)
            continue
        shown.extend(limit_status(limit, now))
    return tuple(shown)


def limit_status(limit: Limit, now: datetime) -> list[LimitStatus]:
    """``limit``'s rate and running parts as of ``now``."""
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
                running=slots.in_use(now),
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
    return f"{limit.name}  {limit.kind} {limit.value}  (set {who})  {held}"


def render_limits(limits: tuple[LimitStatus, ...]) -> str:
    if not limits:
        return "no limits"
    return "\n".join(limit_line(limit) for limit in limits)
