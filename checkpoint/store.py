"""The checkpoint store: job and task records with ETag compare-and-swap, on any backend.

Every write of a task record is conditional on the ETag its writer last saw, so a
worker that lost its chunk can never overwrite the new owner's progress: the write
raises :class:`~jobs.errors.Conflict` and the runner turns that into ``LeaseLost``.
Values larger than :data:`~checkpoint.records.SPILL_BYTES` are spilled to a blob that
is never overwritten (each write gets a fresh name), so a lost race leaves the winner's
blob intact; the loser deletes its own.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint import codec, layout
from checkpoint.records import SPILL_BYTES, JobRecord, TaskKind, TaskRecord
from checkpoint.storage import BatchOp, Record, Storage, Where
from jobs.clock import Clock, SystemClock
from jobs.errors import (
    AlreadyExists,
    BadRecord,
    BatchFailed,
    CodecError,
    Conflict,
    JobNotFound,
    NotFound,
    StorageError,
)

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
    """Job and task records of one storage account."""

    def __init__(self, storage: Storage, clock: Clock | None = None):
        self.storage = storage
        self.clock = clock or SystemClock()
        self._records = storage.records
        self._ready = False
        self._counters: dict[str, Record] = {}

    def ensure(self) -> None:
        """Create the tables and the blob container (idempotent; once per store)."""
        if not self._ready:
            self._records.create_table(layout.JOBS_TABLE)
            self._records.create_table(layout.TASKS_TABLE)
            self.storage.blobs.create_container(layout.DATA_CONTAINER)
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
        self, properties: Mapping[str, Any], field: str, default: Any = None, of: str = "record"
    ) -> Any:
        """A stored field's value, read from its blob if it was spilled.

        Raises BadRecord naming ``of`` (the record, as ``TaskRecord.name`` says it) and
        the field if what is stored there is not a msgpack value or its blob is gone.
        """
        blob, data = properties.get(f"{field}_blob"), properties.get(field)
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

    # ----------------------------------------------------------------- jobs

    def create_job(
        self, job_id: str, job_type: str, queue: str, params: Any
    ) -> tuple[JobRecord, bool]:
        """Record a new job; if ``job_id`` exists already, return that one (and False)."""
        self.ensure()
        layout.check_job_id(job_id)
        now = self.clock.now()
        properties = {
            "job_type": job_type,
            "queue": queue,
            "state": "planning",
            "created_on": now,
            "updated_on": now,
            **self._put_value((job_id, "job", 0), "params", params),
        }
        # Counters first: a job record never exists without them, even after a submit
        # that died half-way (its re-submit would otherwise find the job and stop there).
        self._create_counters(job_id)
        try:
            self._records.insert(layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, properties)
        except AlreadyExists:
            for name in self._written_blobs(properties):
                self._delete_blob(name)
            return self.get_job(job_id), False
        return self.get_job(job_id), True

    def _create_counters(self, job_id: str) -> None:
        for shard in range(layout.SHARDS):
            try:
                self._records.insert(
                    layout.TASKS_TABLE,
                    layout.shard_partition(job_id, shard),
                    layout.COUNTS_ROW,
                    {"done": 0, "poisoned": 0},
                )
            except AlreadyExists:
                pass

    def get_job(self, job_id: str) -> JobRecord:
        self.ensure()
        try:
            record = self._records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id)
        except NotFound as missing:
            raise JobNotFound(f"no job {job_id!r} in {self.storage.description}") from missing
        return JobRecord.from_record(record)

    def list_jobs(self) -> list[JobRecord]:
        """Every job whose record can be read (see :meth:`scan_jobs` for the others)."""
        return [job for _, job in self.scan_jobs() if isinstance(job, JobRecord)]

    def scan_jobs(self) -> list[tuple[str, JobRecord | BadRecord]]:
        """``(job id, job)`` of every job, with a BadRecord saying why for a record that
        cannot be read."""
        self.ensure()
        found: list[tuple[str, JobRecord | BadRecord]] = []
        for record in self._records.query(layout.JOBS_TABLE, layout.JOBS_PARTITION):
            try:
                found.append((record.row_key, JobRecord.from_record(record)))
            except BadRecord as bad:
                found.append((record.row_key, bad))
        return found

    def params(self, job: JobRecord) -> Any:
        return self.value(job.properties, "params", of=job.name)

    def update_job(self, job: JobRecord, **changes: Any) -> JobRecord:
        """Merge ``changes`` into the job if nobody changed it since ``job`` was read."""
        changes["updated_on"] = self.clock.now()
        etag = self._records.merge(
            layout.JOBS_TABLE, layout.JOBS_PARTITION, job.job_id, changes, etag=job.etag
        )
        properties = {**job.properties, **changes}
        return JobRecord.from_record(_as_record(job.job_id, properties, etag))

    # ----------------------------------------------------------------- tasks

    def _keys(self, job_id: str, kind: TaskKind, index: int) -> tuple[str, str]:
        if kind == "chunk":
            return layout.shard_partition(job_id, layout.shard_of(index)), layout.chunk_row(index)
        return layout.control_partition(
            job_id
        ), layout.PLAN_ROW if kind == "plan" else layout.FINAL_ROW

    def add_chunks(
        self, job_id: str, first_index: int, payloads: Sequence[Any]
    ) -> list[PlannedChunk]:
        """Record chunks ``first_index...`` as waiting. Idempotent: a chunk recorded by an
        earlier, crashed planning attempt is left as it is (it may have run already).

        Returns each chunk's record as planned (see :class:`PlannedChunk`)."""
        by_shard: dict[int, list[tuple[int, BatchOp]]] = {}
        for offset, payload in enumerate(payloads):
            index = first_index + offset
            properties = {
                "state": "waiting",
                "attempt": 0,
                **self._put_value((job_id, "chunk", index), "payload", payload),
            }
            op = BatchOp("insert", layout.chunk_row(index), properties)
            by_shard.setdefault(layout.shard_of(index), []).append((index, op))
        planned = [PlannedChunk(first_index + offset) for offset in range(len(payloads))]
        for shard, indexed in by_shard.items():
            partition = layout.shard_partition(job_id, shard)
            for start in range(0, len(indexed), BATCH_ROWS):
                page = indexed[start : start + BATCH_ROWS]
                etags = self._insert_missing(partition, [op for _, op in page])
                for (index, op), etag in zip(page, etags, strict=True):
                    payload = op.properties["payload"]
                    if etag is not None and isinstance(payload, bytes) and payload:
                        planned[index - first_index] = PlannedChunk(index, etag, payload)
        return planned

    def _insert_missing(self, partition: str, ops: list[BatchOp]) -> list[str | None]:
        """Insert ``ops``; return each one's ETag, or None where the row existed."""
        try:
            return list(self._records.batch(layout.TASKS_TABLE, partition, ops))
        except BatchFailed as failed:
            if not isinstance(failed.reason, AlreadyExists):
                raise
        # A re-run of planning after a crash: insert one by one, keeping what exists.
        etags: list[str | None] = []
        for op in ops:
            try:
                etags.append(
                    self._records.insert(layout.TASKS_TABLE, partition, op.row_key, op.properties)
                )
            except AlreadyExists:
                etags.append(None)
                for name in self._written_blobs(op.properties):
                    self._delete_blob(name)  # the existing chunk keeps its own
        return etags

    def planned_task(self, job_id: str, index: int, etag: str, payload: bytes) -> TaskRecord:
        """The chunk record as :meth:`add_chunks` wrote it, known by its ETag (a write
        conditional on that ETag succeeds only if the record is still exactly this)."""
        properties = {"state": "waiting", "attempt": 0, "payload": payload, "payload_blob": ""}
        record = _as_record(layout.chunk_row(index), properties, etag)
        return TaskRecord.from_record(job_id, "chunk", index, record)

    def ensure_task(self, job_id: str, kind: TaskKind) -> TaskRecord:
        """The planning or finalize record of a job, created waiting if absent."""
        partition, row = self._keys(job_id, kind, 0)
        try:
            self._records.insert(
                layout.TASKS_TABLE, partition, row, {"state": "waiting", "attempt": 0}
            )
        except AlreadyExists:
            pass
        return self.get_task(job_id, kind, 0)

    def get_task(self, job_id: str, kind: TaskKind, index: int) -> TaskRecord:
        """Raises NotFound if the task was never recorded."""
        partition, row = self._keys(job_id, kind, index)
        record = self._records.get(layout.TASKS_TABLE, partition, row)
        return TaskRecord.from_record(job_id, kind, index, record)

    def task_as_found(self, job_id: str, kind: TaskKind, index: int) -> TaskRecord:
        """The task record however garbled, to write over it (TaskRecord.as_found)."""
        partition, row = self._keys(job_id, kind, index)
        record = self._records.get(layout.TASKS_TABLE, partition, row)
        return TaskRecord.as_found(job_id, kind, index, record)

    def write_task(
        self, task: TaskRecord, changes: Mapping[str, Any], values: Mapping[str, Any] = {}
    ) -> TaskRecord:
        """Merge ``changes`` (and msgpack ``values``, spilled if large) into the task, if
        its ETag is still ``task.etag``. Raises Conflict if someone else wrote since."""
        merged = {**changes, "updated_on": self.clock.now()}
        for field, value in values.items():
            merged.update(self._put_value((task.job_id, task.kind, task.index), field, value))
        partition, row = self._keys(task.job_id, task.kind, task.index)
        try:
            etag = self._records.merge(layout.TASKS_TABLE, partition, row, merged, etag=task.etag)
        except Conflict:
            for name in self._written_blobs(merged):
                self._delete_blob(name)
            raise
        self._drop_replaced_blobs(task.properties, merged)
        properties = {**task.properties, **merged}
        return TaskRecord.from_record(
            task.job_id, task.kind, task.index, _as_record(row, properties, etag)
        )

    def final_changes(
        self, task: TaskRecord, changes: Mapping[str, Any], values: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The properties that end a chunk: ``changes`` and the msgpack ``values``
        (spilled to blob if large). Raises CodecError if a value cannot be stored.

        Encoded apart from :meth:`count_chunks` so a value that cannot be stored fails
        in the chunk's own thread, where the failure is recorded on the chunk.
        """
        merged = {**changes, "updated_on": self.clock.now()}
        for field, value in values.items():
            merged.update(self._put_value((task.job_id, "chunk", task.index), field, value))
        return merged

    def count_chunk(
        self, task: TaskRecord, changes: Mapping[str, Any], values: Mapping[str, Any], counter: str
    ) -> tuple[TaskRecord, dict[str, int]]:
        """Write a chunk's final state and add one to its shard's ``counter`` ("done" or
        "poisoned", or "-poisoned" to take one off) in one atomic batch.

        Raises Conflict if the chunk was written by someone else since ``task`` was read.
        """
        final = self.final_changes(task, changes, values)
        (written,), counts = self.count_chunks([(task, final)], counter)
        if isinstance(written, StorageError):
            raise written
        return written, counts

    def count_chunks(
        self, ended: Sequence[tuple[TaskRecord, Mapping[str, Any]]], counter: str
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
        outcome: list[TaskRecord | StorageError | None] = [None] * len(ended)
        counts: dict[str, int] = {}
        for group in _batches(range(len(ended)), [_size(final) for _, final in ended]):
            counts = self._count_batch(ended, group, counter, outcome)
        for (task, final), result in zip(ended, outcome, strict=True):
            if isinstance(result, StorageError):
                for name in self._written_blobs(final):
                    self._delete_blob(name)
            else:
                self._drop_replaced_blobs(task.properties, final)
        return outcome, counts  # type: ignore[return-value]

    def _count_batch(
        self,
        ended: Sequence[tuple[TaskRecord, Mapping[str, Any]]],
        group: list[int],
        counter: str,
        outcome: list[TaskRecord | StorageError | None],
    ) -> dict[str, int]:
        """One batch: the chunks in ``group`` (positions in ``ended``) and the counter.
        A chunk the service refuses is taken out and the rest sent again."""
        first = ended[group[0]][0]
        partition = layout.shard_partition(first.job_id, layout.shard_of(first.index))
        name, step = counter.lstrip("-"), -1 if counter.startswith("-") else 1
        counts = self._counters.get(partition) or self._read_counts(partition)
        while True:
            if not group:
                return {k: int(v) for k, v in counts.properties.items()}  # type: ignore[arg-type]
            old = int(counts.properties.get(name, 0))  # type: ignore[arg-type]
            new_counts = {**counts.properties, name: old + step * len(group)}
            ops = [
                BatchOp("merge", layout.chunk_row(ended[i][0].index), ended[i][1], ended[i][0].etag)
                for i in group
            ]
            ops.append(BatchOp("merge", layout.COUNTS_ROW, new_counts, counts.etag))
            try:
                etags = self._records.batch(layout.TASKS_TABLE, partition, ops)
            except BatchFailed as failed:
                if failed.index == len(group) and isinstance(failed.reason, Conflict):
                    counts = self._read_counts(partition)  # another chunk ended meanwhile
                    continue
                if failed.index >= len(group) or not isinstance(
                    failed.reason, (Conflict, NotFound)
                ):
                    raise failed.reason from failed
                outcome[group.pop(failed.index)] = failed.reason
                continue
            counts = _as_record(layout.COUNTS_ROW, new_counts, etags[-1])
            self._counters[partition] = counts
            for i, etag in zip(group, etags[:-1], strict=True):
                task, final = ended[i]
                row = layout.chunk_row(task.index)
                record = _as_record(row, {**task.properties, **final}, etag)
                outcome[i] = TaskRecord.from_record(task.job_id, "chunk", task.index, record)
            return {k: int(v) for k, v in new_counts.items()}  # type: ignore[arg-type]

    def _read_counts(self, partition: str) -> Record:
        # The last counter row seen per partition is kept, so a worker that ends most of
        # a shard's chunks updates the counter without reading it first.
        record = self._records.get(layout.TASKS_TABLE, partition, layout.COUNTS_ROW)
        if len(self._counters) > 4096:
            self._counters.clear()
        self._counters[partition] = record
        return record

    # ----------------------------------------------------------------- reading a job

    def shard_counts(self, job_id: str, shard: int) -> dict[str, int]:
        partition = layout.shard_partition(job_id, shard)
        record = self._records.get(layout.TASKS_TABLE, partition, layout.COUNTS_ROW)
        counts = record.properties
        if not all(type(v) is int for v in counts.values()):
            raise BadRecord(f"shard {shard} counter of job {job_id!r}: {counts!r} is not counts")
        return dict(counts)  # type: ignore[arg-type]

    def counts(self, job_id: str) -> dict[str, int]:
        """Done and poisoned chunks of the job, summed over its shards."""
        total = {"done": 0, "poisoned": 0}
        for shard in range(layout.SHARDS):
            for name, value in self.shard_counts(job_id, shard).items():
                total[name] = total.get(name, 0) + value
        return total

    def chunks(self, job_id: str, states: Sequence[str] = ()) -> Iterator[TaskRecord]:
        """The job's chunk records, in index order, optionally only those in ``states``.

        Raises BadRecord at the first record that cannot be read (:meth:`scan_chunks`
        goes past them)."""
        for _, task in self.scan_chunks(job_id, states):
            if isinstance(task, BadRecord):
                raise task
            yield task

    def scan_chunks(
        self, job_id: str, states: Sequence[str] = ()
    ) -> Iterator[tuple[int, TaskRecord | BadRecord]]:
        """``(index, chunk)`` as :meth:`chunks`, with a BadRecord for a chunk whose record
        cannot be read (it is included whatever ``states`` asks for, unless one state is
        asked for and its stored state is another)."""
        streams = [self._shard_chunks(job_id, shard, states) for shard in range(layout.SHARDS)]
        return heapq.merge(*streams, key=lambda found: found[0])

    def _shard_chunks(
        self, job_id: str, shard: int, states: Sequence[str]
    ) -> Iterator[tuple[int, TaskRecord | BadRecord]]:
        partition = layout.shard_partition(job_id, shard)
        where = [Where("RowKey", "ge", "c"), Where("RowKey", "lt", "d")]
        if len(states) == 1:
            where.append(Where("state", "eq", states[0]))
        for record in self._records.query(layout.TASKS_TABLE, partition, where):
            index = layout.index_of_row(record.row_key)
            try:
                task = TaskRecord.from_record(job_id, "chunk", index, record)
            except BadRecord as bad:
                yield index, bad
                continue
            if not states or task.state in states:
                yield index, task

    def poisoned_tasks(self, job_id: str) -> Iterator[TaskRecord]:
        """The job's poisoned chunks in index order, then its planning or finalize if
        poisoned."""
        yield from self.chunks(job_id, ("poisoned",))
        for kind in ("plan", "final"):
            try:
                task = self.get_task(job_id, kind, 0)  # type: ignore[arg-type]
            except NotFound:
                continue
            if task.state == "poisoned":
                yield task

    def results(self, job_id: str) -> Iterator[tuple[int, Any]]:
        """``(index, result)`` of every done chunk, in index order."""
        for task in self.chunks(job_id, ("done",)):
            yield task.index, self.value(task.properties, "result", of=task.name)


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
