"""Shard counters: a chunk's final state and its shard's count, written in one batch.

Each shard of a job has a counter row (:data:`~checkpoint.layout.COUNTS_ROW`) counting
its done and poisoned chunks. A chunk's final state and the counter change in one atomic
batch, so a count is never off by a chunk a crash left half-written; completion sums
the shards' counters instead of reading every chunk (:mod:`runner.worker.tasks.job_completion`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from checkpoint import checks, layout, metering, retries, settle
from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, BatchFailed, Conflict, NotFound, StorageError
from checkpoint.records import TaskRecord
from checkpoint.retries import TRANSIENT, Budget
from checkpoint.settle import WRITER, token_of
from checkpoint.storage import BatchOp, Record, Storage
from checkpoint.tasks.task_records import BATCH_ROWS, batch_runs, wire_bytes
from checkpoint.values import Values, refused

#: The counts a shard's counter row holds.
COUNTERS = ("done", "poisoned")
#: The counter row's property saying when a chunk was last counted in it (the
#: counting worker's clock), written in the batch that counts it.
COUNTED_ON = "counted_on"
#: A counter of a shard's row: chunks done, or poisoned.
CounterName = Literal["done", "poisoned"]
#: Counter rows remembered at most (one per shard of the jobs a worker ends chunks of).
REMEMBERED_ROWS = 4096


class ShardCounters:
    """The counter rows of the jobs of one storage account, and the batches that end
    chunks and count them.

    Args:
        storage: where the rows are.
        clock: the clock of the default retry budget.
        values: deletes the blobs of chunks not written, and those a write replaced.
    """

    def __init__(self, storage: Storage, clock: Clock, values: Values):
        self._records = storage.records
        self._clock = clock
        self._values = values
        #: The last counter row seen per partition, so a worker that ends most of a
        #: shard's chunks updates the counter without reading it first.
        self._rows: dict[str, Record] = {}

    def create(self, job_id: str, budget: Budget) -> None:
        """A counter row at zero in each shard of the job (one there already is kept)."""
        for shard in range(layout.SHARDS):
            settle.insert(
                self._records,
                layout.TASKS_TABLE,
                layout.shard_partition(job_id, shard),
                layout.COUNTS_ROW,
                {"done": 0, "poisoned": 0, WRITER: settle.one_off()},
                budget,
            )

    def seen(self, job_id: str) -> dict[str, int]:
        """Done and poisoned chunks of the job as this process last saw its counter
        rows, summed (a shard not seen counts 0), with no request: never more than the
        rows hold, as counters only grow (but for a redrive taking poisoned ones off)."""
        total = dict.fromkeys(COUNTERS, 0)
        for shard in range(layout.SHARDS):
            row = self._rows.get(layout.shard_partition(job_id, shard))
            if row is not None:
                for name, value in counts_of(row, job_id, shard).items():
                    total[name] = total.get(name, 0) + value
        return total

    def forget(self, job_id: str) -> None:
        """Forget the job's rows as last seen (the job is being deleted)."""
        for shard in range(layout.SHARDS):
            self._rows.pop(layout.shard_partition(job_id, shard), None)

    def count_chunks(
        self,
        ended: Sequence[tuple[TaskRecord, Mapping[str, Any]]],
        counter: CounterName,
        budget: Budget | None = None,
        *,
        take_off: bool = False,
    ) -> tuple[list[TaskRecord | StorageError], dict[str, int]]:
        """Merge each chunk's final properties (from
        :meth:`~checkpoint.store.CheckpointStore.final_changes`) and add the number
        written to ``counter`` of their shard (or, if ``take_off``, take it off: a
        poisoned chunk redriven), in atomic batches.

        All chunks must be of one job and one shard. Returns, in order, each chunk's new
        record, or the error that kept it from being written (Conflict: someone else
        wrote it since it was read; NotFound: it is gone), and the shard's counts. A
        concurrent change to the counter is retried: it only means another chunk of the
        shard ended at the same moment. Spilled blobs of chunks not written are deleted.
        """
        if not ended:
            raise ValueError("no chunks to count")
        if counter not in COUNTERS:
            raise ValueError(f"no counter {counter!r}: a shard counts {' and '.join(COUNTERS)}")
        job_id, shard = ended[0][0].job_id, layout.shard_of(ended[0][0].index)
        # A loop, not any() over a generator: each step of a generator would go back
        # and forth between this module and layout's, for every chunk.
        for task, _ in ended:
            if task.job_id != job_id or layout.shard_of(task.index) != shard:
                raise ValueError("count_chunks takes chunks of one job and one shard")
        outcome: dict[int, TaskRecord | StorageError] = {}  # by position in ``ended``
        counts: dict[str, int] = {}
        budget = retries.given(budget, self._clock)
        step = -1 if take_off else 1
        groups = _batches(ended)
        for number, group in enumerate(groups):
            try:
                counts = self._count_batch(list(ended), group, counter, step, outcome, budget)
            except (StorageError, BadRecord) as error:
                # Groups not sent are not written, nor is this one if it was refused,
                # nor a chunk someone else wrote (its error is its outcome).
                first_unsent = number if refused(error) else number + 1
                unsent = {i for later in groups[first_unsent:] for i in later}
                self._values.drop_unwritten(
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
                self._values.drop_unwritten([final])
            else:
                self._values.drop_replaced(task.properties, final)
        return results, counts

    def _count_batch(
        self,
        ended: list[tuple[TaskRecord, Mapping[str, Any]]],
        group: list[int],
        counter: CounterName,
        step: int,
        outcome: dict[int, TaskRecord | StorageError],
        budget: Budget,
    ) -> dict[str, int]:
        """One batch: the chunks in ``group`` (positions in ``ended``) and the counter,
        moved by ``step`` a chunk. A chunk someone else wrote is taken out and the rest
        sent again; a chunk an earlier write of ours changed is sent again on top of
        that write."""
        first = ended[group[0]][0]
        partition = layout.shard_partition(first.job_id, layout.shard_of(first.index))
        counts = self._rows.get(partition) or self._read_counts(partition, budget)
        while True:
            if not group:
                return counts_of(counts, first.job_id, layout.shard_of(first.index))
            old = counts_of(counts, first.job_id, layout.shard_of(first.index))[counter]
            new_counts = {**counts.properties, counter: old + step * len(group)}
            new_counts[WRITER] = settle.one_off()
            # When a chunk was last counted, for the views' "last moved" (no write of its own).
            new_counts[COUNTED_ON] = self._clock.now()
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
            self._rows[partition] = counts
            for i, record in zip(group, written[:-1], strict=True):
                task = ended[i][0]
                # A merge's answer holds only what it changed; a read, the whole record.
                whole = replace(record, properties={**task.properties, **record.properties})
                outcome[i] = TaskRecord.from_record(task.job_id, "chunk", task.index, whole)
            return counts_of(counts, first.job_id, layout.shard_of(first.index))

    def _batch_settled(self, partition: str, ops: list[BatchOp]) -> list[Record]:
        """Apply ``ops`` as one batch; returns each row as written. After a failure that
        leaves it unknown, the first row is read: the batch is atomic, so carrying this
        batch's token there means all of it was applied."""
        try:
            etags = self._records.batch(layout.TASKS_TABLE, partition, ops)
        except TRANSIENT as lost:
            if not self._batch_applied(partition, ops):
                raise lost
            metering.report(lost, "ambiguous_settled")
        except BatchFailed as failed:
            if not isinstance(failed.reason, Conflict) or not self._batch_applied(partition, ops):
                raise
            metering.report(failed, "ambiguous_settled")
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
        record = budget.call(
            lambda: self._records.get(layout.TASKS_TABLE, partition, layout.COUNTS_ROW)
        )
        if len(self._rows) > REMEMBERED_ROWS:
            self._rows.clear()
        self._rows[partition] = record
        return record


def counts_of(record: Record, job_id: str, shard: int) -> dict[str, int]:
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
    if not all(type(value) is int or checks.is_whole(value) for value in counts.values()):
        raise BadRecord(f"shard {shard} counter of job {job_id!r}: {counts!r} is not counts")
    return counts


def _batches(ended: Sequence[tuple[TaskRecord, Mapping[str, Any]]]) -> list[list[int]]:
    """Positions in ``ended`` cut into batches, each leaving a row for the shard's
    counter and touching each chunk's row once: Azure refuses a whole batch that touches
    a row twice. One chunk is there twice when a worker's second run of it ended while
    the first run's end still waited (its lease lapsed meanwhile): the later copies go
    in later batches, where the one whose ETag is stale is fenced as any other."""
    passes: list[list[int]] = []  # the first copy of each chunk, then the second, ...
    copies: dict[int, int] = {}
    for position, (task, _) in enumerate(ended):
        copy = copies[task.index] = copies.get(task.index, -1) + 1
        if copy == len(passes):
            passes.append([])
        passes[copy].append(position)
    return [
        [positions[i] for i in run]
        for positions in passes
        for run in batch_runs([wire_bytes(ended[p][1]) for p in positions], BATCH_ROWS - 1)
    ]
