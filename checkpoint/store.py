"""The checkpoint store: job and task records with ETag compare-and-swap, on any backend.

Every write of a task record is conditional on the ETag its writer last saw, so a
worker that lost its chunk can never overwrite the new owner's progress: the write
raises :class:`~checkpoint.errors.Conflict` and the runner turns that into ``LeaseLost``.
Values larger than :data:`~checkpoint.records.SPILL_BYTES` are spilled to a blob that
is never overwritten (each write gets a fresh name), so a lost race leaves the winner's
blob intact; the loser deletes its own.

:class:`CheckpointStore` is the one front every caller uses; each concern is a module of
its own behind it: :mod:`checkpoint.values` (values inline or spilled),
:mod:`checkpoint.catalogue.job_records`, :mod:`checkpoint.tasks.task_records`,
:mod:`checkpoint.tasks.counting` (a chunk's end and its shard's counter in one batch),
:mod:`checkpoint.tasks.reading` and :mod:`checkpoint.tasks.chunk_pages`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from checkpoint import layout, retries
from checkpoint.catalogue.dependents import dependents, pipeline_steps
from checkpoint.catalogue.job_index import CatalogueEntry, JobIndex
from checkpoint.catalogue.job_records import JobRecords
from checkpoint.clock import Clock, SystemClock
from checkpoint.deletion import Deleted
from checkpoint.errors import BadRecord, StorageError
from checkpoint.records import JobRecord, TaskKind, TaskRecord
from checkpoint.retries import Budget
from checkpoint.storage import Storage, Where
from checkpoint.tasks.chunk_pages import ChunkCursor, ChunkPage, ChunkPages
from checkpoint.tasks.counting import CounterName, ShardCounters
from checkpoint.tasks.reading import JobReader
from checkpoint.tasks.task_records import PlannedChunk, TaskRecords
from checkpoint.values import Values


class CheckpointStore:
    """Job and task records of one storage account.

    Every write settles the ambiguous case (:mod:`checkpoint.settle`) and retries
    transient trouble within a :class:`~checkpoint.retries.Budget`: the caller's (a
    lease's deadline) or, if none is given, :data:`~checkpoint.retries.STANDALONE`'s.
    Each method is its module's (see the module's docstring), which documents it.
    """

    def __init__(self, storage: Storage, clock: Clock | None = None):
        self.storage = storage
        self.clock = clock or SystemClock()
        self._ready = False
        self._values = Values(storage)
        self._counting = ShardCounters(storage, self.clock, self._values)
        self._jobs = JobRecords(storage, self.clock, self._values, self._counting, self.ensure)
        self._tasks = TaskRecords(storage, self.clock, self._values)
        self._reading = JobReader(storage, self.clock, self._values)
        self._pages = ChunkPages(storage.records, self.clock)
        #: Each job's dependents, and each pipeline's steps (by the pipeline's id).
        self.dependents = dependents(storage.records, self.clock)
        self.pipeline_steps = pipeline_steps(storage.records, self.clock)

    def budget(self, policy: retries.RetryPolicy = retries.STANDALONE) -> Budget:
        """A budget of ``policy`` on this store's clock, bounded only by the policy."""
        return Budget(policy, self.clock)

    def ensure(self, budget: Budget | None = None) -> None:
        """Create the tables (jobs, tasks, workers, limits, leases) and the blob container
        (idempotent; once per store)."""
        if not self._ready:
            budget = retries.given(budget, self.clock)
            records = self.storage.records
            budget.call(lambda: records.create_table(layout.JOBS_TABLE))
            budget.call(lambda: records.create_table(layout.TASKS_TABLE))
            budget.call(lambda: records.create_table(layout.WORKERS_TABLE))
            budget.call(lambda: records.create_table(layout.LIMITS_TABLE))
            budget.call(lambda: records.create_table(layout.LEASES_TABLE))
            budget.call(lambda: self.storage.blobs.create_container(layout.DATA_CONTAINER))
            self._ready = True

    def value(
        self,
        properties: Mapping[str, Any],
        field: str,
        default: Any = None,
        of: str = "record",
        required: bool = False,
    ) -> Any:
        """A stored field's value, read from its blob if it was spilled
        (:meth:`~checkpoint.values.Values.read`)."""
        return self._values.read(properties, field, default, of, required)

    # ----------------------------------------------------------------- jobs

    def create_job(
        self,
        job_id: str,
        job_type: str,
        queue: str,
        params: Any,
        budget: Budget | None = None,
        priority: int = 0,
        queue_count: int = 1,
        after: Sequence[str] = (),
        pipeline: str | None = None,
        delay_seconds: int = 0,
    ) -> tuple[JobRecord, bool]:
        """Record a new job; if ``job_id`` exists already, return that one (and False).
        ``queue_count``: the queues its chunks are spread over (its class's ``queues``);
        ``after``, ``pipeline``, ``delay_seconds``: see :class:`JobRecord`."""
        return self._jobs.create_job(
            job_id,
            job_type,
            queue,
            params,
            budget,
            priority,
            queue_count,
            after=after,
            pipeline=pipeline,
            delay_seconds=delay_seconds,
        )

    def get_job(self, job_id: str, budget: Budget | None = None) -> JobRecord:
        return self._jobs.get_job(job_id, budget)

    def list_jobs(self, budget: Budget | None = None) -> list[JobRecord]:
        """Every job whose record can be read (see :meth:`scan_jobs` for the others)."""
        return [job for _, job in self.scan_jobs(budget) if isinstance(job, JobRecord)]

    def scan_jobs(self, budget: Budget | None = None) -> list[tuple[str, JobRecord | BadRecord]]:
        """``(job id, job)`` of every job, with a BadRecord for one that cannot be read."""
        return self._jobs.scan_jobs(budget)

    def scan_catalogue(
        self, budget: Budget | None = None
    ) -> list[tuple[str, CatalogueEntry | BadRecord]]:
        """Every job's id, state and creation time, its record not read in full."""
        return self._jobs.scan_catalogue(budget)

    def under_way_above(
        self, job_type: str, priority: int, budget: Budget | None = None
    ) -> list[JobRecord]:
        """Jobs of ``job_type`` planning or running above ``priority``: one query."""
        return self._jobs.under_way_above(job_type, priority, budget)

    def read_index(self, budget: Budget | None = None) -> JobIndex | None:
        """The active jobs and the ended ones counted, in one range query (None: the
        store keeps no index, made by an earlier version; scan the catalogue)."""
        return self._jobs.read_index(budget)

    def params(self, job: JobRecord) -> Any:
        return self.value(job.properties, "params", of=job.name)

    def change_job(
        self,
        job_id: str,
        decide: Callable[[JobRecord], dict[str, Any] | None],
        budget: Budget | None = None,
    ) -> JobRecord | None:
        """Apply the changes ``decide`` asks for on the job as it is now."""
        return self._jobs.change_job(job_id, decide, budget)

    def update_job(self, job: JobRecord, budget: Budget | None = None, **changes: Any) -> JobRecord:
        """Merge ``changes`` into the job if nobody changed it since ``job`` was read."""
        return self._jobs.update_job(job, budget, **changes)

    def delete_job(self, job_id: str, budget: Budget | None = None) -> Deleted:
        """Delete an ended job: its task records, blobs, visible messages, then its record."""
        return self._jobs.delete_job(job_id, budget)

    # ----------------------------------------------------------------- tasks

    def add_chunks(
        self,
        job_id: str,
        first_index: int,
        payloads: Sequence[Any],
        budget: Budget | None = None,
        incarnation: str | None = None,
    ) -> list[PlannedChunk]:
        """Record chunks ``first_index...`` as waiting (idempotent)."""
        return self._tasks.add_chunks(job_id, first_index, payloads, budget, incarnation)

    def planned_task(self, job_id: str, index: int, etag: str, payload: bytes) -> TaskRecord:
        """The chunk record as :meth:`add_chunks` wrote it, known by its ETag."""
        return self._tasks.planned_task(job_id, index, etag, payload)

    def ensure_task(
        self,
        job_id: str,
        kind: TaskKind,
        budget: Budget | None = None,
        incarnation: str | None = None,
    ) -> TaskRecord:
        """The planning or finalize record of a job, created waiting if absent."""
        return self._tasks.ensure_task(job_id, kind, budget, incarnation)

    def get_task(
        self, job_id: str, kind: TaskKind, index: int, budget: Budget | None = None
    ) -> TaskRecord:
        """Raises NotFound if the task was never recorded."""
        return self._tasks.get_task(job_id, kind, index, budget)

    def task_as_found(self, job_id: str, kind: TaskKind, index: int) -> TaskRecord:
        """The task record however garbled, to write over it (TaskRecord.as_found)."""
        return self._tasks.task_as_found(job_id, kind, index)

    def write_task(
        self,
        task: TaskRecord,
        changes: Mapping[str, Any],
        values: Mapping[str, Any] = {},
        *,
        token: str | None = None,
        budget: Budget | None = None,
    ) -> TaskRecord:
        """Merge ``changes`` (and msgpack ``values``) into the task, if its ETag is still
        ``task.etag``; raises Conflict if someone else wrote since."""
        return self._tasks.write_task(task, changes, values, token=token, budget=budget)

    # ----------------------------------------------------------------- counting

    def final_changes(
        self,
        task: TaskRecord,
        changes: Mapping[str, Any],
        values: Mapping[str, Any],
        token: str | None = None,
    ) -> dict[str, Any]:
        """The properties that end a chunk, for :meth:`count_chunks`. Raises CodecError
        if a value cannot be stored."""
        return self._tasks.task_changes(task, changes, values, token)

    def count_chunk(
        self,
        task: TaskRecord,
        changes: Mapping[str, Any],
        values: Mapping[str, Any],
        counter: CounterName,
        *,
        take_off: bool = False,
        token: str | None = None,
        budget: Budget | None = None,
    ) -> tuple[TaskRecord, dict[str, int]]:
        """Write a chunk's final state and add one to its shard's ``counter`` (or take
        one off) in one atomic batch. Raises Conflict if the chunk was written by
        someone else since ``task`` was read."""
        final = self.final_changes(task, changes, values, token)
        (written,), counts = self.count_chunks([(task, final)], counter, budget, take_off=take_off)
        if isinstance(written, StorageError):
            raise written
        return written, counts

    def counts_seen(self, job_id: str) -> dict[str, int]:
        """The job's done and poisoned chunks as this process last saw its counters: no
        request, a low bound (:meth:`checkpoint.tasks.counting.ShardCounters.seen`)."""
        return self._counting.seen(job_id)

    def count_chunks(
        self,
        ended: Sequence[tuple[TaskRecord, Mapping[str, Any]]],
        counter: CounterName,
        budget: Budget | None = None,
        *,
        take_off: bool = False,
    ) -> tuple[list[TaskRecord | StorageError], dict[str, int]]:
        """Merge each chunk's final properties and add the number written to (or take it
        off) ``counter`` of their shard, in atomic batches."""
        return self._counting.count_chunks(ended, counter, budget, take_off=take_off)

    # ----------------------------------------------------------------- reading a job

    def shard_counts(self, job_id: str, shard: int, budget: Budget | None = None) -> dict[str, int]:
        return self._reading.shard_counts(job_id, shard, budget)

    def counts(self, job_id: str, budget: Budget | None = None) -> dict[str, int]:
        """Done and poisoned chunks of the job, summed over its shards."""
        return self._reading.counts(job_id, budget)

    def counts_and_counted_on(
        self, job_id: str, budget: Budget | None = None, *, total: int | None = None
    ) -> tuple[dict[str, int], datetime | None]:
        """:meth:`counts`, and when a chunk was last counted (None: none yet); with the
        job's ``total`` known, only the shards holding its chunks are read."""
        return self._reading.counts_and_counted_on(job_id, budget, total=total)

    def chunks(
        self, job_id: str, states: Sequence[str] = (), budget: Budget | None = None
    ) -> Iterator[TaskRecord]:
        """The job's chunk records, in index order, optionally only those in ``states``."""
        return self._reading.chunks(job_id, states, budget)

    def scan_chunks(
        self,
        job_id: str,
        states: Sequence[str] = (),
        budget: Budget | None = None,
        *,
        where: Sequence[Where] = (),
        total: int | None = None,
    ) -> Iterator[tuple[int, TaskRecord | BadRecord]]:
        """``(index, chunk)`` as :meth:`chunks`, with a BadRecord for one unreadable;
        ``where``: more conditions for the query; ``total``: the job's chunks, if known
        (only the shards holding them are queried)."""
        return self._reading.scan_chunks(job_id, states, budget, where=where, total=total)

    def poisoned_tasks(
        self, job_id: str, budget: Budget | None = None
    ) -> Iterator[tuple[TaskKind, int, TaskRecord | BadRecord]]:
        """``(kind, index, task)`` of the job's poisoned tasks."""
        return self._reading.poisoned_tasks(job_id, budget)

    def results(self, job_id: str, budget: Budget | None = None) -> Iterator[tuple[int, Any]]:
        """``(index, result)`` of every done chunk, in index order."""
        return self._reading.results(job_id, budget)

    def outputs(self, job_id: str, budget: Budget | None = None) -> Iterator[tuple[int, Any]]:
        """``(index, published outputs by name)`` of every done chunk, in index order."""
        return self._reading.outputs(job_id, budget)

    def chunk_page(
        self, job_id: str, first: int, count: int, budget: Budget | None = None
    ) -> ChunkPage:
        """The recorded chunks ``first`` to ``first + count - 1``, in index order, one
        query per shard they fall in."""
        return self._pages.by_index(job_id, first, count, budget)

    def chunk_page_in_state(
        self,
        job_id: str,
        state: str,
        count: int,
        cursor: ChunkCursor | None = None,
        budget: Budget | None = None,
    ) -> ChunkPage:
        """Up to ``count`` chunks in ``state`` from ``cursor``, shard by shard."""
        return self._pages.in_state(job_id, state, count, cursor, budget)
