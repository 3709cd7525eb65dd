"""Jobs that run after others: when a waiting job starts, and what ends it unstarted.

A job submitted ``after=[a, b]`` is recorded ``waiting`` and plans nothing until ``a``
and ``b`` are both ``done`` (docs/semantics.md §23). Nobody has to watch for that:

- the worker that ends a job ``done`` looks at its dependents (one query: the notes of
  :mod:`checkpoint.catalogue.dependents`) and starts each whose last predecessor it
  was, before its finalize message is deleted; a worker that dies in between leaves
  the message, and whoever receives it again does the hand-off again
  (``JobRecord.dependents_started`` says when it is done);
- a submit that finds every predecessor done already starts the job itself, so a job
  submitted after its predecessor's hand-off is not missed either (the note is
  written before the job's record, the record before the predecessors are read).

To start a job is to send its planning message, then move it from ``waiting`` to
``planning``: a crash between the two leaves a message whose planning moves it
(:class:`runner.worker.tasks.task_kinds.PlanKind`), and two starters racing send two
messages, of which the planning's claim runs one. So a dependent starts exactly once.

A predecessor cancelled or deleted cancels its waiting dependents, and theirs, with
the reason. A predecessor that failed leaves them waiting: they are *blocked*
(:func:`blocked_by`), and start by themselves if a redrive lets it end done.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

from checkpoint import messages
from checkpoint.errors import JobNotFound
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.storage import NEVER_EXPIRES, QueueStore
from checkpoint.store import CheckpointStore

log = logging.getLogger(__name__)

#: Longest chain of cancellations followed from one job (a pipeline is a few steps;
#: this only bounds a store edited by hand into a loop).
MAX_CASCADE = 1_000


@dataclass(frozen=True)
class Predecessors:
    """A waiting job's predecessors as they are now: the ids not done yet, and why it
    can never start (one of them cancelled or deleted), if so."""

    not_done: tuple[JobRecord, ...]
    cancel_reason: str | None = None

    @property
    def all_done(self) -> bool:
        return not self.not_done and self.cancel_reason is None


def predecessors(store: CheckpointStore, job: JobRecord, budget: Budget) -> Predecessors:
    """Read each job ``job`` runs after (a read each: a job names a few)."""
    not_done: list[JobRecord] = []
    for job_id in job.after:
        try:
            before = store.get_job(job_id, budget)
        except JobNotFound:
            return Predecessors(tuple(not_done), f"runs after {job_id}, which was deleted")
        if before.state == "cancelled":
            return Predecessors(tuple(not_done), f"runs after {job_id}, which was cancelled")
        if before.state != "done":
            not_done.append(before)
    return Predecessors(tuple(not_done))


def blocked_by(preceding: Predecessors) -> str | None:
    """Why a waiting job is blocked ("blocked: step transform failed (3 chunk(s)
    poisoned ...)"), or None if it only waits: a predecessor failed, and nothing of the
    job runs until a redrive lets that one end done."""
    for before in preceding.not_done:
        if before.state == "failed":
            why = f" ({before.error})" if before.error else ""
            return f"blocked: step {step_name(before.job_id, before.pipeline)} failed{why}"
    return None


def step_name(job_id: str, pipeline: str | None) -> str:
    """A job's name in ``pipeline``: its id without the pipeline's prefix (the ids
    :class:`jobs.Pipeline` gives), else its id."""
    prefix = f"{pipeline}-" if pipeline else ""
    if prefix and job_id.startswith(prefix) and len(job_id) > len(prefix):
        return job_id[len(prefix) :]
    return job_id


def settle_waiting(
    store: CheckpointStore, queues: QueueStore, job: JobRecord, budget: Budget
) -> JobRecord:
    """Start ``job`` if every job it runs after is done, cancel it (and its waiting
    dependents) if one was cancelled or deleted, else leave it waiting. Returns the job
    as this left it; a job not waiting is returned as it is."""
    if job.state != "waiting":
        return job
    preceding = predecessors(store, job, budget)
    if preceding.cancel_reason is not None:
        return cancel_waiting(store, job.job_id, preceding.cancel_reason, budget) or job
    if not preceding.all_done:
        return job
    return start(store, queues, job, budget)


def send_planning(queues: QueueStore, job: JobRecord, delay_seconds: int, budget: Budget) -> None:
    """Send the job's planning message to its first queue, hidden ``delay_seconds``: a
    submit's, or a waiting job's start. Retried on transient trouble; a send applied
    with its answer lost and sent again only duplicates it (the claim runs one)."""
    body = messages.encode(
        messages.TaskMessage("plan", job.job_type, job.job_id, incarnation=job.incarnation)
    )
    send = functools.partial(
        queues.send, job.queues[0], body, delay_seconds=delay_seconds, ttl_seconds=NEVER_EXPIRES
    )
    budget.call(send)


def start(store: CheckpointStore, queues: QueueStore, job: JobRecord, budget: Budget) -> JobRecord:
    """Send a waiting job's planning message, then record it ``planning``."""
    send_planning(queues, job, job.delay_seconds, budget)
    started = store.change_job(
        job.job_id,
        lambda fresh: {"state": "planning"} if _same_waiting(fresh, job) else None,
        budget,
    )
    log.info("job %s: every job it runs after is done; its planning is sent", job.job_id)
    return started or store.get_job(job.job_id, budget)


def start_dependents(
    store: CheckpointStore, queues: QueueStore, job_id: str, budget: Budget
) -> list[JobRecord]:
    """After ``job_id`` ended (done, cancelled, or deleted): settle each of its waiting
    dependents (:func:`settle_waiting`). Returns them as this left them."""
    settled = []
    for dependent in store.dependents.of(job_id, budget):
        try:
            job = store.get_job(dependent, budget)
        except JobNotFound:
            continue  # its submit died before recording it; its retry settles it
        if job.state == "waiting" and job_id in job.after:
            settled.append(settle_waiting(store, queues, job, budget))
    return settled


def after_deleted(store: CheckpointStore, queues: QueueStore, job_id: str, budget: Budget) -> None:
    """After ``job_id`` was deleted: its waiting dependents are cancelled (it can never
    end done now), then its notes of them are deleted."""
    start_dependents(store, queues, job_id, budget)
    store.dependents.forget_all(job_id, budget)


def cancel_waiting(
    store: CheckpointStore, job_id: str, reason: str, budget: Budget
) -> JobRecord | None:
    """Cancel a job still waiting, with ``reason``, then every waiting job after it;
    None if it was no longer waiting."""
    cancelled = _cancel_one(store, job_id, reason, budget)
    if cancelled is None:
        return None
    pending, seen = [job_id], {job_id}
    while pending and len(seen) < MAX_CASCADE:
        ended = pending.pop()
        for dependent in store.dependents.of(ended, budget):
            if dependent in seen:
                continue
            seen.add(dependent)
            why = f"runs after {ended}, which was cancelled"
            if _cancel_one(store, dependent, why, budget, after=ended):
                pending.append(dependent)
    return cancelled


def _cancel_one(
    store: CheckpointStore, job_id: str, reason: str, budget: Budget, after: str | None = None
) -> JobRecord | None:
    """Cancel ``job_id`` if it is waiting (and, given ``after``, runs after that job)."""
    now = store.clock.now()

    def decide(job: JobRecord) -> dict[str, Any] | None:
        if job.state != "waiting" or (after is not None and after not in job.after):
            return None
        return {"state": "cancelled", "cancelled_on": now, "cancel_reason": reason}

    try:
        cancelled = store.change_job(job_id, decide, budget)
    except JobNotFound:
        return None
    if cancelled is not None:
        log.info("job %s cancelled before it started: %s", job_id, reason)
    return cancelled


def _same_waiting(fresh: JobRecord, seen: JobRecord) -> bool:
    """Still the waiting job that was started (not deleted and submitted again since)."""
    return fresh.state == "waiting" and fresh.incarnation == seen.incarnation
