"""The checkpoint store: job and task records with ETag compare-and-swap, on any backend.

Every write of a task record is conditional on the ETag its writer last saw, so a
worker that lost its chunk can never overwrite the new owner's progress: the write
raises :class:`~checkpoint.errors.Conflict` and the runner turns that into ``LeaseLost``.
Values larger than :data:`~checkpoint.records.SPILL_BYTES` are spilled to a blob that
is never overwritten (each write gets a fresh name), so a lost race leaves the winner's
blob intact; the loser deletes its own.
"""

from __future__ import annotations

import functools
import heapq
import logging
import secrets
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from checkpoint import checks, codec, deletion, layout, retries, settle
from checkpoint.clock import Clock, SystemClock
from checkpoint.deletion import Deleted
from checkpoint.errors import (
    BadRecord,
    BatchFailed,
    CodecError,
    Conflict,
    JobNotEnded,
    JobNotFound,
    NotFound,
    StorageError,
)
from checkpoint.records import (
    OUTPUTS,
    SPILL_BYTES,
    TASK_STATES,
    JobRecord,
    TaskKind,
    TaskRecord,
)
from checkpoint.retries import TRANSIENT, Budget
from checkpoint.settle import WRITER, token_of
from checkpoint.storage import ANY_ETAG, BatchOp, Record, Storage, Where

log = logging.getLogger(__name__)

#: The counts a shard's counter row holds.
COUNTERS = ("done", "poisoned")
#: Rows read per query page (each page is retried on its own). A scan of a job's chunks
#: holds a page per shard (16) at once, and a row may hold up to 48 KiB inline each of
#: payload, state and result: 250 keeps that bounded where Azure's own 1,000 would not.
QUERY_PAGE_ROWS = 250
#: Records written per batch (Azure allows 100 per partition batch).
BATCH_ROWS = 100
#: Bytes of records per batch, under Azure's 4 MiB per batch with room for the counter.
BATCH_BYTES = 3 * 1024 * 1024


@dataclass(frozen=True)
class PlannedChunk:
    """A chunk as planning recorded it: its ETag and encoded payload, or None for both
    if unknown (the record existed already, or its payload was spilled to a blob)."""

    index: int
    etag: str | None = None
    payload: bytes | None = None


class CheckpointStore:
    """Job and task records of one storage account.

    Every write settles the ambiguous case (:mod:`checkpoint.settle`) and retries
    transient trouble within a :class:`~checkpoint.retries.Budget`: the caller's (a
    lease's deadline) or, if none is given, :data:`~checkpoint.retries.STANDALONE`'s.
    """

    def __init__(self, storage: Storage, clock: Clock | None = None):
        self.storage = storage
        self.clock = clock or SystemClock()
        self._records = storage.records
        self._ready = False
        self._counters: dict[str, Record] = {}

    def budget(self, policy: retries.RetryPolicy = retries.STANDALONE) -> Budget:
        """A budget of ``policy`` on this store's clock, bounded only by the policy."""
        return Budget(policy, self.clock)

    def _given(self, budget: Budget | None) -> Budget:
        return budget if budget is not None else self.budget()

    def ensure(self, budget: Budget | None = None) -> None:
        """Create the tables (jobs, tasks, workers) and the blob container (idempotent;
        once per store)."""
        if not self._ready:
            budget = self._given(budget)
            budget.call(lambda: self._records.create_table(layout.JOBS_TABLE))
            budget.call(lambda: self._records.create_table(layout.TASKS_TABLE))
            budget.call(lambda: self._records.create_table(layout.WORKERS_TABLE))
            budget.call(lambda: self.storage.blobs.create_container(layout.DATA_CONTAINER))
            self._ready = True

    # ----------------------------------------------------------------- values

    def _put_value(self, owner: tuple[str, str, int], field: str, value: Any) -> dict[str, Any]:
        """Properties holding ``value`` inline or, if large, as a fresh blob."""
        data = codec.encode(value, field)
        if len(data) <= SPILL_BYTES:
            return {field: data, f"{field}_blob": ""}
        name = layout.blob_name(*owner, field, uuid.uuid4().hex[:12])
        self.storage.blobs.put(layout.DATA_CONTAINER, name, data)
        return {field: b"", f"{field}_blob": name}

    def value(
        self,
        properties: Mapping[str, Any],
        field: str,
        default: Any = None,
        of: str = "record",
        required: bool = False,
    ) -> Any:
        """A stored field's value, read from its blob if it was spilled.

        Raises BadRecord naming ``of`` (the record, as ``TaskRecord.name`` says it) and
        the field if what is stored there is not a msgpack value or its blob is gone,
        or, if ``required``, if the record holds neither the value nor its blob (every
        write of it stores one: None is stored as msgpack's nil).
        """
        blob, data = properties.get(f"{field}_blob"), properties.get(field)
        if required and not blob and not data:
            raise BadRecord(f"{of}: {field} is missing")
        try:
            if blob:
                if not isinstance(blob, str):
                    raise BadRecord(f"{of}: {field}_blob {blob!r} is not a blob name")
                data = self.storage.blobs.get(layout.DATA_CONTAINER, blob)
            if not data:
                return default
            if not isinstance(data, bytes):
                raise BadRecord(f"{of}: {field} is a {type(data).__name__}, not msgpack bytes")
            return codec.decode(data, field)
        except CodecError as error:
            raise BadRecord(f"{of}: {error}") from error
        except NotFound as missing:
            raise BadRecord(f"{of}: {field}_blob {blob!r} names no blob") from missing

    def _drop_replaced_blobs(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        for key, name in old.items():
            if key.endswith("_blob") and name and key in new and new[key] != name:
                self._delete_blob(name)

    def _delete_blob(self, name: str) -> None:
        try:
            self.storage.blobs.delete(layout.DATA_CONTAINER, name)
        except NotFound:
            pass

    def _written_blobs(self, changes: Mapping[str, Any]) -> list[str]:
        return [v for k, v in changes.items() if k.endswith("_blob") and v]

    def _drop_blobs(self, unwritten: Iterable[Mapping[str, Any]]) -> None:
        """Delete the blobs spilled for writes known not applied: nothing names them.

        Best effort, called while the write's own error is raised: a blob that cannot
        be deleted now is left (deleting the job removes it) rather than the caller
        being told of the delete's trouble instead of why its write failed."""
        for properties in unwritten:
            for name in self._written_blobs(properties):
                try:
                    self._delete_blob(name)
                except StorageError as error:
                    log.warning("spilled blob %s of an unwritten record left: %s", name, error)

    # ----------------------------------------------------------------- jobs

    def create_job(
        self,
        job_id: str,
        job_type: str,
        queue: str,
        params: Any,
        budget: Budget | None = None,
    ) -> tuple[JobRecord, bool]:
        """Record a new job; if ``job_id`` exists already, return that one (and False).

        An insert that was applied although it failed is recognised by its writer
        token: the job is then this call's own (True), not "already there"."""
        budget = self._given(budget)
        self.ensure(budget)
        layout.check_job_id(job_id)
        now = self.clock.now()
        properties = {
            "job_type": job_type,
            "queue": queue,
            "state": "planning",
            "created_on": now,
            "updated_on": now,
            # Carried in every message of the job: a message of an earlier job of this
            # id (deleted since) is never taken for this one.
            "incarnation": secrets.token_hex(8),
            WRITER: settle.one_off(),
            **self._put_value((job_id, "job", 0), "params", params),
        }
        # Counters first: a job record never exists without them, even after a submit
        # that died half-way (its re-submit would otherwise find the job and stop there).
        try:
            self._create_counters(job_id, budget)
            mine = settle.insert(
                self._records, layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, properties, budget
            )
        except StorageError as error:
            if refused(error):
                self._drop_blobs([properties])
            raise
        if mine is None:
            self._drop_blobs([properties])
            return self.get_job(job_id, budget), False
        return JobRecord.from_record(mine), True

    def _create_counters(self, job_id: str, budget: Budget) -> None:
        for shard in range(layout.SHARDS):
            settle.insert(
                self._records,
                layout.TASKS_TABLE,
                layout.shard_partition(job_id, shard),
                layout.COUNTS_ROW,
                {"done": 0, "poisoned": 0, WRITER: settle.one_off()},
                budget,
            )

    def get_job(self, job_id: str, budget: Budget | None = None) -> JobRecord:
        budget = self._given(budget)
        self.ensure(budget)
        try:
            record = budget.call(
                lambda: self._records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id)
            )
        except NotFound as missing:
            raise JobNotFound(f"no job {job_id!r} in {self.storage.description}") from missing
        return JobRecord.from_record(record)

    def list_jobs(self, budget: Budget | None = None) -> list[JobRecord]:
        """Every job whose record can be read (see :meth:`scan_jobs` for the others)."""
        return [job for _, job in self.scan_jobs(budget) if isinstance(job, JobRecord)]

    def scan_jobs(self, budget: Budget | None = None) -> list[tuple[str, JobRecord | BadRecord]]:
        """``(job id, job)`` of every job, with a BadRecord saying why for a record that
        cannot be read."""
        budget = self._given(budget)
        self.ensure(budget)
        records = budget.call(
            lambda: list(self._records.query(layout.JOBS_TABLE, layout.JOBS_PARTITION))
        )
        found: list[tuple[str, JobRecord | BadRecord]] = []
        for record in records:
            try:
                found.append((record.row_key, JobRecord.from_record(record)))
            except BadRecord as bad:
                found.append((record.row_key, bad))
        return found

    def params(self, job: JobRecord) -> Any:
        return self.value(job.properties, "params", of=job.name)

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

        Raises Conflict if someone else did (never for this call's own applied write)."""
        changes = {**changes, "updated_on": self.clock.now(), WRITER: settle.one_off()}
        written = settle.merge(
            self._records,
            layout.JOBS_TABLE,
            Record(layout.JOBS_PARTITION, job.job_id, job.properties, job.etag),
            changes,
            self._given(budget),
        )
        return JobRecord.from_record(written)

    def delete_job(self, job_id: str, budget: Budget | None = None) -> Deleted:
        """Delete an ended job: its task records, its blobs, its visible messages (in its
        queue and poison queue), then its record.

        The job is first marked as being deleted, so workers delete its messages unrun
        and stop its running tasks; its record goes last, so a deletion that dies midway
        leaves the job listed, and deleting it again finishes it.

        Raises:
            JobNotFound: no such job.
            JobNotEnded: it is not done, failed or cancelled (and not being deleted).
        """
        budget = self._given(budget)
        job = self._mark_deleting(job_id, budget)
        records = sum(
            deletion.delete_partition(self._records, partition, budget)
            for partition in deletion.task_partitions(job_id)
        )
        for shard in range(layout.SHARDS):
            self._counters.pop(layout.shard_partition(job_id, shard), None)
        blobs = deletion.delete_blobs(self.storage.blobs, job_id, budget)
        swept = sum(
            deletion.sweep(self.storage.queues, queue, job_id, budget)
            for queue in (job.queue, job.queue + layout.POISON_SUFFIX)
        )
        budget.call(
            lambda: self._records.delete(
                layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, etag=ANY_ETAG
            )
        )
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
            return {"deleting_on": self.clock.now()}

        self.change_job(job_id, decide, budget)
        return before[0]

    # ----------------------------------------------------------------- tasks

    def _keys(self, job_id: str, kind: TaskKind, index: int) -> tuple[str, str]:
        if kind == "chunk":
            return layout.shard_partition(job_id, layout.shard_of(index)), layout.chunk_row(index)
        return layout.control_partition(
            job_id
        ), layout.PLAN_ROW if kind == "plan" else layout.FINAL_ROW

    def add_chunks(
        self,
        job_id: str,
        first_index: int,
        payloads: Sequence[Any],
        budget: Budget | None = None,
        incarnation: str | None = None,
    ) -> list[PlannedChunk]:
        """Record chunks ``first_index...`` as waiting. Idempotent: a chunk recorded by an
        earlier, crashed planning attempt is left as it is (it may have run already).

        ``incarnation``: the job's, kept on each record. Returns each chunk's record as
        planned (see :class:`PlannedChunk`)."""
        budget = self._given(budget)
        token = settle.one_off()  # tells this call's inserts from an earlier attempt's
        ops: list[tuple[int, BatchOp]] = []
        try:
            for offset, payload in enumerate(payloads):
                index = first_index + offset
                properties = {
                    "state": "waiting",
                    "attempt": 0,
                    "incarnation": incarnation,
                    WRITER: token,
                    **self._put_value((job_id, "chunk", index), "payload", payload),
                }
                ops.append((index, BatchOp("insert", layout.chunk_row(index), properties)))
        except CodecError:
            self._drop_blobs(op.properties for _, op in ops)  # nothing was recorded
            raise
        planned = [PlannedChunk(first_index + offset) for offset in range(len(payloads))]
        pages = _planning_pages(job_id, ops)
        for number, (partition, page) in enumerate(pages):
            try:
                records = settle.insert_many(
                    self._records, layout.TASKS_TABLE, partition, [op for _, op in page], budget
                )
            except StorageError as error:
                # Pages not sent are not recorded, nor is this one if it was refused.
                unsent = pages[number if refused(error) else number + 1 :]
                self._drop_blobs(op.properties for _, later in unsent for _, op in later)
                raise
            for (index, op), record in zip(page, records, strict=True):
                payload = op.properties["payload"]
                if record is None:
                    self._drop_blobs([op.properties])  # the existing chunk keeps its own
                elif isinstance(payload, bytes) and payload:
                    planned[index - first_index] = PlannedChunk(index, record.etag, payload)
        return planned

    def planned_task(self, job_id: str, index: int, etag: str, payload: bytes) -> TaskRecord:
        """The chunk record as :meth:`add_chunks` wrote it, known by its ETag (a write
        conditional on that ETag succeeds only if the record is still exactly this)."""
        properties = {"state": "waiting", "attempt": 0, "payload": payload, "payload_blob": ""}
        record = _as_record(layout.chunk_row(index), properties, etag)
        return TaskRecord.from_record(job_id, "chunk", index, record)

    def ensure_task(
        self,
        job_id: str,
        kind: TaskKind,
        budget: Budget | None = None,
        incarnation: str | None = None,
    ) -> TaskRecord:
        """The planning or finalize record of a job, created waiting (for the job's
        ``incarnation``) if absent."""
        budget = self._given(budget)
        partition, row = self._keys(job_id, kind, 0)
        properties = {
            "state": "waiting",
            "attempt": 0,
            "incarnation": incarnation,
            WRITER: settle.one_off(),
        }
        mine = settle.insert(self._records, layout.TASKS_TABLE, partition, row, properties, budget)
        if mine is not None:
            return TaskRecord.from_record(job_id, kind, 0, mine)
        return self.get_task(job_id, kind, 0, budget)

    def get_task(
        self, job_id: str, kind: TaskKind, index: int, budget: Budget | None = None
    ) -> TaskRecord:
        """Raises NotFound if the task was never recorded."""
        partition, row = self._keys(job_id, kind, index)
        record = self._given(budget).call(
            lambda: self._records.get(layout.TASKS_TABLE, partition, row)
        )
        return TaskRecord.from_record(job_id, kind, index, record)

    def task_as_found(self, job_id: str, kind: TaskKind, index: int) -> TaskRecord:
        """The task record however garbled, to write over it (TaskRecord.as_found)."""
        partition, row = self._keys(job_id, kind, index)
        record = self._records.get(layout.TASKS_TABLE, partition, row)
        return TaskRecord.as_found(job_id, kind, index, record)

    def write_task(
        self,
        task: TaskRecord,
        changes: Mapping[str, Any],
        values: Mapping[str, Any] = {},
        *,
        token: str | None = None,
        budget: Budget | None = None,
    ) -> TaskRecord:
        """Merge ``changes`` (and msgpack ``values``, spilled if large) into the task, if
        its ETag is still ``task.etag``. Raises Conflict if someone else wrote since.

        ``token`` is the writer token of this write (:class:`~checkpoint.settle.Writer`
        of the claim); a write of no claim (a redrive) gets a one-off token. A failure
        that leaves it unknown whether the write was applied raises the transient error
        and keeps any spilled blob (the record may name it)."""
        merged = {
            **changes,
            "updated_on": self.clock.now(),
            WRITER: token or settle.one_off(),
        }
        for field, value in values.items():
            merged.update(self._put_value((task.job_id, task.kind, task.index), field, value))
        partition, row = self._keys(task.job_id, task.kind, task.index)
        before = Record(partition, row, task.properties, task.etag)
        try:
            written = settle.merge(
                self._records, layout.TASKS_TABLE, before, merged, self._given(budget)
            )
        except StorageError as error:
            if refused(error):
                self._drop_blobs([merged])
            raise
        self._drop_replaced_blobs(task.properties, merged)
        return TaskRecord.from_record(task.job_id, task.kind, task.index, written)

    def final_changes(
        self,
        task: TaskRecord,
        changes: Mapping[str, Any],
        values: Mapping[str, Any],
        token: str | None = None,
    ) -> dict[str, Any]:
        """The properties that end a chunk: ``changes``, the msgpack ``values`` (spilled
        to blob if large) and the writer ``token``. Raises CodecError if a value cannot
        be stored.

        Encoded apart from :meth:`count_chunks` so a value that cannot be stored fails
        in the chunk's own thread, where the failure is recorded on the chunk.
        """
        merged = {**changes, "updated_on": self.clock.now(), WRITER: token or settle.one_off()}
        for field, value in values.items():
            merged.update(self._put_value((task.job_id, "chunk", task.index), field, value))
        return merged

    def count_chunk(
        self,
        task: TaskRecord,
        changes: Mapping[str, Any],
        values: Mapping[str, Any],
        counter: str,
        *,
        token: str | None = None,
        budget: Budget | None = None,
    ) -> tuple[TaskRecord, dict[str, int]]:
        """Write a chunk's final state and add one to its shard's ``counter`` ("done" or
        "poisoned", or "-poisoned" to take one off) in one atomic batch.

        Raises Conflict if the chunk was written by someone else since ``task`` was read.
        """
        final = self.final_changes(task, changes, values, token)
        (written,), counts = self.count_chunks([(task, final)], counter, budget)
        if isinstance(written, StorageError):
            raise written
        return written, counts

    def count_chunks(
        self,
        ended: Sequence[tuple[TaskRecord, Mapping[str, Any]]],
        counter: str,
        budget: Budget | None = None,
    ) -> tuple[list[TaskRecord | StorageError], dict[str, int]]:
        """Merge each chunk's final properties (from :meth:`final_changes`) and add the
        number written to ``counter`` of their shard, in atomic batches.

        All chunks must be of one job and one shard. Returns, in order, each chunk's new
        record, or the error that kept it from being written (Conflict: someone else
        wrote it since it was read; NotFound: it is gone), and the shard's counts. A
        concurrent change to the counter is retried: it only means another chunk of the
        shard ended at the same moment. Spilled blobs of chunks not written are deleted.
        """
        if not ended:
            raise ValueError("no chunks to count")
        job_id, shard = ended[0][0].job_id, layout.shard_of(ended[0][0].index)
        if any(t.job_id != job_id or layout.shard_of(t.index) != shard for t, _ in ended):
            raise ValueError("count_chunks takes chunks of one job and one shard")
        outcome: dict[int, TaskRecord | StorageError] = {}  # by position in ``ended``
        counts: dict[str, int] = {}
        budget = self._given(budget)
        groups = list(_batches(range(len(ended)), [_size(final) for _, final in ended]))
        for number, group in enumerate(groups):
            try:
                counts = self._count_batch(list(ended), group, counter, outcome, budget)
            except (StorageError, BadRecord) as error:
                # Groups not sent are not written, nor is this one if it was refused,
                # nor a chunk someone else wrote (its error is its outcome).
                first_unsent = number if refused(error) else number + 1
                unsent = {i for later in groups[first_unsent:] for i in later}
                self._drop_blobs(
                    final
                    for i, (_, final) in enumerate(ended)
                    if isinstance(outcome.get(i), StorageError)
                    or (i in unsent and i not in outcome)
                )
                raise
        # Each batch gives every chunk of its group an outcome, or raises.
        results = [outcome[position] for position in range(len(ended))]
        for (task, final), result in zip(ended, results, strict=True):
            if isinstance(result, StorageError):
                self._drop_blobs([final])
            else:
                self._drop_replaced_blobs(task.properties, final)
        return results, counts

    def _count_batch(
        self,
        ended: list[tuple[TaskRecord, Mapping[str, Any]]],
        group: list[int],
        counter: str,
        outcome: dict[int, TaskRecord | StorageError],
        budget: Budget,
    ) -> dict[str, int]:
        """One batch: the chunks in ``group`` (positions in ``ended``) and the counter.
        A chunk someone else wrote is taken out and the rest sent again; a chunk an
        earlier write of ours changed is sent again on top of that write."""
        first = ended[group[0]][0]
        partition = layout.shard_partition(first.job_id, layout.shard_of(first.index))
        name, step = counter.lstrip("-"), -1 if counter.startswith("-") else 1
        counts = self._counters.get(partition) or self._read_counts(partition, budget)
        while True:
            if not group:
                return _counts(counts, first.job_id, layout.shard_of(first.index))
            old = _counts(counts, first.job_id, layout.shard_of(first.index))[name]
            new_counts = {**counts.properties, name: old + step * len(group)}
            new_counts[WRITER] = settle.one_off()
            ops = [
                BatchOp("merge", layout.chunk_row(ended[i][0].index), ended[i][1], ended[i][0].etag)
                for i in group
            ]
            ops.append(BatchOp("merge", layout.COUNTS_ROW, new_counts, counts.etag))
            try:
                written = budget.call(lambda: self._batch_settled(partition, ops))  # noqa: B023
            except BatchFailed as failed:
                if failed.index == len(group) and isinstance(failed.reason, Conflict):
                    counts = self._read_counts(partition, budget)  # another chunk ended
                    continue
                if failed.index >= len(group) or not isinstance(
                    failed.reason, (Conflict, NotFound)
                ):
                    raise failed.reason from failed
                position = group[failed.index]
                if self._ours_applied(partition, ended, position, failed.reason, budget):
                    continue  # an earlier write of ours changed it: go again on top
                outcome[group.pop(failed.index)] = failed.reason
                continue
            counts = written[-1]
            self._counters[partition] = counts
            for i, record in zip(group, written[:-1], strict=True):
                task = ended[i][0]
                # A merge's answer holds only what it changed; a read, the whole record.
                whole = replace(record, properties={**task.properties, **record.properties})
                outcome[i] = TaskRecord.from_record(task.job_id, "chunk", task.index, whole)
            return _counts(counts, first.job_id, layout.shard_of(first.index))

    def _batch_settled(self, partition: str, ops: list[BatchOp]) -> list[Record]:
        """Apply ``ops`` as one batch; returns each row as written. After a failure that
        leaves it unknown, the first row is read: the batch is atomic, so carrying this
        batch's token there means all of it was applied."""
        try:
            etags = self._records.batch(layout.TASKS_TABLE, partition, ops)
        except TRANSIENT as lost:
            if not self._batch_applied(partition, ops):
                raise lost
        except BatchFailed as failed:
            if not isinstance(failed.reason, Conflict) or not self._batch_applied(partition, ops):
                raise
        else:
            return [
                Record(partition, op.row_key, dict(op.properties), etag)
                for op, etag in zip(ops, etags, strict=True)
            ]
        # Applied, the answer lost: the rows as they now stand (ETags included).
        return [self._records.get(layout.TASKS_TABLE, partition, op.row_key) for op in ops]

    def _batch_applied(self, partition: str, ops: list[BatchOp]) -> bool:
        try:
            found = self._records.get(layout.TASKS_TABLE, partition, ops[0].row_key)
        except NotFound:
            return False
        return token_of(found.properties) == token_of(ops[0].properties)

    def _ours_applied(
        self,
        partition: str,
        ended: list[tuple[TaskRecord, Mapping[str, Any]]],
        position: int,
        reason: StorageError,
        budget: Budget,
    ) -> bool:
        """Whether the chunk at ``position`` was last changed by an earlier write of its
        own claim (then it is updated to that record, to be written again on top)."""
        if not isinstance(reason, Conflict):
            return False
        task, final = ended[position]
        found = budget.call(
            lambda: self._records.get(layout.TASKS_TABLE, partition, layout.chunk_row(task.index))
        )
        if not settle.same_claim(token_of(final), token_of(found.properties)):
            return False
        ended[position] = (replace(task, etag=found.etag, properties=dict(found.properties)), final)
        return True

    def _read_counts(self, partition: str, budget: Budget) -> Record:
        # The last counter row seen per partition is kept, so a worker that ends most of
        # a shard's chunks updates the counter without reading it first.
        record = budget.call(
            lambda: self._records.get(layout.TASKS_TABLE, partition, layout.COUNTS_ROW)
        )
        if len(self._counters) > 4096:
            self._counters.clear()
        self._counters[partition] = record
        return record

    # ----------------------------------------------------------------- reading a job

    def shard_counts(self, job_id: str, shard: int, budget: Budget | None = None) -> dict[str, int]:
        partition = layout.shard_partition(job_id, shard)
        record = self._given(budget).call(
            lambda: self._records.get(layout.TASKS_TABLE, partition, layout.COUNTS_ROW)
        )
        return _counts(record, job_id, shard)

    def counts(self, job_id: str, budget: Budget | None = None) -> dict[str, int]:
        """Done and poisoned chunks of the job, summed over its shards."""
        total = {"done": 0, "poisoned": 0}
        for shard in range(layout.SHARDS):
            for name, value in self.shard_counts(job_id, shard, budget).items():
                total[name] = total.get(name, 0) + value
        return total

    def chunks(
        self, job_id: str, states: Sequence[str] = (), budget: Budget | None = None
    ) -> Iterator[TaskRecord]:
        """The job's chunk records, in index order, optionally only those in ``states``.

        Raises BadRecord at the first record that cannot be read (:meth:`scan_chunks`
        goes past them)."""
        for _, task in self.scan_chunks(job_id, states, budget):
            if isinstance(task, BadRecord):
                raise task
            yield task

    def scan_chunks(
        self, job_id: str, states: Sequence[str] = (), budget: Budget | None = None
    ) -> Iterator[tuple[int, TaskRecord | BadRecord]]:
        """``(index, chunk)`` as :meth:`chunks`, with a BadRecord for a chunk whose record
        cannot be read (it is included whatever ``states`` asks for, unless one state is
        asked for and its stored state is another)."""
        budget = self._given(budget)
        streams = [
            self._shard_chunks(job_id, shard, states, budget) for shard in range(layout.SHARDS)
        ]
        return heapq.merge(*streams, key=lambda found: found[0])

    def _shard_chunks(
        self, job_id: str, shard: int, states: Sequence[str], budget: Budget
    ) -> Iterator[tuple[int, TaskRecord | BadRecord]]:
        partition = layout.shard_partition(job_id, shard)
        where = [Where("RowKey", "lt", "d")]
        if len(states) == 1:
            where.append(Where("state", "eq", states[0]))
        for record in self._pages(partition, where, budget):
            index = layout.index_of_row(record.row_key)
            try:
                task = TaskRecord.from_record(job_id, "chunk", index, record)
            except BadRecord as bad:
                yield index, bad
                continue
            if not states or task.state in states:
                yield index, task

    def _pages(self, partition: str, where: list[Where], budget: Budget) -> Iterator[Record]:
        """The chunk rows of ``partition`` matching ``where``, a page of QUERY_PAGE_ROWS
        read at a time, each page retried on transient trouble from where the last ended
        (a query of a million rows must not start again, nor fail, for one busy reply)."""
        first = Where("RowKey", "ge", "c")
        while True:
            page = budget.call(functools.partial(self._page, partition, [first, *where]))
            yield from page
            if len(page) < QUERY_PAGE_ROWS:
                return
            first = Where("RowKey", "gt", page[-1].row_key)

    def _page(self, partition: str, where: list[Where]) -> list[Record]:
        query = self._records.query(layout.TASKS_TABLE, partition, where, limit=QUERY_PAGE_ROWS)
        return list(query)

    def poisoned_tasks(
        self, job_id: str, budget: Budget | None = None
    ) -> Iterator[tuple[TaskKind, int, TaskRecord | BadRecord]]:
        """``(kind, index, task)`` of the job's poisoned chunks in index order, then its
        planning or finalize if poisoned; a BadRecord saying why for a record that
        cannot be read, unless the state it stores is readable and another."""
        budget = self._given(budget)
        for index, chunk in self.scan_chunks(job_id, ("poisoned",), budget):
            yield "chunk", index, chunk
        for kind in ("plan", "final"):
            partition, row = self._keys(job_id, kind, 0)
            read = functools.partial(self._records.get, layout.TASKS_TABLE, partition, row)
            try:
                record = budget.call(read)
            except NotFound:
                continue
            try:
                task = TaskRecord.from_record(job_id, kind, 0, record)
            except BadRecord as bad:
                state = record.properties.get("state")
                if state not in TASK_STATES or state == "poisoned":
                    yield kind, 0, bad
                continue
            if task.state == "poisoned":
                yield kind, 0, task

    def results(self, job_id: str, budget: Budget | None = None) -> Iterator[tuple[int, Any]]:
        """``(index, result)`` of every done chunk, in index order."""
        for task in self.chunks(job_id, ("done",), budget):
            yield task.index, self.value(task.properties, "result", of=task.name)

    def outputs(self, job_id: str, budget: Budget | None = None) -> Iterator[tuple[int, Any]]:
        """``(index, published outputs by name)`` of every done chunk, in index order
        (``chunk.publish``; an empty map for a chunk that published none)."""
        for task in self.chunks(job_id, ("done",), budget):
            yield task.index, self.value(task.properties, OUTPUTS, default={}, of=task.name)


def _counts(record: Record, job_id: str, shard: int) -> dict[str, int]:
    """A counter row's counts (its other properties, such as the writer, left out).

    Raises:
        BadRecord: a count is not a whole number, or the row cannot be read at all (a
            hand edit, another version): nobody knows the right count, so nothing can
            be counted on top of it.
    """
    if record.unreadable is not None:
        raise BadRecord(f"shard {shard} counter of job {job_id!r}: {record.unreadable}")
    properties: Mapping[str, Any] = record.properties  # checked whole just below
    counts = {name: properties.get(name, 0) for name in COUNTERS}
    if not all(checks.is_whole(value) for value in counts.values()):
        raise BadRecord(f"shard {shard} counter of job {job_id!r}: {counts!r} is not counts")
    return counts


def refused(error: Exception) -> bool:
    """Whether a write that raised ``error`` is known not to have been applied: every
    error says so but the transient ones, after which it may have been (the answer
    lost). Blobs spilled for a refused write can go; for the others, not."""
    return not isinstance(error, TRANSIENT)


def _planning_pages(
    job_id: str, ops: list[tuple[int, BatchOp]]
) -> list[tuple[str, list[tuple[int, BatchOp]]]]:
    """``(partition, page)`` of the chunk inserts: by shard, at most BATCH_ROWS a page."""
    by_shard: dict[int, list[tuple[int, BatchOp]]] = {}
    for index, op in ops:
        by_shard.setdefault(layout.shard_of(index), []).append((index, op))
    return [
        (layout.shard_partition(job_id, shard), indexed[start : start + BATCH_ROWS])
        for shard, indexed in by_shard.items()
        for start in range(0, len(indexed), BATCH_ROWS)
    ]


def _size(properties: Mapping[str, Any]) -> int:
    """A generous estimate of a merge's size on the wire (for splitting batches)."""
    return 1024 + sum(len(v) for v in properties.values() if isinstance(v, (bytes, str)))


def _batches(positions: range, sizes: list[int]) -> Iterator[list[int]]:
    """``positions`` cut into runs that fit one batch beside the counter row: at most
    BATCH_ROWS - 1 operations and BATCH_BYTES."""
    group: list[int] = []
    total = 0
    for position in positions:
        if group and (len(group) == BATCH_ROWS - 1 or total + sizes[position] > BATCH_BYTES):
            yield group
            group, total = [], 0
        group.append(position)
        total += sizes[position]
    if group:
        yield group


def _as_record(row_key: str, properties: Mapping[str, Any], etag: str) -> Record:

    return Record(partition_key="", row_key=row_key, properties=dict(properties), etag=etag)
