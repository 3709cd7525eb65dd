"""Messages left over from a deleted job (its job gone, being deleted, or another
incarnation of that id): deleted unrun, never poisoned (docs/semantics.md).

``runner delete`` cannot reach messages that were invisible then (leased, backing off,
delayed), and they surface later.
"""

from __future__ import annotations

import logging

from checkpoint import retries
from checkpoint.errors import JobNotFound
from checkpoint.messages import TaskMessage
from checkpoint.records import JobRecord, TaskRecord
from checkpoint.retries import Budget
from runner.worker.leases.lease import Lease
from runner.worker.observing.logs import TASK_LOGGER
from runner.worker.tasks.delivery import Context
from runner.worker.tasks.task_kinds import KINDS

log = logging.getLogger(TASK_LOGGER)


def leftover(worker: Context, task_message: TaskMessage, lease: Lease, fresh: bool = False) -> bool:
    """Delete the message unrun if it is left over from a deleted job; True if it was.

    ``fresh``: judge by the job record as stored now, not as this worker remembers it.
    """
    return judged(worker, task_message, lease, fresh)[0]


def judged(
    worker: Context, task_message: TaskMessage, lease: Lease, fresh: bool = False
) -> tuple[bool, JobRecord | None]:
    """As :func:`leftover`, with the job record it judged by (None: no job): the
    delivery goes on with that record, not a second read."""
    job = _job_now(worker, task_message, lease, fresh)
    why = leftover_reason(task_message, job)
    if why is None:
        return False, job
    log.info(
        "%s %s of %s: %s; message deleted unrun",
        task_message.kind,
        task_message.index,
        task_message.job_id,
        why,
    )
    worker.keeper.delete(lease)
    return True, job


def leftover_reason(task_message: TaskMessage, job: JobRecord | None) -> str | None:
    """Why a message belongs to no job that will run it (None: it may run).

    A message from before incarnations (none carried) naming no job is not judged here:
    nothing tells it from garbage, and it is poisoned as such.
    """
    if job is None:
        return None if task_message.incarnation is None else "its job was deleted"
    if job.deleting_on is not None:
        return "its job is being deleted"
    if task_message.incarnation not in (None, job.incarnation):
        return "left over from an earlier job of that id, deleted since"
    return None


def redrivable(job: JobRecord) -> bool:
    """Whether the job's tasks are stopped by a failure past its tolerance, which a
    redrive may have undone since the record was read (a cancel by the user it cannot:
    :mod:`runner.cli.redrive`)."""
    return job.state == "failed" and job.stop_order == "cancelled"


def recorded_for_another(task: TaskRecord, task_message: TaskMessage) -> bool:
    """Whether the task was recorded for another incarnation than the message's: the
    job record this worker remembers may be of a job deleted since (and submitted again
    under its id), so the stored one decides."""
    return None not in (task.incarnation, task_message.incarnation) and (
        task.incarnation != task_message.incarnation
    )


def _job_now(
    worker: Context, task_message: TaskMessage, lease: Lease, fresh: bool
) -> JobRecord | None:
    """The job record to judge a message by, None if there is none (BadRecord raised).

    A record read in the last second (:mod:`runner.worker.job_cache`) serves a chunk it
    does not condemn. Planning and finalize are judged by the stored record (they would
    record their task anew for a job gone: ``ensure_task``), and so is a chunk the
    remembered record condemns: it may be of a job deleted and submitted again since,
    or one failed past its tolerance and redriven since, whose message would otherwise
    be deleted unrun and its chunk left with none (:func:`redrivable`).
    """
    budget = Budget(retries.READ, worker.clock, deadline=lambda: lease.visible_at)
    fresh = fresh or not KINDS[task_message.kind].trusts_cached_job
    try:
        job = worker.job_cache.job(task_message.job_id, budget, fresh=fresh)
        if not fresh and (leftover_reason(task_message, job) is not None or redrivable(job)):
            job = worker.job_cache.job(task_message.job_id, budget, fresh=True)
    except JobNotFound:
        return None
    return job
