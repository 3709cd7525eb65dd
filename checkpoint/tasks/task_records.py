"""Task records: a job's chunks recorded as planning pages them, its planning and
finalize records, and each task's writes, conditional on the ETag its writer last saw.

A worker that lost its chunk can never overwrite the new owner's progress: its write
raises :class:`~checkpoint.errors.Conflict` and the runner turns that into ``LeaseLost``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint import layout, retries, settle
from checkpoint.clock import Clock
from checkpoint.errors import CodecError, NotFound, StorageError
from checkpoint.records import TaskKind, TaskRecord
from checkpoint.retries import Budget
from checkpoint.settle import WRITER
from checkpoint.storage import BatchOp, Record, Storage
from checkpoint.values import Values, refused

#: Records written per batch (Azure allows 100 per partition batch).
BATCH_ROWS = 100
#: Bytes of records per batch, by :func:`wire_bytes`: under Azure's 4 MiB per batch
#: with room for a counter row and the request's own framing.
BATCH_BYTES = 3 * 1024 * 1024


def wire_bytes(properties: Mapping[str, Any]) -> int:
    """A generous estimate of one operation's bytes in a batch on the wire: binary
    values go as base64 (4 bytes per 3), text as UTF-8, and 1 KiB for the rest."""
    return 1024 + sum(
        4 * (len(v) + 2) // 3 if isinstance(v, bytes) else 4 * len(v) if isinstance(v, str) else 0
        for v in properties.values()
    )


def batch_runs(sizes: Sequence[int], max_rows: int) -> Iterator[list[int]]:
    """Positions ``0 .. len(sizes) - 1`` cut, in order, into runs of at most ``max_rows``
    whose sizes add up to at most :data:`BATCH_BYTES` (a run of one may be larger)."""
    run: list[int] = []
    total = 0
    for position, size in enumerate(sizes):
        if run and (len(run) == max_rows or total + size > BATCH_BYTES):
            yield run
            run, total = [], 0
        run.append(position)
        total += size
    if run:
        yield run


@dataclass(frozen=True)
class PlannedChunk:
    """A chunk as planning recorded it: its ETag and encoded payload, or None for both
    if unknown (the record existed already, or its payload was spilled to a blob)."""

    index: int
    etag: str | None = None
    payload: bytes | None = None


def task_keys(job_id: str, kind: TaskKind, index: int) -> tuple[str, str]:
    """The partition and row of a task's record."""
    if kind == "chunk":
        return layout.shard_partition(job_id, layout.shard_of(index)), layout.chunk_row(index)
    return layout.control_partition(job_id), layout.CONTROL_ROWS[kind]


class TaskRecords:
    """The task records of the jobs of one storage account.

    Args:
        storage: where the records are.
        clock: stamps each write (``updated_on``); the clock of the default budget.
        values: stores the msgpack values of a write, spilled to a blob if large.
    """

    def __init__(self, storage: Storage, clock: Clock, values: Values):
        self._records = storage.records
        self._clock = clock
        self._values = values

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
        budget = retries.given(budget, self._clock)
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
                    **self._values.put((job_id, "chunk", index), "payload", payload),
                }
                ops.append((index, BatchOp("insert", layout.chunk_row(index), properties)))
        except CodecError:
            self._values.drop_unwritten(op.properties for _, op in ops)  # nothing recorded
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
                self._values.drop_unwritten(op.properties for _, later in unsent for _, op in later)
                raise
            for (index, op), record in zip(page, records, strict=True):
                payload = op.properties["payload"]
                if record is None:
                    self._values.drop_unwritten([op.properties])  # the chunk keeps its own
                elif isinstance(payload, bytes) and payload:
                    planned[index - first_index] = PlannedChunk(index, record.etag, payload)
        return planned

    def planned_task(self, job_id: str, index: int, etag: str, payload: bytes) -> TaskRecord:
        """The chunk record as :meth:`add_chunks` wrote it, known by its ETag (a write
        conditional on that ETag succeeds only if the record is still exactly this)."""
        properties: dict[str, Any] = {
            "state": "waiting",
            "attempt": 0,
            "payload": payload,
            "payload_blob": "",
        }
        record = Record("", layout.chunk_row(index), properties, etag)
        return TaskRecord.from_record(job_id, "chunk", index, record)

    def ensure_task(
        self,
        job_id: str,
        kind: TaskKind,
        budget: Budget | None = None,
        incarnation: str | None = None,
    ) -> TaskRecord:
        """The planning, feed or finalize record of a job, created waiting (for the
        job's ``incarnation``) if absent. Read first: a job's feed record is taken again
        at every step of its feeding, and one read costs less than an insert refused."""
        budget = retries.given(budget, self._clock)
        try:
            return self.get_task(job_id, kind, 0, budget)
        except NotFound:
            pass
        partition, row = task_keys(job_id, kind, 0)
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
        partition, row = task_keys(job_id, kind, index)
        record = retries.given(budget, self._clock).call(
            lambda: self._records.get(layout.TASKS_TABLE, partition, row)
        )
        return TaskRecord.from_record(job_id, kind, index, record)

    def task_as_found(self, job_id: str, kind: TaskKind, index: int) -> TaskRecord:
        """The task record however garbled, to write over it (TaskRecord.as_found)."""
        partition, row = task_keys(job_id, kind, index)
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
        merged = self.task_changes(task, changes, values, token)
        partition, row = task_keys(task.job_id, task.kind, task.index)
        before = Record(partition, row, task.properties, task.etag)
        try:
            written = settle.merge(
                self._records,
                layout.TASKS_TABLE,
                before,
                merged,
                retries.given(budget, self._clock),
            )
        except StorageError as error:
            if refused(error):
                self._values.drop_unwritten([merged])
            raise
        self._values.drop_replaced(task.properties, merged)
        return TaskRecord.from_record(task.job_id, task.kind, task.index, written)

    def task_changes(
        self,
        task: TaskRecord,
        changes: Mapping[str, Any],
        values: Mapping[str, Any],
        token: str | None = None,
    ) -> dict[str, Any]:
        """The properties one write of ``task`` merges: ``changes``, the time, the writer
        ``token`` (a one-off if None) and the msgpack ``values`` (spilled to blob if
        large). Raises CodecError if a value cannot be stored.

        A chunk's final write is built here too, apart from its batch
        (:mod:`checkpoint.tasks.counting`), so a value that cannot be stored fails in the
        chunk's own thread, where the failure is recorded on the chunk."""
        merged = {**changes, "updated_on": self._clock.now(), WRITER: token or settle.one_off()}
        for field, value in values.items():
            merged.update(self._values.put((task.job_id, task.kind, task.index), field, value))
        return merged


def _planning_pages(
    job_id: str, ops: list[tuple[int, BatchOp]]
) -> list[tuple[str, list[tuple[int, BatchOp]]]]:
    """``(partition, page)`` of the chunk inserts: by shard, each page one batch (at most
    BATCH_ROWS rows and BATCH_BYTES)."""
    by_shard: dict[int, list[tuple[int, BatchOp]]] = {}
    for index, op in ops:
        by_shard.setdefault(layout.shard_of(index), []).append((index, op))
    return [
        (layout.shard_partition(job_id, shard), [indexed[i] for i in run])
        for shard, indexed in by_shard.items()
        for run in batch_runs([wire_bytes(op.properties) for _, op in indexed], BATCH_ROWS)
    ]
