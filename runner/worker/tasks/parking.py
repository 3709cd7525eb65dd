"""Messages of a job with a stop order: deleted unrun for a cancelled job, parked for a
paused one (docs/semantics.md §16); a task its job's cancel stopped keeps its message
if a redrive undid that cancel meanwhile (§23)."""

from __future__ import annotations

import logging
from datetime import datetime

from checkpoint import parks, retries
from checkpoint.errors import BadRecord, JobNotFound, StorageError
from checkpoint.records import TaskKind
from checkpoint.storage import NEVER_EXPIRES
from runner.worker.observing.logs import TASK_LOGGER
from runner.worker.tasks.delivery import Delivery

log = logging.getLogger(TASK_LOGGER)

#: Bounds of how long a paused job's message is parked (:func:`park_seconds`). A resume
#: does not wait for a park: it brings every noted copy back at once
#: (:mod:`checkpoint.parks`); only a copy whose note was lost waits its park out.
PARK_MIN_SECONDS = 300
PARK_MAX_SECONDS = 3600


def set_aside(delivery: Delivery) -> None:
    """A message of a cancelled job is deleted unrun; one of a paused job is parked."""
    job, task = delivery.job, delivery.task_message
    what = f"{task.kind} {task.index}"
    if job.stop_order == "cancelled":
        log.info("%s of %s: the job was cancelled; message deleted unrun", what, job.job_id)
        delivery.worker.keeper.delete(delivery.lease)
    else:
        log.debug("%s of %s: the job is paused; message parked", what, job.job_id)
        park(delivery, task.kind, task.index)


def drop_stopped(delivery: Delivery) -> None:
    """Delete the message of a task that its job's cancel stopped (its record written
    back to waiting already), unless the job is no longer cancelled: failed past its
    tolerance and redriven since. Then the message is made visible again at once.

    Read afresh after the task's hand-back: a redrive that reopened the job before this
    read is seen here, and one after it finds the task waiting and sends it a message
    itself, so the task is never left with none. A read that fails (or finds the job
    gone) gives the message back too: its next delivery is judged by the job then."""
    worker, lease = delivery.worker, delivery.lease
    try:
        job = worker.job_cache.job(delivery.job_id, delivery.budget(retries.READ), fresh=True)
    except (StorageError, BadRecord, JobNotFound) as error:
        log.warning("reading job %s after a cancel failed: %s", delivery.job_id, error)
        worker.keeper.release(lease, 0)
        return
    if job.stop_order == "cancelled":
        worker.keeper.delete(lease)
        return
    log.info("%s: the job was redriven since its cancel; message given back", delivery.job_id)
    worker.keeper.release(lease, 0)


def park_seconds(paused_on: datetime | None, now: datetime) -> int:
    """How long a paused job's message stays out of sight before it is looked at again:
    a quarter of the time the job has been paused, from 5 minutes to an hour. Each park
    costs about 4 requests (a share of a receive, a send, a note, a delete): 4 per
    parked chunk every 5 minutes at first, every hour once the job has been paused for
    4 hours. Only a copy whose note was lost waits its park out after a resume."""
    paused_for = (now - paused_on).total_seconds() if paused_on is not None else 0.0
    return int(min(PARK_MAX_SECONDS, max(PARK_MIN_SECONDS, paused_for / 4)))


def park(delivery: Delivery, kind: TaskKind, index: int) -> None:
    """Put a paused job's message out of sight for :func:`park_seconds`, as a fresh copy
    (the original deleted), so a long pause does not pile up deliveries that would look
    like a message failing again and again (``DELIVERIES_PER_ATTEMPT``), and note the
    copy's id and pop receipt so that a resume brings it back at once
    (:mod:`checkpoint.parks`, docs/semantics.md §16)."""
    worker, lease, message = delivery.worker, delivery.lease, delivery.message
    delay = park_seconds(delivery.job.paused_on, worker.clock.now())
    budget = delivery.budget(retries.MESSAGE)
    try:
        # A send applied with its answer lost and sent again only duplicates the
        # message: the claim runs one of them, the other is deleted unrun.
        copy = budget.call(
            lambda: worker.queues.send(
                lease.queue, message.body, delay_seconds=delay, ttl_seconds=NEVER_EXPIRES
            )
        )
    except StorageError as error:
        log.warning("parking message %s failed, hidden instead: %s", message.id, error)
        worker.keeper.release(lease, delay)
        return
    try:
        records = worker.store.storage.records
        parks.note(records, delivery.job_id, kind, index, lease.queue, copy, budget)
    except StorageError as error:
        # The copy then comes back when its park ends, resumed or not.
        log.warning("noting parked message %s failed: %s", copy.id, error)
    worker.keeper.delete(lease)
