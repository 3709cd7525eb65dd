"""The four kinds of task, one class each: planning, feeding, a chunk and finalize.

The engine runs every task through the same steps (:mod:`runner.worker.tasks.life`); where a
kind does a step its own way, the step asks the task's kind (:func:`kind_of`) instead of
testing its name: what its delivery reads, whether it takes a chunk slot, how it runs,
what follows it done or poisoned, what keeps it leased. A new kind of task is a class here,
not edits along the path.

What differs, kind by kind:

- *chunk*: takes a running slot (counted toward the running limits, capped by
  ``max_chunk_seconds``, timed for the prefetch depth), its message may move to its
  type's resume queue, its end is written with its shard's counter (the finisher's when
  done), and the worker's metrics count it.
- *plan*, *feed*, *final*: one record per job, created on first delivery; they hold no
  slot and are judged by the job record as stored now. Planning's end sets the job's
  total; a feed step whose successor's message is received early waits for it;
  finalize is leased on its record once its message's pop receipt is lost.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from checkpoint import layout, retries
from checkpoint.records import CONTROL_WORDS, JobRecord, TaskKind, TaskRecord
from checkpoint.retries import Budget
from checkpoint.settle import Writer
from jobs import dependencies
from runner.worker.leases.lease import Lease
from runner.worker.limits.unit_limits import LimitedControl
from runner.worker.tasks.delivery import Context, Delivery
from runner.worker.tasks.feed import NextStep, run_feed
from runner.worker.tasks.job_completion import set_job
from runner.worker.tasks.plan import run_plan
from runner.worker.tasks.record_changes import TaskChanges
from runner.worker.tasks.user_code import run_chunk, run_finalize
from runner.worker.tasks.verdict import Verdict


class Kind(ABC):
    """What every kind does alike; each subclass overrides the steps it does its own way.

    The flags are class constants, so a step's test reads as the decision it makes.
    """

    name: ClassVar[TaskKind]
    #: Runs in one of the worker's chunk slots: counts toward the running limits, is
    #: capped by ``max_chunk_seconds``, and its time tells the prefetch depth.
    takes_slot: ClassVar[bool] = False
    #: Its message is copied to its type's resume queue while it runs
    #: (:mod:`runner.worker.tasks.resume`).
    moves_to_resume: ClassVar[bool] = False
    #: A job record read in the last second may clear its message
    #: (:mod:`runner.worker.tasks.leftovers`); otherwise the stored one decides.
    trusts_cached_job: ClassVar[bool] = False
    #: Counted by the worker's chunk metrics (:mod:`runner.worker.observing.metrics`).
    in_chunk_metrics: ClassVar[bool] = False
    #: Its done mark goes to the :class:`~runner.worker.tasks.chunk_finisher.Finisher` with
    #: its shard's counter, instead of onto its record here.
    ends_in_finisher: ClassVar[bool] = False
    #: A delivery finding it running under another message waits (hidden a moment)
    #: instead of being deleted as a duplicate (:mod:`runner.worker.tasks.claim`).
    waits_while_running: ClassVar[bool] = False

    def title(self, job_id: str, index: int) -> str:
        """What log lines call the task: ``planning of job-x``."""
        return f"{CONTROL_WORDS[self.name]} of {job_id}"

    def read(self, delivery: Delivery) -> TaskRecord:
        """The task's record, created waiting if absent (one per job); raises NotFound
        if the job's records are gone, BadRecord if unreadable."""
        store, job = delivery.worker.store, delivery.job
        budget = delivery.budget(retries.READ)
        return store.ensure_task(job.job_id, self.name, budget, job.incarnation)

    def execute(self, delivery: Delivery, control: LimitedControl, after: NextStep) -> Any:
        """Run the claimed task under its lease (:meth:`watch_lease`, then :meth:`run`)."""
        self.watch_lease(delivery.lease, control)
        return self.run(delivery, control, after)

    def watch_lease(self, lease: Lease, control: LimitedControl) -> None:
        """Tell the lease what to write when it renews: the record's ``lease_until``."""
        lease.on_renewed = control.on_renewed

    @abstractmethod
    def run(self, delivery: Delivery, control: LimitedControl, after: NextStep) -> Any:
        """Run the claimed task; return what its done mark keeps."""
        ...

    def done_values(self, outcome: Any) -> dict[str, Any]:
        """The msgpack values its done mark writes beside the state."""
        return {}

    @abstractmethod
    def followed_already(self, job: JobRecord) -> bool:
        """True if the job's record shows that what follows this kind done was done (a
        job's state only moves on), so a duplicate delivery costs no bookkeeping."""
        ...

    def after_done(  # noqa: B027 - nothing follows by default; a kind may add a step
        self, worker: Context, job_id: str, task: TaskRecord, budget: Budget
    ) -> None:
        """What follows the task's completion (idempotent: it may run again after a
        crash between the done mark and its message's deletion)."""

    def write_poisoned(
        self,
        delivery: Delivery,
        task: TaskRecord,
        changes: TaskChanges,
        values: dict[str, Any],
        verdict: Verdict,
        writer: Writer,
    ) -> None:
        """Write the poisoned mark on its record, then fail the job: a job whose
        planning, feeding or finalize cannot run cannot end well (with a
        ``PipelineStop``'s own words, if that is why)."""
        store, budget = delivery.worker.store, delivery.budget(retries.TASK_WRITE)
        store.write_task(task, changes.properties(), values, token=writer.next(), budget=budget)
        delivery.worker.hooks.poisoned(delivery.job.job_type, self.name)
        error = verdict.job_error or f"{self.name} poisoned: {verdict.reason}"
        set_job(store, delivery.job_id, budget, state="failed", error=error)

    def after_poisoned(  # noqa: B027 - nothing follows by default; a kind may add a step
        self, worker: Context, job_id: str, index: int, budget: Budget
    ) -> None:
        """What follows its poisoned mark beside failing the job (nothing: the job
        failed already)."""


class PlanKind(Kind):
    """Planning: runs ``split``, records the chunks, sends the first window's messages;
    its done mark keeps the chunk count and sets the job's total."""

    name = "plan"

    def run(self, delivery: Delivery, control: LimitedControl, after: NextStep) -> Any:
        worker = delivery.worker
        if delivery.job.state == "waiting":
            # Started after the jobs it runs after: its starter sends this message
            # before it records the job planning, and may have died in between
            # (jobs.dependencies).
            budget = delivery.budget(retries.BOOKKEEPING)
            set_job(worker.store, delivery.job_id, budget, state="planning", only_from=("waiting",))
        return run_plan(worker.store, worker.queues, delivery.job_class, delivery.job, control)

    def done_values(self, outcome: Any) -> dict[str, Any]:
        return {"progress": outcome}

    def followed_already(self, job: JobRecord) -> bool:
        return job.state not in ("waiting", "planning")

    def after_done(self, worker: Context, job_id: str, task: TaskRecord, budget: Budget) -> None:
        total = int(worker.store.value(task.properties, "progress") or 0)
        started = ("waiting", "planning")
        set_job(worker.store, job_id, budget, total=total, state="running", only_from=started)
        worker.completion.check(job_id, budget)


class FeedKind(Kind):
    """Feeding: sends the rest of the chunks' messages as chunks end, one step per
    message; its record keeps the cursor."""

    name = "feed"
    waits_while_running = True

    def run(self, delivery: Delivery, control: LimitedControl, after: NextStep) -> Any:
        worker, window = delivery.worker, delivery.job_class.feed_window
        first = delivery.index
        return run_feed(
            worker.store, worker.queues, delivery.job, window, first, control, after.send
        )

    def done_values(self, outcome: Any) -> dict[str, Any]:
        return {"progress": outcome}

    def followed_already(self, job: JobRecord) -> bool:
        return True  # nothing follows feeding: completion follows the chunks


class ChunkKind(Kind):
    """One chunk: the user's ``process``, in a slot, ended with its shard's counter."""

    name = "chunk"
    takes_slot = True
    moves_to_resume = True
    trusts_cached_job = True
    in_chunk_metrics = True
    ends_in_finisher = True

    def title(self, job_id: str, index: int) -> str:
        return f"chunk {index} of {job_id}"

    def read(self, delivery: Delivery) -> TaskRecord:
        """Its record as planned (never created here: planning records chunks)."""
        budget = delivery.budget(retries.READ)
        return delivery.worker.store.get_task(delivery.job_id, self.name, delivery.index, budget)

    def run(self, delivery: Delivery, control: LimitedControl, after: NextStep) -> Any:
        return run_chunk(delivery.worker.store, delivery.job_class, delivery.job, control)

    def followed_already(self, job: JobRecord) -> bool:
        return job.state in ("finalizing", "done")

    def after_done(self, worker: Context, job_id: str, task: TaskRecord, budget: Budget) -> None:
        worker.completion.check(job_id, budget, layout.shard_of(task.index))

    def write_poisoned(
        self,
        delivery: Delivery,
        task: TaskRecord,
        changes: TaskChanges,
        values: dict[str, Any],
        verdict: Verdict,
        writer: Writer,
    ) -> None:
        """In one batch with its shard's ``poisoned`` counter; the job fails only past
        what it tolerates (:meth:`after_poisoned`)."""
        store, token = delivery.worker.store, writer.next()
        budget = delivery.budget(retries.TASK_WRITE)
        store.count_chunk(
            task, changes.properties(), values, "poisoned", token=token, budget=budget
        )
        delivery.worker.hooks.poisoned(delivery.job.job_type, self.name)

    def after_poisoned(self, worker: Context, job_id: str, index: int, budget: Budget) -> None:
        worker.completion.check(job_id, budget, layout.shard_of(index), poisoned=True)


class FinalKind(Kind):
    """Finalize: the user's ``finalize`` once every chunk ended; its end ends the job."""

    name = "final"

    def watch_lease(self, lease: Lease, control: LimitedControl) -> None:
        """Finalize has no state to hand back: once its message's pop receipt is lost,
        its record holds it (docs/semantics.md §4)."""
        super().watch_lease(lease, control)
        lease.on_record = control.lease_on_record

    def run(self, delivery: Delivery, control: LimitedControl, after: NextStep) -> Any:
        return run_finalize(delivery.worker.store, delivery.job_class, delivery.job, control)

    def followed_already(self, job: JobRecord) -> bool:
        return job.state == "done" and job.dependents_started

    def after_done(self, worker: Context, job_id: str, task: TaskRecord, budget: Budget) -> None:
        """The job ends done, then the jobs waiting on it start (before this message is
        deleted: a crash in between leaves the message, and this runs again)."""
        store = worker.store
        set_job(store, job_id, budget, state="done", only_from=("running", "finalizing"))
        dependencies.start_dependents(store, worker.queues, job_id, budget)
        set_job(store, job_id, budget, dependents_started=True, only_from=("done",))


#: The kind each name stands for (the one place a kind's name is looked at): a lookup,
#: not a call, as the path looks a kind up at most of its steps.
KINDS: Mapping[str, Kind] = {
    each.name: each for each in (PlanKind(), FeedKind(), ChunkKind(), FinalKind())
}


def kind_of(name: TaskKind) -> Kind:
    """The kind a record or message names (the one place a kind's name is looked at)."""
    return KINDS[name]
