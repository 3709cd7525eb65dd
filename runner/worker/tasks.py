"""One received message, start to end: decode, claim, run, checkpoint, complete.

The order of the steps is the product's correctness, so it is spelled out here:

1. Hold the message under a lease at once (the keeper renews it from now on).
2. Decode it; anything not ours goes to ``<queue>-poison`` with the reason. A message
   left over from a deleted job (its job gone, being deleted, or another incarnation
   of that id) is deleted unrun.
3. Read the task record. Done, poisoned or a duplicate delivery: delete the message
   unrun. Claimed ``max_attempts`` times already (or delivered far more often than
   that): poison it.
4. Claim: a conditional write marking the task running under this message. Losing that
   race releases the message for later.
5. Run the user's code; checkpoints are fenced writes (see :mod:`runner.worker.control`).
6. Success: mark done (with the shard's counter, atomically) *before* deleting the
   message, then see whether the job is complete. For chunks the slot hands that to
   the :class:`~runner.worker.chunk_finisher.Finisher`, which does it for many chunks at
   once. Failure: record the error and make the message visible again after a backoff,
   or poison it on the last attempt.
"""

from __future__ import annotations

import logging
import random
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from checkpoint import checks, layout, messages, parks, retries
from checkpoint.clock import Clock
from checkpoint.errors import (
    BadMessage,
    BadRecord,
    CodecError,
    Conflict,
    JobNotFound,
    LeaseLost,
    NotFound,
    StorageError,
    StorageTrouble,
)
from checkpoint.limits import MAX_VISIBILITY_SECONDS
from checkpoint.records import (
    LEASE_ON_RECORD,
    SPARK_SESSION,
    JobRecord,
    TaskKind,
    TaskRecord,
    error_properties,
)
from checkpoint.retries import Budget
from checkpoint.settle import Writer
from checkpoint.storage import NEVER_EXPIRES, QueueMessage, QueueStore
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook
from jobs.backoff import compute_backoff
from jobs.errors import ChunkFailed, ChunkStopped, JobCancelled, JobDeleted, JobPaused
from jobs.job import ChunkedJob
from jobs.spark_session import connect_session_text
from runner.worker.chunk_finisher import Ended, Finisher
from runner.worker.control import TaskControl
from runner.worker.heartbeat import RunningTasks
from runner.worker.holds import HoldWatcher
from runner.worker.job_cache import JobCache
from runner.worker.job_completion import Completion, set_job
from runner.worker.lease import Lease, LeaseKeeper
from runner.worker.observe import finished_line, task_running
from runner.worker.plan import run_plan
from runner.worker.poison import PoisonRouter
from runner.worker.takeover import takeover_of
from runner.worker.user_code import run_user_code

log = logging.getLogger(__name__)

#: Job states in which work is still expected.
_OPEN_STATES = ("planning", "running", "finalizing")

#: Bounds of how long a paused job's message is parked (:func:`park_seconds`). A resume
#: does not wait for a park: it brings every noted copy back at once
#: (:mod:`checkpoint.parks`); only a copy whose note was lost waits its park out.
PARK_MIN_SECONDS = 300
PARK_MAX_SECONDS = 3600

#: Deliveries allowed per attempt before a message is poisoned regardless (releases by
#: graceful stops and prefetch hand-backs are deliveries but not attempts).
DELIVERIES_PER_ATTEMPT = 4


@dataclass
class Context:
    """What every task of one worker process shares; assembled by the worker loop
    (:func:`runner.worker.loop.assemble`), each part given only what it uses."""

    store: CheckpointStore
    queues: QueueStore
    keeper: LeaseKeeper
    clock: Clock
    worker_id: str
    job_classes: dict[str, type[ChunkedJob]]
    poison: PoisonRouter
    completion: Completion
    finisher: Finisher
    job_cache: JobCache
    #: Tells running tasks of a cancelled or paused job to stop (its own thread).
    holds: HoldWatcher
    #: Heartbeats, read when a claim takes over a chunk whose attempt ran Spark work.
    workers: WorkerBook | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    rng: random.Random = field(default_factory=random.Random)
    running: RunningTasks = field(default_factory=RunningTasks)

    @property
    def by_queue(self) -> dict[str, type[ChunkedJob]]:
        return {cls.queue: cls for cls in self.job_classes.values()}


def hold(worker: Context, queue: str, message: QueueMessage, received_at: float) -> Lease:
    """Start renewing a just-received message (``received_at``: monotonic, before the
    receive call) under its job type's lease."""
    queue_class = worker.by_queue[queue]
    return worker.keeper.hold(
        queue,
        message,
        queue_class.lease_seconds,
        received_at=received_at,
        max_seconds=queue_class.max_chunk_seconds,
    )


def handle(
    worker: Context,
    queue: str,
    message: QueueMessage,
    received_at: float,
    lease: Lease | None = None,
) -> bool:
    """Process one received message completely; never raises for a bad message.

    ``lease`` is the message's lease if :func:`hold` was called already (the message
    waited in a prefetch buffer); else it is held now. Returns True if the message ran
    a chunk (the worker loop times those to choose its prefetch depth; planning,
    finalize and messages deleted unrun say nothing about the chunks to come).
    """
    if lease is None:
        lease = hold(worker, queue, message, received_at)
    try:
        return _handle_held(worker, queue, message, lease)
    except BadRecord as bad:
        _unreadable_after_all(worker, lease, message, bad)
        return False
    finally:
        # Whatever happened (a storage outage mid-way, say), never renew a message
        # nobody works on: it lapses and is retried. A finished chunk's message is the
        # finisher's now, renewed until it is deleted.
        if not lease.handed_over:
            worker.keeper.drop(lease)


def _handle_held(worker: Context, queue: str, message: QueueMessage, lease: Lease) -> bool:
    task_message, job_type = None, None
    try:
        task_message = messages.decode(message.body)
        if _leftover(worker, task_message, lease):
            return False
        job = _job(worker, task_message.job_id, lease)
        job_type = job.job_type
        job_class = worker.job_classes.get(task_message.job_type)
        if job_class is None or job_class.queue != queue:
            raise BadMessage(f"unknown job type {task_message.job_type!r} on queue {queue!r}")
    except BadMessage as bad:
        log.error("message %s on %s poisoned: %s", message.id, queue, bad)
        worker.poison.move(lease, message.body, str(bad))
        if task_message is not None and task_message.job_type == job_type:
            # The job exists but nobody here can run it: say so on the job, or it would
            # wait for ever ("runner poison redrive" re-sends it once a worker can).
            # Only for the job's own type: a stray message naming another type for an
            # existing job is garbage and must not fail that job.
            set_job(
                worker.store,
                task_message.job_id,
                only_from=_OPEN_STATES,
                budget=lease.budget(retries.BOOKKEEPING, worker.clock),
                state="failed",
                error=f"{task_message.kind} message poisoned: {bad}",
            )
        return False
    return _run_task(worker, lease, message, job_class, job, task_message)


def _job(worker: Context, job_id: str, lease: Lease) -> JobRecord:
    # Fresh within a second (runner.worker.job_cache): a cancel or a pause counts at once.
    try:
        return worker.job_cache.job(job_id, lease.budget(retries.READ, worker.clock))
    except JobNotFound as missing:
        raise BadMessage(f"no job {job_id!r} in the checkpoint store") from missing
    except BadRecord as bad:
        # Nothing can be written to a job nobody can read: poison the message only.
        raise BadMessage(str(bad)) from bad


def _run_task(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job_class: type[ChunkedJob],
    job: JobRecord,
    task_message: messages.TaskMessage,
) -> bool:
    """Decide, claim and run the task; True if it was a chunk that ran."""
    kind, index = task_message.kind, task_message.index
    if kind != "chunk":
        # max_chunk_seconds caps chunks. Planning a huge job may take long, and finalize
        # has no checkpoint to stop at: an unrenewed lease would only let a second
        # worker start it while the first still runs.
        lease.max_seconds = None
    # For planning and finalize ``job`` was read afresh (``_job_now``): a cancel made
    # since this worker's last read is never missed by them.
    if job.hold is not None:
        _held_back(worker, lease, message, job, task_message)
        return False
    writer = Writer()
    claimed = _claim_planned(worker, lease, message, job_class, task_message, writer)
    if claimed is not None:
        _start(worker, lease, message, job_class, job, claimed, writer)
        return kind == "chunk"
    try:
        task = _task(worker.store, job, kind, index, lease.budget(retries.READ, worker.clock))
    except NotFound:
        if _leftover(worker, task_message, lease, fresh=True):
            return False  # the job's records were deleted since its record was read
        reason = f"no record of {kind} {index} of job {job.job_id!r}"
        log.error("message %s on %s poisoned: %s", message.id, lease.queue, reason)
        worker.poison.move(lease, message.body, reason)
        return False
    except BadRecord as bad:
        _poison_unreadable(worker, lease, message, job, kind, index, bad)
        return False
    if _recorded_for_another(task, task_message):
        if _leftover(worker, task_message, lease, fresh=True):
            return False
    if _held_on_record(worker, task, message):
        # Its holder lost the message's pop receipt and holds the task by its record:
        # hidden again for a lease, no claim, no attempt (docs/semantics.md §4).
        log.info(
            "%s %s of %s: running under its record's lease by %s; message hidden %d s",
            kind,
            index,
            job.job_id,
            task.owner,
            job_class.lease_seconds,
        )
        worker.keeper.release(lease, job_class.lease_seconds)
        return False
    verdict = _verdict(worker, task, message)
    if verdict is not None:
        log.info("%s %s of %s: %s; message deleted unrun", kind, index, job.job_id, verdict)
        if task.state == "done" and not _followed_already(job, task.kind):
            # The last holder may have died between marking done and what follows it.
            _after_done(worker, job.job_id, task, lease.budget(retries.BOOKKEEPING, worker.clock))
        worker.keeper.delete(lease)
        return False
    exhausted = _exhausted(task, message, job_class)
    if exhausted is not None:
        attempts = {"retryable": True, "max_attempts": job_class.max_attempts}  # ran out
        _poison_task(worker, lease, message, job, task, None, exhausted, None, attempts)
        return False
    claimed = _claim(worker, task, message, lease, writer)
    if claimed is None:
        worker.keeper.release(lease, job_class.lease_seconds)
        return False
    _start(worker, lease, message, job_class, job, claimed, writer, before=task)
    return kind == "chunk"


def _start(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job_class: type[ChunkedJob],
    job: JobRecord,
    claimed: TaskRecord,
    writer: Writer,
    before: TaskRecord | None = None,
) -> None:
    """Run the claimed task (``before``: its record as read before the claim, if it was)."""
    control = TaskControl(
        worker.store,
        claimed,
        lease,
        worker.clock,
        job_class.checkpoint_interval_seconds,
        worker.stopping,
        writer,
        taken_over=takeover_of(
            before, worker.workers, worker.clock, lease.budget(retries.READ, worker.clock)
        ),
    )
    lease.on_renewed = control.on_renewed
    if claimed.kind == "final":
        # Finalize has no state to hand back: once its message's pop receipt is lost,
        # its record holds it (docs/semantics.md §4).
        lease.on_record = control.hold_on_record
    with (
        task_running(worker.worker_id, worker.running, claimed, before),
        worker.holds.watching(job.job_id, control),
    ):
        _execute(worker, lease, message, job_class, job, control)


def _exhausted(task: TaskRecord, message: QueueMessage, job_class: type[ChunkedJob]) -> str | None:
    """Why this task must not be tried again, or None.

    Attempts are claims: a message released unrun by a graceful stop (or prefetched and
    handed back) is not an attempt, although the queue counts it as a delivery. The
    dequeue count is only a backstop, for messages that somehow never get claimed.
    """
    if task.attempt >= job_class.max_attempts:
        return (
            f"started {task.attempt} times without finishing (max_attempts="
            f"{job_class.max_attempts}); the last attempt died or lost its lease"
        )
    if message.dequeue_count > job_class.max_attempts * DELIVERIES_PER_ATTEMPT:
        return f"delivered {message.dequeue_count} times without finishing"
    return None


def _task(
    store: CheckpointStore, job: JobRecord, kind: TaskKind, index: int, budget: Budget
) -> TaskRecord:
    if kind == "chunk":
        return store.get_task(job.job_id, kind, index, budget)
    return store.ensure_task(job.job_id, kind, budget, job.incarnation)


def _held_on_record(worker: Context, task: TaskRecord, message: QueueMessage) -> bool:
    """True if the task runs on under its record's lease (:data:`LEASE_ON_RECORD`),
    whose end has not passed: this message's last holder lost its pop receipt."""
    return (
        task.state == "running"
        and task.message_id == message.id
        and bool(task.properties.get(LEASE_ON_RECORD))
        and task.lease_until is not None
        and task.lease_until > worker.clock.now()
    )


def _verdict(worker: Context, task: TaskRecord, message: QueueMessage) -> str | None:
    """Why this delivery must not run, or None if it may claim the task."""
    if task.state == "done":
        return "already done"
    if task.state == "poisoned":
        return "poisoned (redrive sends a new message)"
    if (
        task.state == "running"
        and task.message_id
        and task.message_id != message.id
        and task.lease_until is not None
        and task.lease_until > worker.clock.now()
    ):
        return f"duplicate delivery; running under message {task.message_id} by {task.owner}"
    return None


def _claim_planned(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job_class: type[ChunkedJob],
    task_message: messages.TaskMessage,
    writer: Writer,
) -> TaskRecord | None:
    """Claim a chunk from the planned record its message carries, without reading it.

    The write is conditional on the planned ETag, so it succeeds only if the chunk is
    still exactly as planned: waiting, never claimed. Returns None if the message
    carries no planned record or the record changed (it ran before, or was redriven):
    the caller then reads the record and decides as for any delivery.
    """
    if task_message.planned_etag is None or task_message.planned_payload is None:
        return None
    planned = worker.store.planned_task(
        task_message.job_id,
        task_message.index,
        task_message.planned_etag,
        task_message.planned_payload,
    )
    if _exhausted(planned, message, job_class) is not None:
        return None
    try:
        return worker.store.write_task(
            planned,
            _claim_changes(worker, planned, message, lease),
            token=writer.next(),
            budget=lease.budget(retries.CLAIM, worker.clock),
        )
    except (Conflict, NotFound):
        return None


def _claim_changes(
    worker: Context, task: TaskRecord, message: QueueMessage, lease: Lease
) -> dict[str, Any]:
    now = worker.clock.now()
    changes: dict[str, Any] = {
        "state": "running",
        "owner": worker.worker_id,
        "message_id": message.id,
        "attempt": task.attempt + 1,
        "started_on": now,
        # This process's Spark Connect session, if it has one already (else the
        # attempt's first Spark work records it); "" clears the last attempt's.
        SPARK_SESSION: connect_session_text() or "",
        "lease_until": now + timedelta(seconds=lease.lease_seconds),
    }
    if task.properties.get(LEASE_ON_RECORD):
        changes[LEASE_ON_RECORD] = False  # the last holder's, now dead
    return changes


def _claim(
    worker: Context, task: TaskRecord, message: QueueMessage, lease: Lease, writer: Writer
) -> TaskRecord | None:
    changes = _claim_changes(worker, task, message, lease)
    budget = lease.budget(retries.CLAIM, worker.clock)
    try:
        return worker.store.write_task(task, changes, token=writer.next(), budget=budget)
    except Conflict:
        log.info("%s %s of %s claimed by another worker first", task.kind, task.index, task.job_id)
        return None


def _execute(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job_class: type[ChunkedJob],
    job: JobRecord,
    control: TaskControl,
) -> None:
    task = control.task
    try:
        if task.kind == "plan":
            outcome: Any = run_plan(worker.store, worker.queues, job_class, job, control)
        else:
            outcome = run_user_code(worker.store, job_class, job, control)
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
        _stopped(worker, lease, control, lambda: worker.keeper.delete(lease))
        return
    except JobPaused:
        log.info("%s %s of %s handed back: the job is paused", task.kind, task.index, job.job_id)
        _stopped(
            worker,
            lease,
            control,
            lambda: _park(worker, lease, message, job, task.kind, task.index),
        )
        return
    except ChunkStopped as stopped:
        log.info("%s %s of %s handed back: %s", task.kind, task.index, job.job_id, stopped)
        _stopped(worker, lease, control)
        return
    except StorageTrouble as trouble:
        log.warning("%s %s of %s handed back: %s", task.kind, task.index, job.job_id, trouble)
        _stopped(worker, lease, control)
        return
    except BadRecord as bad:  # its payload, state or params cannot be read: no retry mends it
        # No traceback kept: the reason names the record and field, the stack is ours.
        final = {"retryable": False}
        _poison_task(worker, lease, message, job, task, (bad, ""), str(bad), control, final)
        return
    except BaseException as error:  # noqa: BLE001 - user code failed (even sys.exit): record it
        _failed(worker, lease, message, job_class, job, control, error, traceback.format_exc())
        return
    try:
        _succeeded(worker, lease, job, control, outcome)
    except CodecError as error:  # the result or the last state cannot be stored
        _failed(worker, lease, message, job_class, job, control, error, traceback.format_exc())
    except LeaseLost as lost:
        log.warning(
            "%s %s of %s: finished but fenced (%s)", task.kind, task.index, job.job_id, lost
        )
        worker.keeper.drop(lease)


def _stopped(
    worker: Context, lease: Lease, control: TaskControl, then: Callable[[], Any] | None = None
) -> None:
    """Hand the task back unfailed: newest state written, the claim's attempt given back
    (only the user's code spends attempts), then the message made visible again at once
    (or whatever ``then`` does with it: deleted for a cancelled job, parked for a paused
    one)."""
    refund = max(0, control.task.attempt - 1)
    try:
        control.write({"state": "waiting", "owner": "", "attempt": refund})
    except LeaseLost:
        worker.keeper.drop(lease)
        return
    except StorageError as error:
        # The store is out of reach past the lease: the message lapses and comes back.
        log.warning("handing back %s %s failed: %s", *_name(control.task), error)
        worker.keeper.drop(lease)
        return
    if then is None:
        worker.keeper.release(lease, 0)
    else:
        then()


def _held_back(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job: JobRecord,
    task: messages.TaskMessage,
) -> None:
    """A message of a cancelled job is deleted unrun; one of a paused job is parked."""
    what = f"{task.kind} {task.index}"
    if job.hold == "cancelled":
        log.info("%s of %s: the job was cancelled; message deleted unrun", what, job.job_id)
        worker.keeper.delete(lease)
    else:
        log.debug("%s of %s: the job is paused; message parked", what, job.job_id)
        _park(worker, lease, message, job, task.kind, task.index)


def park_seconds(paused_on: datetime | None, now: datetime) -> int:
    """How long a paused job's message stays out of sight before it is looked at again:
    a quarter of the time the job has been paused, from 5 minutes to an hour. Each park
    costs about 4 requests (a share of a receive, a send, a note, a delete): 4 per
    parked chunk every 5 minutes at first, every hour once the job has been paused for
    4 hours. Only a copy whose note was lost waits its park out after a resume."""
    paused_for = (now - paused_on).total_seconds() if paused_on is not None else 0.0
    return int(min(PARK_MAX_SECONDS, max(PARK_MIN_SECONDS, paused_for / 4)))


def _park(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job: JobRecord,
    kind: TaskKind,
    index: int,
) -> None:
    """Put a paused job's message out of sight for :func:`park_seconds`, as a fresh copy
    (the original deleted), so a long pause does not pile up deliveries that would look
    like a message failing again and again (``DELIVERIES_PER_ATTEMPT``), and note the
    copy's id and pop receipt so that a resume brings it back at once
    (:mod:`checkpoint.parks`, docs/semantics.md §16)."""
    delay = park_seconds(job.paused_on, worker.clock.now())
    budget = lease.budget(retries.MESSAGE, worker.clock)
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
        parks.note(records, job.job_id, kind, index, lease.queue, copy, budget)
    except StorageError as error:
        # The copy then comes back when its park ends, resumed or not.
        log.warning("noting parked message %s failed: %s", copy.id, error)
    worker.keeper.delete(lease)


def _name(task: TaskRecord) -> tuple[str, int]:
    return task.kind, task.index


def _succeeded(
    worker: Context, lease: Lease, job: JobRecord, control: TaskControl, outcome: Any
) -> None:
    task, done = control.task, {"state": "done", "owner": "", "done_on": worker.clock.now()}
    if task.kind == "chunk":
        # From here the finisher writes the record: a renewal must not change its ETag.
        task = control.end()
        values = {"result": outcome}
        if control.has_unwritten_state:  # else the stored state stands (no blob re-read)
            values["progress"] = control.newest_state
            done.update(control.checkpoint_changes())
        token = control.writer.next()
        final = worker.store.final_changes(task, done, values, token)  # CodecError: failed
        log.info(finished_line(task, worker.clock.monotonic() - control.started_at))
        lease.handed_over = True
        worker.finisher.add(Ended(task, final, lease))
        return
    task = control.write(done, {"progress": outcome} if task.kind == "plan" else {})
    log.info(finished_line(task, worker.clock.monotonic() - control.started_at))
    # Marked done before the message is deleted: a crash in between re-delivers a message
    # that is deleted unrun, after _after_done has run again.
    _after_done(worker, job.job_id, task, lease.budget(retries.BOOKKEEPING, worker.clock))
    worker.keeper.delete(lease)


def _followed_already(job: JobRecord, kind: TaskKind) -> bool:
    """True if the job's record shows that what follows a done task of this kind was
    done (a job's state only moves on, so a record read a moment ago may tell): a
    duplicate delivery of a done chunk then costs no completion check."""
    if kind == "chunk":
        return job.state in ("finalizing", "done")
    if kind == "plan":
        return job.state != "planning"
    return job.state == "done"


def _after_done(worker: Context, job_id: str, task: TaskRecord, budget: Budget) -> None:
    """What follows a task's completion (idempotent: it may run again after a crash)."""
    if task.kind == "chunk":
        worker.completion.check(job_id, budget, layout.shard_of(task.index))
    elif task.kind == "plan":
        total = int(worker.store.value(task.properties, "progress") or 0)
        set_job(worker.store, job_id, budget, total=total, state="running", only_from=("planning",))
        worker.completion.check(job_id, budget)
    else:
        set_job(worker.store, job_id, budget, state="done", only_from=("running", "finalizing"))


def _failed(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job_class: type[ChunkedJob],
    job: JobRecord,
    control: TaskControl,
    error: BaseException,
    trace: str,
) -> None:
    task = control.task
    log.warning(
        "%s %s of %s failed (attempt %d): %r",
        task.kind,
        task.index,
        job.job_id,
        task.attempt,
        error,
    )
    # What status and the report say of it: whether trying again could have helped.
    verdict = {"retryable": _retryable(error, job_class), "max_attempts": job_class.max_attempts}
    if not verdict["retryable"]:
        reason = f"failed on attempt {task.attempt}, not retryable: {error!r}"
        _poison_task(worker, lease, message, job, task, (error, trace), reason, control, verdict)
        return
    if task.attempt >= job_class.max_attempts:
        reason = f"failed on attempt {task.attempt} of {job_class.max_attempts}: {error!r}"
        _poison_task(worker, lease, message, job, task, (error, trace), reason, control, verdict)
        return
    # Visible again after the backoff, which Azure caps at 7 days.
    wait = min(compute_backoff(job_class.backoff, task.attempt, worker.rng), MAX_VISIBILITY_SECONDS)
    retry_at = worker.clock.now() + timedelta(seconds=wait)  # what status shows
    # The newest state is written too: it was encoded once already, at its checkpoint.
    try:
        changes = {"state": "retrying", "owner": "", "retry_at": retry_at, **verdict}
        control.write({**changes, **error_properties(error, trace)})
    except LeaseLost:
        worker.keeper.drop(lease)
        return
    worker.keeper.release(lease, wait)


def _retryable(error: BaseException, job_class: type[ChunkedJob]) -> bool:
    """False for what trying again will not mend: ``ChunkFailed(..., retry=False)`` and
    the job class's ``non_retryable`` exception types."""
    if isinstance(error, ChunkFailed) and not error.retry:
        return False
    return not isinstance(error, job_class.non_retryable)


def _poison_task(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job: JobRecord,
    task: TaskRecord,
    failure: tuple[BaseException, str] | None,
    reason: str,
    control: TaskControl | None = None,
    verdict: Mapping[str, Any] = {},
) -> None:
    """Mark the task poisoned (the job fails) and move its message to the poison queue;
    ``verdict`` (``retryable``, ``max_attempts``) is kept for status and the report."""
    error, trace = failure if failure else (RuntimeError(reason), "")
    # "" clears a verdict an earlier failed attempt left (a merge keeps what None names).
    changes = {
        "state": "poisoned",
        "owner": "",
        "retryable": "",
        **verdict,
        **error_properties(error, trace),
    }
    values = {"progress": control.newest_state} if control and control.has_unwritten_state else {}
    if control and values:
        changes.update(control.checkpoint_changes())
    current = control.end() if control else task
    writer = control.writer if control else Writer()
    budget = lease.budget(retries.TASK_WRITE, worker.clock)
    try:
        _write_poisoned(worker, job, current, changes, values, reason, writer, budget)
    except (Conflict, NotFound):
        log.warning(
            "%s %s of %s changed while poisoning; left to its owner",
            task.kind,
            task.index,
            job.job_id,
        )
        worker.keeper.drop(lease)
        return
    log.error("%s %s of %s poisoned: %s", task.kind, task.index, job.job_id, reason)
    worker.poison.move(lease, message.body, reason)
    if task.kind == "chunk":
        worker.completion.check(job.job_id, budget, layout.shard_of(task.index), poisoned=True)


def _write_poisoned(
    worker: Context,
    job: JobRecord,
    task: TaskRecord,
    changes: dict[str, Any],
    values: dict[str, Any],
    reason: str,
    writer: Writer,
    budget: Budget,
) -> None:
    token = writer.next()
    if task.kind == "chunk":
        worker.store.count_chunk(task, changes, values, "poisoned", token=token, budget=budget)
    else:
        worker.store.write_task(task, changes, values, token=token, budget=budget)
        set_job(
            worker.store,
            job.job_id,
            budget,
            state="failed",
            error=f"{task.kind} poisoned: {reason}",
        )


# --------------------------------------------------------------------------- bad records


def _poison_unreadable(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    job: JobRecord,
    kind: TaskKind,
    index: int,
    bad: BadRecord,
) -> None:
    """Poison a task whose record cannot be read, writing over it with the ETag it has.

    The write gives every property a reader checks a readable value, so the record reads
    as poisoned from then on and is counted once. A record that says it ended already
    (done or poisoned) was counted then: only its message is poisoned.
    """
    reason = str(bad)
    try:
        found = worker.store.task_as_found(job.job_id, kind, index)
        if found.properties.get("state") not in ("done", "poisoned"):
            attempt = found.properties.get("attempt")
            changes = {
                "state": "poisoned",
                "attempt": attempt if checks.is_whole(attempt) and attempt >= 0 else 0,
                "owner": "",
                "message_id": "",
                "lease_until": worker.clock.now(),
                "retryable": False,
                **error_properties(bad),
            }
            budget = lease.budget(retries.TASK_WRITE, worker.clock)
            _write_poisoned(worker, job, found, changes, {}, reason, Writer(), budget)
    except (Conflict, NotFound):
        log.warning("%s changed while poisoning; left to its owner", bad)
        worker.keeper.drop(lease)
        return
    log.error("%s %s of %s poisoned: %s", kind, index, job.job_id, reason)
    worker.poison.move(lease, message.body, reason)
    if kind == "chunk":
        worker.completion.check(
            job.job_id,
            lease.budget(retries.BOOKKEEPING, worker.clock),
            layout.shard_of(index),
            poisoned=True,
        )


def _unreadable_after_all(
    worker: Context, lease: Lease, message: QueueMessage, bad: BadRecord
) -> None:
    """A record read on the way (the job's, a counter, a value) cannot be read: the
    message would fail the same way each time, so it is poisoned unless it was dealt
    with already (deleted, released, or handed to the finisher)."""
    log.error("message %s on %s: %s", message.id, lease.queue, bad)
    if lease.active and not lease.lost and not lease.handed_over:
        worker.poison.move(lease, message.body, str(bad))


# --------------------------------------------------------------------------- deleted jobs


def _leftover(
    worker: Context, task_message: messages.TaskMessage, lease: Lease, fresh: bool = False
) -> bool:
    """Delete the message unrun if it is left over from a deleted job; True if it was.

    Never poisoned: ``runner delete`` cannot reach messages that were invisible then
    (held, backing off, delayed), and they surface later. ``fresh``: judge by the job
    record as stored now, not as this worker remembers it.
    """
    job = _job_now(worker, task_message, lease, fresh)
    why = leftover_reason(task_message, job)
    if why is None:
        if job is not None:
            worker.completion.observe(job)
        return False
    log.info(
        "%s %s of %s: %s; message deleted unrun",
        task_message.kind,
        task_message.index,
        task_message.job_id,
        why,
    )
    worker.keeper.delete(lease)
    return True


def leftover_reason(task_message: messages.TaskMessage, job: JobRecord | None) -> str | None:
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


def _recorded_for_another(task: TaskRecord, task_message: messages.TaskMessage) -> bool:
    """Whether the task was recorded for another incarnation than the message's: the
    job record this worker remembers may be of a job deleted since (and submitted again
    under its id), so the stored one decides."""
    return None not in (task.incarnation, task_message.incarnation) and (
        task.incarnation != task_message.incarnation
    )


def _job_now(
    worker: Context, task_message: messages.TaskMessage, lease: Lease, fresh: bool
) -> JobRecord | None:
    """The job record to judge a message by, None if there is none (BadRecord raised).

    A record read in the last second (:mod:`runner.worker.job_cache`) serves a chunk it does not
    condemn. Planning and finalize are judged by the stored record (they would record
    their task anew for a job gone: ``ensure_task``), and so is a chunk the remembered
    record condemns: it may be of a job deleted and submitted again since.
    """
    budget = lease.budget(retries.READ, worker.clock)
    fresh = fresh or task_message.kind != "chunk"
    try:
        job = worker.job_cache.job(task_message.job_id, budget, fresh=fresh)
        if not fresh and leftover_reason(task_message, job) is not None:
            job = worker.job_cache.job(task_message.job_id, budget, fresh=True)
    except JobNotFound:
        return None
    return job
