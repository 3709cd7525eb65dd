"""The runner's side of a running task: coalesced, fenced checkpoints and the stop signal.

Checkpoints are coalesced (:mod:`checkpoint.coalescing`): ``offer`` keeps only the newest
state and writes it when a checkpoint interval has passed since the last write, so
calling ``chunk.checkpoint`` in a tight loop costs a memory store, not a round trip.
Every write is conditional on the ETag of the previous one (fencing): if anyone else
wrote the record, the write fails, the lease is marked lost and ``LeaseLost`` is raised.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from checkpoint import codec, retries
from checkpoint.clock import Clock
from checkpoint.coalescing import CheckpointCoalescer
from checkpoint.errors import Conflict, LeaseLost, NotFound, StorageError, StorageTrouble
from checkpoint.records import (
    LEASE_ON_RECORD,
    OUTPUTS,
    SPARK_SESSION,
    Progress,
    TaskRecord,
)
from checkpoint.retries import Budget
from checkpoint.settle import Writer
from checkpoint.store import CheckpointStore
from jobs.chunk import Takeover
from jobs.errors import ChunkStopped, JobCancelled, JobDeleted, JobPaused
from runner.worker.hooks import Hooks
from runner.worker.leases.lease import Lease
from runner.worker.tasks.record_changes import TaskChanges

T = TypeVar("T")
log = logging.getLogger(__name__)


class TaskControl:
    """Checkpoints and stop signal of one task under one lease.

    Args:
        store: where the task record lives.
        task: the record as claimed (its ETag fences every later write).
        lease: the message lease the task runs under.
        interval_seconds: least time between two checkpoint writes.
        worker_stopping: set when the worker is shutting down.
        writer: the claim's writer tokens (its own applied writes are recognised by
            them, so it never mistakes one for another worker's).
        taken_over: the attempt the claim took the task over from, if known.
        hooks: told of each checkpoint write (:meth:`Hooks.checkpointed`), under
            ``job_type``.
    """

    def __init__(
        self,
        store: CheckpointStore,
        task: TaskRecord,
        lease: Lease,
        clock: Clock,
        interval_seconds: float,
        worker_stopping: threading.Event,
        writer: Writer | None = None,
        taken_over: Takeover | None = None,
        hooks: Hooks | None = None,
        job_type: str = "",
    ):
        self._store = store
        self._checkpointed = functools.partial((hooks or Hooks()).checkpointed, job_type)
        self.taken_over = taken_over
        self._outputs: dict[str, Any] | None = None  # read from the record when first asked
        #: Why the job stopped wanting this task ("cancelled", "paused"), or None:
        #: told by the worker's stop-order watcher (:mod:`runner.worker.stop_orders`).
        self.stop_order: str | None = None
        self.writer = writer or Writer()
        self._clock = clock
        self._worker_stopping = worker_stopping
        self._lock = threading.Lock()
        self.task = task
        self.lease = lease
        #: The newest state (and how far the chunk said it got) and when it is due.
        self._coalescer = CheckpointCoalescer(clock, interval_seconds)
        self.started_at = clock.monotonic()
        self._recorded_visible_at = lease.visible_at  # the claim wrote this deadline
        self.writes = 0
        self._ended = False

    # ----------------------------------------------------------------- ChunkControl

    @property
    def claim(self) -> str:
        return self.writer.claim

    def publish(self, name: str, record: Mapping[str, Any]) -> None:
        # Checked (msgpack-able, a snapshot) before anything is written.
        record = codec.decode(codec.encode(dict(record), "published output"), "published output")
        outputs = {**self.published(), name: record}
        # Made now and retried in place while the lease lasts: a publication is rare and
        # the caller waits on it. Storage trouble past that hands the chunk back (no
        # attempt spent); a refusal is LeaseLost: nothing was published.
        runner_side(lambda: self.write(TaskChanges(), {OUTPUTS: outputs}), f"publishing {name}")
        self._outputs = outputs

    def published(self) -> dict[str, Any]:
        if self._outputs is None:
            found = runner_side(
                lambda: self.lease_budget(retries.READ).call(
                    lambda: self._store.value(self.task.properties, OUTPUTS, of=self.task.name)
                ),
                "reading the chunk's published outputs",
            )
            self._outputs = dict(found) if isinstance(found, dict) else {}
        return dict(self._outputs)

    def record_spark_session(self, session: str) -> None:
        if self.task.properties.get(SPARK_SESSION) == session:
            return
        changes = TaskChanges(spark_session=session)
        runner_side(lambda: self.write(changes), "recording the Spark session")

    def offer(self, state: Any, progress: Progress | None = None) -> None:
        # A snapshot, taken now: the caller may go on mutating its state object, and a
        # value msgpack cannot hold fails here, at the checkpoint that gave it.
        state = codec.decode(codec.encode(state, "checkpoint state"), "checkpoint state")
        with self._lock:
            if self._coalescer.offer(state, progress):
                try:
                    self._write_locked()
                except LeaseLost:
                    raise
                except StorageError as error:
                    # A transient fault must not fail the chunk: keep the state and try
                    # again at the next checkpoint (the lease deadline still applies).
                    self._coalescer.postpone()
                    log.warning(
                        "checkpoint of %s %s not written, will retry: %s", *self._name(), error
                    )

    def raise_if_stopped(self) -> None:
        now = self._clock.monotonic()
        if self.lease.expired(now):
            self.lease.wait_for_renewal(now)  # only one sent before the deadline counts
            now = self._clock.monotonic()
        if self.lease.expired(now):
            # Not flushed: the chunk may be someone else's now, and a paused worker must
            # stop without waiting for the store to tell it so.
            why = self.lease.why_lost(now)
            self.lease.lose(why)  # it was, and so it is counted
            raise LeaseLost(why)
        if self.stop_order == "deleted":
            # Not flushed: the task's record is deleted, or about to be.
            raise JobDeleted(f"job {self.task.job_id} was deleted")
        if self.stop_order == "cancelled":
            self._flush_before_stop()
            raise JobCancelled("the job was cancelled; progress saved, chunk dropped")
        if self.stop_order == "paused":
            self._flush_before_stop()
            raise JobPaused("the job was paused; progress saved, chunk handed back")
        if self._worker_stopping.is_set():
            self._flush_before_stop()
            raise ChunkStopped("worker is stopping; progress saved, chunk released")
        if self.lease.must_hand_back(now):
            self._flush_before_stop()
            raise ChunkStopped(
                "the queue lost this lease's pop receipt to storage trouble (no renewal is "
                "possible); progress saved, chunk handed back"
            )

    def _flush_before_stop(self) -> None:
        try:
            self.flush()
        except LeaseLost:
            raise
        except StorageError as error:  # the stop path writes the newest state again
            log.warning("flushing %s %s before stopping failed: %s", *self._name(), error)

    def stop_for(self, order: str) -> bool:
        """The task's job wants it stopped (``order``: "cancelled" or "paused"):
        ``stopping`` is true from now on, and the next checkpoint writes the newest state
        and raises. The first order stands (a paused chunk handed back and then
        cancelled is dropped at its next delivery), except a deletion: the job's records
        are going, so the task must stop without writing them. True if this is news."""
        if self.stop_order == order or (self.stop_order is not None and order != "deleted"):
            return False
        self.stop_order = order
        return True

    @property
    def stopping(self) -> bool:
        now = self._clock.monotonic()
        return (
            self._worker_stopping.is_set()
            or self.stop_order is not None
            or (self.lease.expired(now) and not self.lease.renewal_pending(now))
            or self.lease.must_hand_back(now)
        )

    def lease_budget(self, policy: retries.RetryPolicy = retries.TASK_WRITE) -> Budget:
        """Retries of ``policy`` for as long as the lease lasts (renewals extend it)."""
        return Budget(policy, self._clock, deadline=lambda: self.lease.visible_at)

    def _name(self) -> tuple[str, int]:
        return self.task.kind, self.task.index

    # ----------------------------------------------------------------- runner side

    @property
    def newest_state(self) -> Any:
        """The newest offered state, or the state the task started from."""
        if not self._coalescer.unwritten:
            return self._store.value(self.task.properties, "progress")
        return self._coalescer.newest

    @property
    def has_unwritten_state(self) -> bool:
        return self._coalescer.unwritten

    @property
    def progress(self) -> Progress | None:
        """How far the chunk last said it got in this attempt (None: it has not said)."""
        return self._coalescer.progress

    def checkpoint_changes(self) -> TaskChanges:
        """What goes with the newest state in the write that stores it: when, and how
        far the chunk said it got if that changed since the last write (a few bytes in
        the same write, never a write of their own)."""
        progress = self._coalescer.unwritten_progress()
        return TaskChanges(checkpoint_on=self._clock.now(), how_far=progress)

    def flush(self) -> None:
        """Write the newest state now if it was not written yet (retried in place while
        the lease lasts)."""
        with self._lock:
            if self._coalescer.unwritten:
                budget = self.lease_budget()
                timed(
                    self._clock,
                    self._checkpointed,
                    lambda: self._fenced({}, {"progress": self._coalescer.newest}, budget),
                )

    def write(self, changes: TaskChanges, values: dict[str, Any] | None = None) -> TaskRecord:
        """A fenced write of other fields (state, error, ...) with the newest state,
        retried in place while the lease lasts."""
        with self._lock:
            values = dict(values or {})
            if self._coalescer.unwritten:
                values.setdefault("progress", self._coalescer.newest)
            self._fenced(changes.properties(), values, self.lease_budget())
            return self.task

    def end(self) -> TaskRecord:
        """The task is ending and its last write is made elsewhere (a done or poisoned
        mark with a counter): renewals write nothing more, so that mark's ETag stays
        valid. Returns the record as last written."""
        with self._lock:
            self._ended = True
            return self.task

    def on_renewed(self, lease: Lease) -> None:
        """Keep the record's ``lease_until`` fresh for status and duplicate detection.

        Skipped when a checkpoint already recorded this renewal's deadline, once the
        task is ending (:meth:`end`), and for a deleted job (no record to write). Runs
        on the lease keeper's refresh pool."""
        if self.stop_order == "deleted" or self._recorded_visible_at >= lease.visible_at:
            return
        try:
            with self._lock:
                if self._ended:
                    return
                unwritten = self._coalescer.unwritten
                values = {"progress": self._coalescer.newest} if unwritten else {}
                self._fenced({}, values, retries.once(self._clock))
        except LeaseLost:
            pass  # the lease is marked lost; the chunk learns at its next checkpoint
        except StorageError as error:
            # Not raised into the keeper's pool: it has nobody to tell. The next due
            # checkpoint writes the newest state.
            log.warning("refreshing %s %s after a renewal failed: %s", *self._name(), error)

    def lease_on_record(self, lease: Lease, until: float) -> None:
        """Lease the task on its record alone up to ``until`` (monotonic): the lease's pop
        receipt was lost, so ``lease_until`` and :data:`LEASE_ON_RECORD` tell a
        delivery of its message meanwhile to hide it again. Runs on the lease keeper's
        renewal pool; raises LeaseLost when fenced, StorageError when not written (the
        keeper retries as for a renewal). Nothing is written once the task is ending:
        its last write carries the record's ETag."""
        with self._lock:
            if self._ended:
                return
            unwritten = self._coalescer.unwritten
            values = {"progress": self._coalescer.newest} if unwritten else {}
            self._fenced({LEASE_ON_RECORD: True}, values, retries.once(self._clock), until)

    def _write_locked(self) -> None:
        # Forget the state only once written: after a failed write (a busy service) the
        # failure path must still flush it. Not retried in place: the user's thread goes
        # on, and the next due checkpoint writes the newest state.
        once = retries.once(self._clock)
        timed(
            self._clock,
            self._checkpointed,
            lambda: self._fenced({}, {"progress": self._coalescer.newest}, once),
        )

    def _fenced(
        self,
        changes: dict[str, Any],
        values: dict[str, Any],
        budget: Budget,
        until: float | None = None,
    ) -> None:
        """A write fenced by the record's ETag, recording the lease's end (``until``,
        monotonic, if given: the end it is being extended to)."""
        if self.lease.lost:
            raise LeaseLost(self.lease.why_lost(self._clock.monotonic()))
        visible_at = self.lease.visible_at if until is None else until
        changes = {"lease_until": self._lease_until(visible_at), **changes}
        if "progress" in values:
            changes = {**self.checkpoint_changes().properties(), **changes}
        try:
            self.task = self._store.write_task(
                self.task, changes, values, token=self.writer.next(), budget=budget
            )
        except (Conflict, NotFound) as fenced:
            self.lease.lose("another worker took over the chunk (its record changed)")
            raise LeaseLost(
                f"task record of {self.task.kind} {self.task.index} changed: fenced"
            ) from fenced
        # Every write carries the newest unwritten state, as "progress", if there is one.
        self._coalescer.wrote(state="progress" in values)
        self._recorded_visible_at = visible_at
        self.writes += 1

    def _lease_until(self, visible_at: float) -> datetime:
        remaining = max(0.0, visible_at - self._clock.monotonic())
        return self._clock.now() + timedelta(seconds=remaining)


def timed(clock: Clock, tell: Callable[[float, bool], None], write: Callable[[], None]) -> None:
    """A checkpoint write, timed on ``clock`` and told (its seconds, whether it was
    made); a fenced one is the lease's loss, told as such, not here."""
    started = clock.monotonic()
    try:
        write()
    except LeaseLost:
        raise
    except StorageError:
        tell(clock.monotonic() - started, False)
        raise
    tell(clock.monotonic() - started, True)


def runner_side(action: Callable[[], T], what: str) -> T:
    """Run a storage step of the runner's own inside a task: its failure past the retry
    budget is :class:`StorageTrouble` (the task is handed back, no attempt spent), never
    a failure of the user's code."""
    try:
        return action()
    except LeaseLost:
        raise
    except StorageError as error:
        raise StorageTrouble(f"{what}: {error}") from error
