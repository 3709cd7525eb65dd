"""Job records: created with their shard counters, read, changed by compare-and-swap,
and deleted with everything of the job.

Every write settles the ambiguous case (:mod:`checkpoint.settle`): an insert or an
update applied although it failed is recognised by its writer token as this call's own.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from checkpoint import deletion, layout, retries, settle
from checkpoint.catalogue import job_index
from checkpoint.catalogue.job_index import CatalogueEntry, IndexRows, JobIndex
from checkpoint.catalogue.job_moves import StateMoves
from checkpoint.clock import Clock
from checkpoint.deletion import Deleted
from checkpoint.errors import (
    BadRecord,
    Conflict,
    JobNotEnded,
    JobNotFound,
    NotFound,
    StorageError,
)
from checkpoint.records import AFTER, DELAY_SECONDS, PIPELINE, REMOVED, JobRecord, JobState
from checkpoint.retries import Budget
from checkpoint.settle import WRITER
from checkpoint.storage import BatchOp, PropertyValue, Record, Storage, Where
from checkpoint.tasks.counting import ShardCounters
from checkpoint.values import Values, refused

#: What a scan of the catalogue makes of each record.
Read = TypeVar("Read")

#: What :meth:`JobRecords.scan_catalogue` reads of each job record (Azure's ``$select``).
CATALOGUE_COLUMNS = ("state", "created_on", "updated_on")


#: The states of a job whose chunks are still to run, planning and running, as a range:
#: no other state sorts between them (tests/checkpoint/test_store.py checks it).
UNDER_WAY_WHERE = (Where("state", "ge", "planning"), Where("state", "le", "running"))


class JobRecords:
    """The job records of one storage account.

    Args:
        storage: where the records are (and, to delete a job, its blobs and messages).
        clock: stamps each write; the clock of the default retry budget.
        values: stores a job's parameters, spilled to a blob if large.
        counters: the shard counters a job is created with and deleted with.
        ensure: creates the tables and the blob container if not done yet.
    """

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        values: Values,
        counters: ShardCounters,
        ensure: Callable[[Budget], None],
    ):
        self._storage = storage
        self._records = storage.records
        self._clock = clock
        self._values = values
        self._counters = counters
        self._ensure = ensure
        self._index = IndexRows(storage.records)
        self._moves = StateMoves(storage.records, self._index)

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
        """Record a new job (of ``priority``); if ``job_id`` exists already, return that
        one (and False).

        ``queue_count`` (its class's ``queues``) is kept in the record, so its messages
        go to the same queues whatever its class says later. A job ``after`` others is
        recorded ``waiting`` (with ``delay_seconds``, its planning's delay once it may
        start); else ``planning``. ``pipeline``: the pipeline it is a step of.

        An insert that was applied although it failed is recognised by its writer
        token: the job is then this call's own (True), not "already there"."""
        budget = retries.given(budget, self._clock)
        self._ensure(budget)
        layout.check_job_id(job_id)
        now = self._clock.now()
        state: JobState = "waiting" if after else "planning"
        properties = {
            "job_type": job_type,
            "queue": queue,
            # Recorded only past 1: a job of one queue is recorded as before.
            **({"queues": queue_count} if queue_count != 1 else {}),
            **({AFTER: ",".join(after), DELAY_SECONDS: delay_seconds} if after else {}),
            **({PIPELINE: pipeline} if pipeline else {}),
            "state": state,
            "created_on": now,
            "updated_on": now,
            # Carried in every message of the job: a message of an earlier job of this
            # id (deleted since) is never taken for this one.
            "incarnation": secrets.token_hex(8),
            "priority": priority,
            WRITER: settle.one_off(),
            **self._values.put((job_id, "job", 0), "params", params),
        }
        # Counters first: a job record never exists without them, even after a submit
        # that died half-way (its re-submit would otherwise find the job and stop there).
        try:
            self._counters.create(job_id, budget)
            beside = []
            if self._index.kept(budget):
                properties[job_index.INDEXED] = True
                row: dict[str, PropertyValue] = {"state": state, "created_on": now}
                beside.append(BatchOp("upsert_replace", job_index.active_row(job_id), row))
            mine = settle.insert(
                self._records,
                layout.JOBS_TABLE,
                layout.JOBS_PARTITION,
                job_id,
                properties,
                budget,
                beside,
            )
        except StorageError as error:
            if refused(error):
                self._values.drop_unwritten([properties])
            raise
        if mine is None:
            self._values.drop_unwritten([properties])
            return self.get_job(job_id, budget), False
        return JobRecord.from_record(mine), True

    def get_job(self, job_id: str, budget: Budget | None = None) -> JobRecord:
        """Raises JobNotFound if there is no such job."""
        budget = retries.given(budget, self._clock)
        self._ensure(budget)
        try:
            record = budget.call(
                lambda: self._records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id)
            )
        except NotFound as missing:
            raise JobNotFound(f"no job {job_id!r} in {self._storage.description}") from missing
        return JobRecord.from_record(record)

    def scan_jobs(self, budget: Budget | None = None) -> list[tuple[str, JobRecord | BadRecord]]:
        """``(job id, job)`` of every job, with a BadRecord saying why for a record that
        cannot be read."""
        return self._scan(JobRecord.from_record, None, budget)

    def scan_catalogue(
        self, budget: Budget | None = None
    ) -> list[tuple[str, CatalogueEntry | BadRecord]]:
        """``(job id, entry)`` of every job, reading only :data:`CATALOGUE_COLUMNS` of
        each record (params, errors and the rest stay on the server): a BadRecord says
        why for an entry that cannot be read."""
        return self._scan(CatalogueEntry.from_record, CATALOGUE_COLUMNS, budget)

    def _scan(
        self,
        read: Callable[[Record], Read],
        select: Sequence[str] | None,
        budget: Budget | None,
    ) -> list[tuple[str, Read | BadRecord]]:
        """Every job of the catalogue (its ``select`` columns, or all) as ``read`` makes
        it, with a BadRecord saying why for one it cannot."""
        budget = retries.given(budget, self._clock)
        self._ensure(budget)
        records = budget.call(
            lambda: list(
                self._records.query(layout.JOBS_TABLE, layout.JOBS_PARTITION, select=select)
            )
        )
        found: list[tuple[str, Read | BadRecord]] = []
        for record in self._jobs_only(records):
            try:
                found.append((record.row_key, read(record)))
            except BadRecord as bad:
                found.append((record.row_key, bad))
        return found

    def under_way_above(
        self, job_type: str, priority: int, budget: Budget | None = None
    ) -> list[JobRecord]:
        """The jobs of ``job_type`` planning or running with a priority above
        ``priority`` (a record that cannot be read left out): one query whose answer
        holds those jobs only, however many ended jobs the catalogue keeps."""
        budget = retries.given(budget, self._clock)
        self._ensure(budget)
        where = [
            Where("job_type", "eq", job_type),
            Where("priority", "gt", priority),
            *UNDER_WAY_WHERE,
        ]
        records = budget.call(
            lambda: list(self._records.query(layout.JOBS_TABLE, layout.JOBS_PARTITION, where))
        )
        found = []
        for record in records:
            try:
                found.append(JobRecord.from_record(record))
            except BadRecord:
                continue  # status shows it; the priority check goes on without it
        return found

    def _jobs_only(self, records: list[Record]) -> list[Record]:
        """The job records of a scan of the jobs partition, without the index's rows
        (the counts row is kept, so a job's end need not read it first)."""
        for record in records:
            if job_index.is_index_row(record.row_key):
                self._index.noted(record)
        return [record for record in records if not job_index.is_index_row(record.row_key)]

    def read_index(self, budget: Budget | None = None) -> JobIndex | None:
        """The active jobs and the ended ones counted, in one range query; None for a
        store that keeps no index (:mod:`checkpoint.catalogue.job_index`)."""
        budget = retries.given(budget, self._clock)
        self._ensure(budget)
        return self._index.read(budget)

    def change_job(
        self,
        job_id: str,
        decide: Callable[[JobRecord], dict[str, Any] | None],
        budget: Budget | None = None,
    ) -> JobRecord | None:
        """Apply the changes ``decide`` asks for on the job as it is now, deciding again
        on the fresh record after losing a race; returns the job as written, or None if
        ``decide`` asked for nothing. An update applied with its answer lost counts as
        made (:mod:`checkpoint.settle`)."""
        while True:
            job = self.get_job(job_id, budget)
            changes = decide(job)
            if changes is None:
                return None
            try:
                return self.update_job(job, budget, **changes)
            except Conflict:
                continue

    def update_job(self, job: JobRecord, budget: Budget | None = None, **changes: Any) -> JobRecord:
        """Merge ``changes`` into the job if nobody changed it since ``job`` was read.

        A change to :data:`~checkpoint.records.REMOVED` removes that property (the
        record is replaced whole, on its ETag, as a change of state is written).

        Raises Conflict if someone else did (never for this call's own applied write)."""
        changes = {**changes, "updated_on": self._clock.now(), WRITER: settle.one_off()}
        budget = retries.given(budget, self._clock)
        removes = any(value is REMOVED for value in changes.values())
        if changes.get("state", job.state) != job.state or removes:
            return JobRecord.from_record(self._moves.move(job, changes, budget))
        written = settle.merge(
            self._records,
            layout.JOBS_TABLE,
            Record(layout.JOBS_PARTITION, job.job_id, job.properties, job.etag),
            changes,
            budget,
        )
        return JobRecord.from_record(written)

    def delete_job(self, job_id: str, budget: Budget | None = None) -> Deleted:
        """Delete an ended job: its task records, its blobs, its visible messages (in each
        of its queues and their poison queues, and its type's resume queue), then its
        record.

        The job is first marked as being deleted, so workers delete its messages unrun
        and stop its running tasks; its record goes last, so a deletion that dies midway
        leaves the job listed, and deleting it again finishes it.

        Raises:
            JobNotFound: no such job.
            JobNotEnded: it is not done, failed or cancelled (and not being deleted).
        """
        budget = retries.given(budget, self._clock)
        job = self._mark_deleting(job_id, budget)
        records = sum(
            deletion.delete_partition(self._records, partition, budget)
            for partition in deletion.task_partitions(job_id)
        )
        self._counters.forget(job_id)
        blobs = deletion.delete_blobs(self._storage.blobs, job_id, budget)
        stray = () if job.resume_poison_queue is None else (job.resume_poison_queue,)
        swept = sum(
            deletion.sweep(self._storage.queues, swept, job_id, budget)
            for swept in (*job.every_queue, *stray)
        )
        self._moves.delete(job_id, budget)
        return Deleted(job_id, job.state, job.updated_on, records + 1, blobs, swept)

    def _mark_deleting(self, job_id: str, budget: Budget) -> JobRecord:
        """The job as it was before its deletion began, marked ``deleting_on`` now (a
        job marked already is left as it is)."""
        before: list[JobRecord] = []

        def decide(job: JobRecord) -> dict[str, Any] | None:
            before[:] = [job]
            if job.deleting_on is not None:
                return None
            if not job.ended:
                raise JobNotEnded(
                    f"job {job_id!r} is {job.state}: only a job that is done, failed or "
                    "cancelled can be deleted"
                )
            return {"deleting_on": self._clock.now()}

        self.change_job(job_id, decide, budget)
        return before[0]
