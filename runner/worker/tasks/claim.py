"""Whether a delivery may run its task, and the claim: a conditional write marking the
task running under this message (docs/semantics.md §4).

A chunk whose message carries its planned record is claimed without reading it first
(:func:`claim_planned`). Otherwise the record is read and judged: done, poisoned or a
duplicate delivery, its message is deleted unrun; leased on its record, hidden
again; claimed ``max_attempts`` times already (or delivered far more often than that),
poisoned. Losing the claim's race leaves the message to the caller to release.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from checkpoint import retries
from checkpoint.errors import BadRecord, Conflict, NotFound
from checkpoint.records import LEASE_ON_RECORD, TaskRecord
from checkpoint.settle import Writer
from jobs.spark.session import connect_session_text
from runner.worker.observing.logs import TASK_LOGGER
from runner.worker.tasks.bad_records import poison_missing, poison_unreadable
from runner.worker.tasks.delivery import Delivery
from runner.worker.tasks.feed import FEED_IDLE_SECONDS
from runner.worker.tasks.leftovers import leftover, recorded_for_another
from runner.worker.tasks.outcome import poison_task
from runner.worker.tasks.record_changes import TaskChanges
from runner.worker.tasks.task_kinds import KINDS
from runner.worker.tasks.verdict import Verdict

log = logging.getLogger(TASK_LOGGER)

#: Deliveries allowed per attempt before a message is poisoned regardless (releases by
#: graceful stops and prefetch hand-backs are deliveries but not attempts).
DELIVERIES_PER_ATTEMPT = 4


def claim_planned(
    delivery: Delivery, writer: Writer, message_id: str | None = None
) -> TaskRecord | None:
    """Claim a chunk from the planned record its message carries, without reading it;
    the claim names ``message_id`` (default: the delivery's message, see
    :mod:`runner.worker.tasks.resume` for the other).

    The write is conditional on the planned ETag, so it succeeds only if the chunk is
    still exactly as planned: waiting, never claimed. Returns None if the message
    carries no planned record or the record changed (it ran before, or was redriven):
    the caller then reads the record and decides as for any delivery.
    """
    task_message, store = delivery.task_message, delivery.worker.store
    if task_message.planned_etag is None or task_message.planned_payload is None:
        return None
    planned = store.planned_task(
        task_message.job_id,
        task_message.index,
        task_message.planned_etag,
        task_message.planned_payload,
    )
    if exhausted(delivery, planned) is not None:
        return None
    try:
        return store.write_task(
            planned,
            _claim_changes(delivery, planned, message_id).properties(),
            token=writer.next(),
            budget=delivery.budget(retries.CLAIM),
        )
    except (Conflict, NotFound):
        return None


def claimable(delivery: Delivery) -> TaskRecord | None:
    """The task's record if this delivery may claim it; None if its message was dealt
    with instead (deleted unrun, hidden again or poisoned)."""
    task = _read_task(delivery)
    if task is None:
        return None
    if recorded_for_another(task, delivery.task_message):
        if leftover(delivery.worker, delivery.task_message, delivery.lease, fresh=True):
            return None
    if held_on_record(delivery, task):
        _leave_to_its_holder(delivery, task)
        return None
    why = verdict(delivery, task)
    if why is not None and KINDS[delivery.kind].waits_while_running and task.state == "running":
        _wait_for_the_step(delivery, why)
        return None
    if why is not None:
        _delete_unrun(delivery, task, why)
        return None
    spent = exhausted(delivery, task)
    if spent is not None:
        poison_task(delivery, task, spent)
        return None
    return task


def _read_task(delivery: Delivery) -> TaskRecord | None:
    """The task's record (planning's and finalize's recorded if missing); None if it
    cannot be had and the message was dealt with."""
    try:
        return KINDS[delivery.kind].read(delivery)
    except NotFound:
        if not leftover(delivery.worker, delivery.task_message, delivery.lease, fresh=True):
            poison_missing(delivery)
        # else the job's records were deleted since its record was read
        return None
    except BadRecord as bad:
        poison_unreadable(delivery, bad)
        return None


def _leave_to_its_holder(delivery: Delivery, task: TaskRecord) -> None:
    # Its holder lost the message's pop receipt and holds the task by its record:
    # hidden again for a lease, no claim, no attempt (docs/semantics.md §4).
    lease_seconds = delivery.lease.lease_seconds
    log.info(
        "%s %s of %s: running under its record's lease by %s; message hidden %d s",
        delivery.kind,
        delivery.index,
        delivery.job_id,
        task.owner,
        lease_seconds,
    )
    delivery.worker.keeper.release(delivery.lease, lease_seconds)


def _wait_for_the_step(delivery: Delivery, why: Verdict) -> None:
    # A feed step sends the next step's message midway (runner.worker.tasks.feed): received
    # before that step ends, it is the feeder's only way on, so it is hidden a moment,
    # never deleted as a duplicate.
    log.info("feed of %s: %s; message hidden %d s", delivery.job_id, why.reason, FEED_IDLE_SECONDS)
    delivery.worker.keeper.release(delivery.lease, FEED_IDLE_SECONDS)


def _delete_unrun(delivery: Delivery, task: TaskRecord, why: Verdict) -> None:
    log.info(
        "%s %s of %s: %s; message deleted unrun",
        delivery.kind,
        delivery.index,
        delivery.job_id,
        why.reason,
    )
    kind = KINDS[task.kind]
    if task.state == "done" and not kind.followed_already(delivery.job):
        # The last owner may have died between marking done and what follows it.
        budget = delivery.budget(retries.BOOKKEEPING)
        kind.after_done(delivery.worker, delivery.job_id, task, budget)
    delivery.worker.keeper.delete(delivery.lease)


def exhausted(delivery: Delivery, task: TaskRecord) -> Verdict | None:
    """Why this task must not be tried again (trying again might have helped, but its
    attempts ran out), or None.

    Attempts are claims: a message released unrun by a graceful stop (or prefetched and
    handed back) is not an attempt, although the queue counts it as a delivery. The
    dequeue count is only a backstop, for messages that somehow never get claimed.
    """
    max_attempts, dequeue_count = delivery.job_class.max_attempts, delivery.message.dequeue_count
    if task.attempt >= max_attempts:
        reason = (
            f"started {task.attempt} times without finishing (max_attempts="
            f"{max_attempts}); the last attempt died or lost its lease"
        )
    elif dequeue_count > max_attempts * DELIVERIES_PER_ATTEMPT:
        reason = f"delivered {dequeue_count} times without finishing"
    else:
        return None
    return Verdict(reason, retryable=True, max_attempts=max_attempts)


def held_on_record(delivery: Delivery, task: TaskRecord) -> bool:
    """True if the task runs on under its record's lease (:data:`LEASE_ON_RECORD`),
    whose end has not passed: this message's last owner lost its pop receipt."""
    return (
        task.state == "running"
        and task.message_id == delivery.message.id
        and bool(task.properties.get(LEASE_ON_RECORD))
        and task.lease_until is not None
        and task.lease_until > delivery.worker.clock.now()
    )


def verdict(delivery: Delivery, task: TaskRecord) -> Verdict | None:
    """Why this delivery must not run (its message is deleted unrun), or None if it may
    claim the task."""
    if task.state == "done":
        return Verdict("already done")
    if task.state == "poisoned":
        return Verdict("poisoned (redrive sends a new message)")
    if (
        task.state == "running"
        and task.message_id
        and task.message_id != delivery.message.id
        and task.lease_until is not None
        and task.lease_until > delivery.worker.clock.now()
    ):
        return Verdict(
            f"duplicate delivery; running under message {task.message_id} by {task.owner}"
        )
    return None


def claim(
    delivery: Delivery, task: TaskRecord, writer: Writer, message_id: str | None = None
) -> TaskRecord | None:
    """The task marked running under this message (or ``message_id``), or None if
    another worker's claim came first."""
    changes = _claim_changes(delivery, task, message_id)
    budget = delivery.budget(retries.CLAIM)
    try:
        return delivery.worker.store.write_task(
            task, changes.properties(), token=writer.next(), budget=budget
        )
    except Conflict:
        log.info("%s %s of %s claimed by another worker first", task.kind, task.index, task.job_id)
        return None


def _claim_changes(delivery: Delivery, task: TaskRecord, message_id: str | None) -> TaskChanges:
    worker, now = delivery.worker, delivery.worker.clock.now()
    return TaskChanges(
        state="running",
        owner=worker.worker_id,
        message_id=message_id or delivery.message.id,
        attempt=task.attempt + 1,
        started_on=now,
        # This process's Spark Connect session, if it has one already (else the
        # attempt's first Spark work records it); "" clears the last attempt's.
        spark_session=connect_session_text() or "",
        lease_until=now + timedelta(seconds=delivery.lease.lease_seconds),
        # The last owner's, now dead (None: nothing to clear).
        lease_on_record=False if task.properties.get(LEASE_ON_RECORD) else None,
    )
