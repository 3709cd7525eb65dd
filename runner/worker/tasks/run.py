"""Running a claimed task (its kind's own way: :mod:`runner.worker.tasks.task_kinds`) under a
:class:`~runner.worker.tasks.control.TaskControl` (fenced checkpoints, the stop signal), and
which outcome (:mod:`runner.worker.tasks.outcome`) each way it ends leads to.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from checkpoint import retries
from checkpoint.errors import BadRecord, CodecError, LeaseLost, StorageTrouble
from checkpoint.records import TaskRecord
from checkpoint.settle import Writer
from jobs.errors import ChunkStopped, JobCancelled, JobDeleted, JobPaused
from runner.worker.leases.takeover import takeover_of
from runner.worker.limits.unit_limits import LimitedControl
from runner.worker.observing.logs import TASK_LOGGER
from runner.worker.observing.observe import task_running
from runner.worker.tasks.control import TaskControl
from runner.worker.tasks.delivery import Delivery
from runner.worker.tasks.feed import FeedStep, NextStep, feed_later
from runner.worker.tasks.outcome import failed, poison_task, stopped, succeeded
from runner.worker.tasks.parking import drop_stopped, park
from runner.worker.tasks.task_kinds import KINDS
from runner.worker.tasks.verdict import Verdict

log = logging.getLogger(TASK_LOGGER)


def start(
    delivery: Delivery, claimed: TaskRecord, writer: Writer, before: TaskRecord | None = None
) -> None:
    """Run the claimed task (``before``: its record as read before the claim, if it was)."""
    worker, lease = delivery.worker, delivery.lease
    control = LimitedControl(
        worker.store,
        claimed,
        lease,
        worker.clock,
        delivery.job_class.checkpoint_interval_seconds,
        worker.stopping,
        writer,
        # A planned claim (``before`` None) takes nothing over.
        taken_over=None
        if before is None
        else takeover_of(before, worker.workers, worker.clock, delivery.budget(retries.READ)),
        hooks=worker.hooks,
        job_type=delivery.job.job_type,
    )
    control.admission, control.job_class = worker.admission, delivery.job_class
    with task_running(worker.worker_id, worker.running, claimed, before) as resumed:
        worker.hooks.started(delivery.job, control, resumed)
        try:
            _execute(delivery, control)
        finally:
            worker.hooks.left(delivery.job, control)


def _execute(delivery: Delivery, control: LimitedControl) -> None:
    worker, lease, job, task = delivery.worker, delivery.lease, delivery.job, control.task
    after = NextStep(delivery)  # a feed step's next message (runner.worker.tasks.feed)
    try:
        outcome = KINDS[task.kind].execute(delivery, control, after)
    except LeaseLost as lost:
        log.warning("%s %s of %s stopped: lease lost (%s)", task.kind, task.index, job.job_id, lost)
        worker.keeper.drop(lease)
        return
    except JobDeleted as deleted:
        # One line, no traceback: nothing of the task is left to write, so the message
        # goes too (it would come back only to be deleted unrun).
        log.info("%s %s stopped: %s; message deleted", task.kind, task.index, deleted)
        worker.keeper.delete(lease)
        return
    except JobCancelled:
        log.info("%s %s of %s stopped: the job was cancelled", task.kind, task.index, job.job_id)
        stopped(delivery, control, lambda: drop_stopped(delivery))
        return
    except JobPaused:
        log.info("%s %s of %s handed back: the job is paused", task.kind, task.index, job.job_id)
        stopped(delivery, control, lambda: park(delivery, task.kind, task.index))
        return
    except ChunkStopped as stopping:
        log.info("%s %s of %s handed back: %s", task.kind, task.index, job.job_id, stopping)
        stopped(delivery, control)
        return
    except StorageTrouble as trouble:
        log.warning("%s %s of %s handed back: %s", task.kind, task.index, job.job_id, trouble)
        stopped(delivery, control)
        return
    except BadRecord as bad:  # its payload, state or params cannot be read: no retry mends it
        # No traceback kept: the reason names the record and field, the stack is ours.
        poison_task(delivery, task, Verdict(str(bad), retryable=False), (bad, ""), control)
        return
    except BaseException as error:  # noqa: BLE001 - user code failed (even sys.exit): record it
        failed(delivery, control, error, traceback.format_exc())
        return
    if isinstance(outcome, FeedStep):
        # Outside the handlers above: what goes wrong in ending a step is the runner's
        # own, never a failure of the task (its attempt is given back already).
        if not outcome.finished:
            feed_later(delivery, control, outcome, after)
            return
        outcome = outcome.cursor
    _finish(delivery, control, outcome)


def _finish(delivery: Delivery, control: TaskControl, outcome: Any) -> None:
    try:
        succeeded(delivery, control, outcome)
    except CodecError as error:  # the result or the last state cannot be stored
        failed(delivery, control, error, traceback.format_exc())
    except LeaseLost as lost:
        task = control.task
        log.warning(
            "%s %s of %s: finished but fenced (%s)", task.kind, task.index, delivery.job_id, lost
        )
        delivery.worker.keeper.drop(delivery.lease)
