"""How a claimed task's attempt ends: done (and what follows it), failed and retried
after a backoff, handed back unfailed, or poisoned.

Done is marked before the message is deleted (for chunks the
:class:`~runner.worker.tasks.chunk_finisher.Finisher` does both, for many chunks at once), so
a crash in between re-delivers a message that is deleted unrun.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from checkpoint import retries
from checkpoint.errors import Conflict, LeaseLost, NotFound, StorageError
from checkpoint.records import TaskRecord
from checkpoint.service_targets import MAX_VISIBILITY_SECONDS
from checkpoint.settle import Writer
from jobs.backoff import compute_backoff
from runner.worker.observing.logs import TASK_LOGGER
from runner.worker.observing.observe import finished_line
from runner.worker.tasks.chunk_finisher import Ended
from runner.worker.tasks.control import TaskControl
from runner.worker.tasks.delivery import Delivery
from runner.worker.tasks.record_changes import TaskChanges
from runner.worker.tasks.task_kinds import KINDS
from runner.worker.tasks.verdict import Verdict, failure_verdict

log = logging.getLogger(TASK_LOGGER)


def succeeded(delivery: Delivery, control: TaskControl, outcome: Any) -> None:
    worker, lease = delivery.worker, delivery.lease
    task, done = control.task, TaskChanges(state="done", owner="", done_on=worker.clock.now())
    kind = KINDS[task.kind]
    if kind.ends_in_finisher:
        # From here the finisher writes the record: a renewal must not change its ETag.
        task = control.end()
        values = {"result": outcome}
        if control.has_unwritten_state:  # else the stored state stands (no blob re-read)
            values["progress"] = control.newest_state
            done = done.plus(control.checkpoint_changes())
        token = control.writer.next()
        # CodecError (a result or state that cannot be stored): the attempt failed.
        final = worker.store.final_changes(task, done.properties(), values, token)
        seconds = worker.clock.monotonic() - control.started_at
        if log.isEnabledFor(logging.INFO):  # the line is not made for nobody
            log.info(finished_line(task, seconds))
        lease.handed_over = True
        worker.finisher.add(Ended(task, final, lease, delivery.job.job_type, seconds))
        return
    task = control.write(done, kind.done_values(outcome))
    seconds = worker.clock.monotonic() - control.started_at
    if log.isEnabledFor(logging.INFO):
        log.info(finished_line(task, seconds))
    worker.hooks.succeeded(delivery.job.job_type, task.kind, seconds)
    # Marked done before the message is deleted: a crash in between re-delivers a message
    # that is deleted unrun, after after_done has run again.
    kind.after_done(worker, delivery.job_id, task, delivery.budget(retries.BOOKKEEPING))
    worker.keeper.delete(lease)


def failed(delivery: Delivery, control: TaskControl, error: BaseException, trace: str) -> None:
    """Retry the task after a backoff, or poison it if trying again cannot help or its
    last attempt failed."""
    task, job_class, worker = control.task, delivery.job_class, delivery.worker
    log.warning(
        "%s %s of %s failed (attempt %d): %r",
        task.kind,
        task.index,
        delivery.job_id,
        task.attempt,
        error,
    )
    # What status and the report say of it: whether trying again could have helped.
    verdict = failure_verdict(task.attempt, error, job_class)
    if not verdict.tries_again:
        poison_task(delivery, task, verdict, (error, trace), control)
        return
    # Visible again after the backoff, which Azure caps at 7 days.
    wait = min(compute_backoff(job_class.backoff, task.attempt, worker.rng), MAX_VISIBILITY_SECONDS)
    retry_at = worker.clock.now() + timedelta(seconds=wait)  # what status shows
    # The newest state is written too: it was encoded once already, at its checkpoint.
    try:
        error_at = (error, trace)
        changes = TaskChanges(
            state="retrying", owner="", retry_at=retry_at, verdict=verdict, error=error_at
        )
        control.write(changes)
    except LeaseLost:
        worker.keeper.drop(delivery.lease)
        return
    worker.hooks.failed(delivery.job.job_type, task.kind)
    worker.keeper.release(delivery.lease, wait)


def stopped(
    delivery: Delivery, control: TaskControl, then: Callable[[], Any] | None = None
) -> None:
    """Hand the task back unfailed: newest state written, the claim's attempt given back
    (only the user's code spends attempts), then the message made visible again at once
    (or whatever ``then`` does with it: deleted for a cancelled job, parked for a paused
    one)."""
    keeper, lease = delivery.worker.keeper, delivery.lease
    refund = max(0, control.task.attempt - 1)
    try:
        control.write(TaskChanges(state="waiting", owner="", attempt=refund))
    except LeaseLost:
        keeper.drop(lease)
        return
    except StorageError as error:
        # The store is out of reach past the lease: the message lapses and comes back.
        task = control.task
        log.warning("handing back %s %s failed: %s", task.kind, task.index, error)
        keeper.drop(lease)
        return
    delivery.worker.hooks.handed_back(delivery.job.job_type, control.task.kind)
    if then is None:
        keeper.release(lease, 0)
    else:
        then()


def poison_task(
    delivery: Delivery,
    task: TaskRecord,
    verdict: Verdict,
    failure: tuple[BaseException, str] | None = None,
    control: TaskControl | None = None,
) -> None:
    """Mark the task poisoned (the job fails) and move its message to the poison queue;
    the verdict (``retryable``, ``max_attempts``) is kept for status and the report."""
    worker, job_id, reason = delivery.worker, delivery.job_id, verdict.reason
    error, trace = failure if failure else (RuntimeError(reason), "")
    changes = TaskChanges(state="poisoned", owner="", verdict=verdict, error=(error, trace))
    values = {"progress": control.newest_state} if control and control.has_unwritten_state else {}
    if control and values:
        changes = changes.plus(control.checkpoint_changes())
    current = control.end() if control else task
    writer = control.writer if control else Writer()
    try:
        KINDS[task.kind].write_poisoned(delivery, current, changes, values, verdict, writer)
    except (Conflict, NotFound):
        log.warning(
            "%s %s of %s changed while poisoning; left to its owner",
            task.kind,
            task.index,
            job_id,
        )
        worker.keeper.drop(delivery.lease)
        return
    log.error("%s %s of %s poisoned: %s", task.kind, task.index, job_id, reason)
    worker.poison.move(delivery.lease, delivery.message.body, reason, delivery.home_queue)
    budget = delivery.budget(retries.TASK_WRITE)
    KINDS[task.kind].after_poisoned(worker, job_id, task.index, budget)
