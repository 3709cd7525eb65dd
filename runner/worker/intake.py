"""Jobs submitted by other programs: a job type's intake queue, read by its workers.

The workers of a class with ``intake = True`` ask ``<queue>-intake`` beside its job
queues: one more queue in the type's rotation
(:func:`runner.worker.receiving.polling.own_queues`), received, leased and renewed as any
other (:mod:`runner.worker.leases.lease`), and handed here by the first step of a
message's life (:func:`runner.worker.tasks.life.handle`).
Each message is one submission (:mod:`jobs.intake`, docs/intake.md), and ends one of
four ways:

- **Recorded.** The job (its id derived from the submission id) is recorded and its
  planning sent by the steps of ``jobs.submit`` (:func:`jobs.submit.record_job`), and
  only then is the message deleted. A worker dying in between leaves the message;
  received again, the submission finds its job and records nothing new (a submit is
  idempotent by job id), and is deleted then. A write applied with its answer lost is
  settled by reading the store, as every write is, so a retried submission is still
  the same job.
- **Rejected.** Not JSON, another schema, a field missing or of the wrong type, another
  job type, params the class's ``validate`` refuses, an id taken by a job with other
  settings: copied to ``<queue>-intake-rejected`` with the reason (field and problem),
  then deleted. Never retried: the same body would fail the same way.
- **Waiting.** A job it runs after is not recorded yet: its own submission may be a
  message still behind this one, on this queue or another type's. Hidden for 5 s,
  doubling, and rejected at its :data:`AFTER_DELIVERIES`-th delivery (after about 5
  minutes).
- **Left.** The store out of reach: the message comes back when its lease runs out. A
  failure of no known kind (a bug) is left too, and rejected with its error at the
  :data:`MAX_DELIVERIES`-th delivery, so no message comes back for ever.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from checkpoint import retries
from checkpoint.clock import utc_text
from checkpoint.errors import BadRecord, StorageError
from checkpoint.retries import TRANSIENT
from checkpoint.storage import NEVER_EXPIRES, QueueMessage
from jobs.backoff import Backoff, compute_backoff
from jobs.errors import InvalidParams, JobIdTaken, UnknownPredecessor
from jobs.intake import Rejected, Submission, read_submission
from jobs.job import ChunkedJob
from jobs.rejection import rejected_body, rejection
from jobs.submit import Submitted, record_job, validate_params
from runner.worker.leases.lease import Lease
from runner.worker.tasks.delivery import Context

log = logging.getLogger(__name__)

#: How long a submission naming a job not recorded yet in its ``after`` is hidden, by
#: its delivery: 5, 10, 20, 40, 80, 160 s ...
AFTER_WAIT = Backoff(first_seconds=5, multiplier=2, max_seconds=160, jitter=0)
#: ... until this delivery rejects it: about 5 minutes after a worker first saw it.
AFTER_DELIVERIES = 7
#: Deliveries of a submission failing for no known reason before it is rejected.
MAX_DELIVERIES = 5


def takes_submissions(by_queue: Mapping[str, type[ChunkedJob]], queue: str) -> bool:
    """Whether ``queue`` is the intake queue of the class serving it."""
    cls = by_queue.get(queue)
    return cls is not None and cls.intake and queue == cls.intake_queue()


def take_submission(worker: Context, lease: Lease, message: QueueMessage) -> None:
    """Record the submission ``message`` holds as a job, reject it, or leave it for later
    (see the module's docstring); never raises for what the message holds."""
    lease.max_seconds = None  # not a chunk: renewed for as long as recording takes
    worker.admission.ended(message)  # and it keeps no running slot
    job_class = worker.by_queue[lease.queue]
    try:
        submission = read_submission(message.body, job_class)
        _check_params(job_class, submission)
        done = _record(worker, lease, job_class, submission)
    except Rejected as rejected:
        reject(worker, lease, message, rejected)
        return
    except UnknownPredecessor as missing:
        _wait(worker, lease, message, missing)
        return
    except TRANSIENT as trouble:
        log.warning(
            "submission in message %s from %s not recorded: %s; it comes back when its "
            "lease runs out",
            message.id,
            lease.queue,
            trouble,
        )
        worker.keeper.drop(lease)
        return
    except Exception as error:  # noqa: BLE001 - no message may come back for ever
        _failed(worker, lease, message, error)
        return
    worker.keeper.delete(lease)
    log.info(
        "submission %r from %s: job %s %s (%s)",
        submission.submission_id,
        lease.queue,
        done.job_id,
        "recorded" if done.created else "was recorded already",
        done.state,
    )


def _check_params(job_class: type[ChunkedJob], submission: Submission) -> None:
    """The class's ``validate``: whatever it raises rejects the submission (it sees the
    params alone, so the same params would be refused again)."""
    try:
        validate_params(job_class, submission.params)
    except InvalidParams as refused:
        raise Rejected("params", str(refused)) from None
    except Exception as error:  # noqa: BLE001 - the user's validate, whatever it raised
        raise Rejected(
            "params",
            f"{job_class.job_type()}.validate raised {type(error).__name__}: {error}",
        ) from None


def _record(
    worker: Context, lease: Lease, job_class: type[ChunkedJob], submission: Submission
) -> Submitted:
    """The job recorded, retried in place while the lease lasts; what cannot be recorded
    for what the submission says is Rejected."""
    budget = lease.budget(retries.BOOKKEEPING, worker.clock)
    try:
        return record_job(
            worker.store,
            job_class,
            submission.params,
            budget,
            job_id=submission.job_id,
            delay_seconds=submission.delay_seconds,
            priority=submission.priority,
            after=submission.after,
            pipeline=submission.pipeline,
        )
    except JobIdTaken as taken:
        raise Rejected(
            "submission_id",
            f"{taken.clash}: use another submission_id, or `runner delete "
            f"{submission.job_id}` first (--force if it has not ended)",
        ) from None
    except BadRecord as bad:  # a record it would run after, or its own, garbled
        raise Rejected(None, f"a record it needs cannot be read: {bad}") from None


def _wait(
    worker: Context, lease: Lease, message: QueueMessage, missing: UnknownPredecessor
) -> None:
    """Hide a submission whose ``after`` names a job not recorded yet, or reject it at
    its :data:`AFTER_DELIVERIES`-th delivery."""
    count = message.dequeue_count
    if count >= AFTER_DELIVERIES:
        problem = (
            f"no job {missing.job_id!r}, though this submission waited for it to be "
            f"submitted over {count} deliveries"
        )
        reject(worker, lease, message, Rejected("after", problem))
        return
    seconds = compute_backoff(AFTER_WAIT, count)
    log.info(
        "submission in message %s from %s runs after job %r, not recorded yet: looked "
        "at again in %d s (delivery %d of %d)",
        message.id,
        lease.queue,
        missing.job_id,
        seconds,
        count,
        AFTER_DELIVERIES,
    )
    worker.keeper.release(lease, seconds)


def _failed(worker: Context, lease: Lease, message: QueueMessage, error: Exception) -> None:
    """A failure of no known kind: left to come back, rejected with its error at the
    :data:`MAX_DELIVERIES`-th delivery."""
    if message.dequeue_count >= MAX_DELIVERIES:
        problem = (
            f"not recorded in {message.dequeue_count} deliveries, the last failing with "
            f"{type(error).__name__}: {error}"
        )
        reject(worker, lease, message, Rejected(None, problem))
        return
    log.exception(
        "submission in message %s from %s could not be recorded; it comes back when its "
        "lease runs out",
        message.id,
        lease.queue,
    )
    worker.keeper.drop(lease)


def reject(worker: Context, lease: Lease, message: QueueMessage, rejected: Rejected) -> None:
    """Move ``message`` to its type's rejected queue with the reason: copied first, then
    deleted, so a worker dying in between leaves it in both (received again, it is
    rejected again: two copies of one rejection), never in neither."""
    job_class = worker.by_queue[lease.queue]
    target = job_class.rejected_queue()
    found = rejection(
        message.body,
        rejected,
        queue=lease.queue,
        at=utc_text(worker.clock.now()),
        message_id=message.id,
        inserted_on=utc_text(message.inserted_on),
        dequeue_count=message.dequeue_count,
    )
    budget = lease.budget(retries.MESSAGE, worker.clock)
    try:
        # Created here too: the queue may have been deleted by hand since the start.
        budget.call(lambda: worker.queues.create_queue(target))
        budget.call(
            lambda: worker.queues.send(target, rejected_body(found), ttl_seconds=NEVER_EXPIRES)
        )
    except StorageError as error:
        log.warning(
            "moving rejected submission %s to %s failed: %s; it comes back when its lease runs out",
            message.id,
            target,
            error,
        )
        worker.keeper.drop(lease)
        return
    log.warning("submission in message %s from %s rejected: %s", message.id, lease.queue, rejected)
    if not worker.keeper.delete(lease):
        log.warning(
            "rejected submission %s copied to %s but not deleted; it comes back and is "
            "rejected again",
            message.id,
            target,
        )
