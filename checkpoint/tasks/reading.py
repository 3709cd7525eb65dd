"""Reading a job's progress: its shard counts, its chunk records in index order, its
poisoned tasks, and the results and outputs of its done chunks.

A job's chunks are spread over its shards' partitions; each is read a page at a time,
and the pages merged by index, so reading a million chunks holds a page per shard.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from checkpoint import layout, retries
from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, NotFound
from checkpoint.records import CONTROL_KINDS, OUTPUTS, TASK_STATES, TaskKind, TaskRecord
from checkpoint.retries import Budget
from checkpoint.storage import Record, Storage, Where
from checkpoint.tasks.counting import COUNTED_ON, COUNTERS, counts_of
from checkpoint.tasks.task_records import task_keys
from checkpoint.values import Values

#: Rows read per query page (each page is retried on its own). A scan of a job's chunks
#: holds a page per shard (16) at once, and a row may hold up to 48 KiB inline each of
#: payload, state and result: 250 keeps that bounded where Azure's own 1,000 would not.
QUERY_PAGE_ROWS = 250


class JobReader:
    """Reads the jobs of one storage account.

    Args:
        storage: where the records are.
        clock: the clock of the default retry budget.
        values: reads the results and outputs of chunks, from their blobs if spilled.
    """

    def __init__(self, storage: Storage, clock: Clock, values: Values):
        self._records = storage.records
        self._clock = clock
        self._values = values

    def shard_counts(self, job_id: str, shard: int, budget: Budget | None = None) -> dict[str, int]:
        """Done and poisoned chunks of one shard of the job, as its counter row says."""
        return counts_of(self._counter_row(job_id, shard, budget), job_id, shard)

    def counts(self, job_id: str, budget: Budget | None = None) -> dict[str, int]:
        """Done and poisoned chunks of the job, summed over its shards."""
        return self.counts_and_counted_on(job_id, budget)[0]

    def counts_and_counted_on(
        self, job_id: str, budget: Budget | None = None, *, total: int | None = None
    ) -> tuple[dict[str, int], datetime | None]:
        """:meth:`counts`, and when a chunk was last counted in any shard (the newest
        ``counted_on`` of the counter rows; None before any was). With the job's
        ``total`` known, only the shards holding its chunks are read."""
        summed = dict.fromkeys(COUNTERS, 0)
        counted_on: datetime | None = None
        for shard in layout.shards_holding(total):
            record = self._counter_row(job_id, shard, budget)
            for name, value in counts_of(record, job_id, shard).items():
                summed[name] = summed.get(name, 0) + value
            when = record.properties.get(COUNTED_ON)
            if isinstance(when, datetime) and (counted_on is None or when > counted_on):
                counted_on = when
        return summed, counted_on

    def _counter_row(self, job_id: str, shard: int, budget: Budget | None) -> Record:
        partition = layout.shard_partition(job_id, shard)
        return retries.given(budget, self._clock).call(
            lambda: self._records.get(layout.TASKS_TABLE, partition, layout.COUNTS_ROW)
        )

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
        self,
        job_id: str,
        states: Sequence[str] = (),
        budget: Budget | None = None,
        *,
        where: Sequence[Where] = (),
        total: int | None = None,
    ) -> Iterator[tuple[int, TaskRecord | BadRecord]]:
        """``(index, chunk)`` as :meth:`chunks`, with a BadRecord for a chunk whose record
        cannot be read (it is included whatever ``states`` asks for, unless one state is
        asked for and its stored state is another). ``where``: more conditions the
        query sends (an unreadable record is still named whatever they say). With the
        job's ``total`` known, only the shards holding its chunks are queried."""
        budget = retries.given(budget, self._clock)
        streams = [
            self._shard_chunks(job_id, shard, states, budget, where)
            for shard in layout.shards_holding(total)
        ]
        return heapq.merge(*streams, key=lambda found: found[0])

    def _shard_chunks(
        self,
        job_id: str,
        shard: int,
        states: Sequence[str],
        budget: Budget,
        more: Sequence[Where] = (),
    ) -> Iterator[tuple[int, TaskRecord | BadRecord]]:
        partition = layout.shard_partition(job_id, shard)
        where = [Where("RowKey", "lt", "d"), *more]
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
        budget = retries.given(budget, self._clock)
        for index, chunk in self.scan_chunks(job_id, ("poisoned",), budget):
            yield "chunk", index, chunk
        for kind in CONTROL_KINDS:
            partition, row = task_keys(job_id, kind, 0)
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
            yield task.index, self._values.read(task.properties, "result", of=task.name)

    def outputs(self, job_id: str, budget: Budget | None = None) -> Iterator[tuple[int, Any]]:
        """``(index, published outputs by name)`` of every done chunk, in index order
        (``chunk.publish``; an empty map for a chunk that published none)."""
        for task in self.chunks(job_id, ("done",), budget):
            yield task.index, self._values.read(task.properties, OUTPUTS, default={}, of=task.name)
