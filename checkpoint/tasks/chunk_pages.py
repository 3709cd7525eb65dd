"""Pages of a job's chunk records, at a cost that does not grow with the job.

A job's chunks sit in :data:`~checkpoint.layout.SHARDS` partitions, in blocks of
:data:`~checkpoint.layout.SHARD_BLOCK` consecutive indices dealt round-robin
(:mod:`checkpoint.layout`). A page is read in one of two ways:

- :meth:`ChunkPages.by_index`, ``count`` consecutive indices from ``first``: within one
  shard partition the indices of any range are one RowKey range (the blocks between
  two of its blocks are in the other shards), so the page is one query per shard it
  touches, ``min(16, blocks touched)`` queries, each returning at most ``count`` rows.
- :meth:`ChunkPages.in_state`, the chunks in one state, shard after shard (shard 0's in
  index order, then shard 1's, ...), from a :class:`ChunkCursor` (the shard, and the last
  row read there). Each query asks one shard for the rows the page still needs and one
  more (to know whether that shard has more): a page is one query where a shard holds a
  page of them, and at most 16 where they are sparse, returning at most ``count + 1`` rows
  each. Not index order, which would need every shard's next rows for every page.

Neither reads a blob, nor counts, nor lists anything of the job's size.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from checkpoint import layout, retries
from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, ConfigurationError
from checkpoint.records import TaskRecord
from checkpoint.retries import Budget
from checkpoint.storage import Record, RecordStore, Where

#: The most chunks one page may hold (Azure returns at most 1,000 rows per request).
MAX_PAGE_CHUNKS = 500

#: ``(index, chunk)``, a BadRecord saying why for a record that cannot be read.
FoundChunk = tuple[int, TaskRecord | BadRecord]

_CURSOR = re.compile(r"^(\d{1,2})\.(\d{0,12})$")


@dataclass(frozen=True)
class ChunkCursor:
    """Where a listing of the chunks in one state goes on: in ``shard``, after the chunk
    ``after`` (None: from the shard's first chunk)."""

    shard: int
    after: int | None = None

    def token(self) -> str:
        """The cursor as text, for a URL: ``3.1027`` (shard 3 after chunk 1027), ``4.``."""
        return f"{self.shard}.{'' if self.after is None else self.after}"

    @classmethod
    def parse(cls, token: str) -> ChunkCursor:
        """The cursor :meth:`token` wrote. Raises ConfigurationError for anything else."""
        found = _CURSOR.match(token)
        if not found or int(found.group(1)) >= layout.SHARDS:
            raise ConfigurationError(f"{token[:40]!r} is not a chunk cursor (shard.index)")
        after = found.group(2)
        return cls(int(found.group(1)), int(after) if after else None)


@dataclass(frozen=True)
class ChunkPage:
    """One page: its chunks in the order read, the cursor of the next page of an
    :meth:`~ChunkPages.in_state` listing (None: no more), and the queries it took."""

    chunks: tuple[FoundChunk, ...]
    next: ChunkCursor | None
    queries: int


class ChunkPages:
    """Reads pages of the chunk records of the jobs of one storage account.

    Args:
        records: where the task records are.
        clock: the clock of the default retry budget.
    """

    def __init__(self, records: RecordStore, clock: Clock):
        self._records = records
        self._clock = clock

    def by_index(
        self, job_id: str, first: int, count: int, budget: Budget | None = None
    ) -> ChunkPage:
        """The chunks ``first`` to ``first + count - 1`` that are recorded, in index order."""
        _check_count(count)
        if first < 0:
            raise ConfigurationError(f"a page starts at chunk 0 or later, not {first}")
        budget = retries.given(budget, self._clock)
        found: list[FoundChunk] = []
        ranges = shard_ranges(first, count)
        for shard, (low, high) in ranges.items():
            where = [Where("RowKey", "ge", layout.chunk_row(low))]
            where.append(Where("RowKey", "le", layout.chunk_row(high)))
            found.extend(self._read(job_id, shard, where, count, budget))
        found.sort(key=lambda item: item[0])
        return ChunkPage(tuple(found), None, len(ranges))

    def in_state(
        self,
        job_id: str,
        state: str,
        count: int,
        cursor: ChunkCursor | None = None,
        budget: Budget | None = None,
    ) -> ChunkPage:
        """Up to ``count`` chunks in ``state`` from ``cursor`` (None: the first page),
        shard by shard, each shard's in index order. A record that cannot be read is
        among them wherever the query meets it (its state is not known)."""
        _check_count(count)
        budget = retries.given(budget, self._clock)
        cursor = cursor or ChunkCursor(0)
        found: list[FoundChunk] = []
        queries = 0
        for shard in range(cursor.shard, layout.SHARDS):
            after = cursor.after if shard == cursor.shard else None
            start = Where("RowKey", "gt", layout.chunk_row(after)) if after is not None else None
            where = [start or Where("RowKey", "ge", "c"), Where("RowKey", "lt", "d")]
            where.append(Where("state", "eq", state))
            wanted = count - len(found)
            rows = self._read(job_id, shard, where, wanted + 1, budget)
            queries += 1
            found.extend(rows[:wanted])
            if len(rows) > wanted:  # this shard has more: the next page goes on here
                return ChunkPage(tuple(found), ChunkCursor(shard, found[-1][0]), queries)
            if len(found) == count:
                following = ChunkCursor(shard + 1) if shard + 1 < layout.SHARDS else None
                return ChunkPage(tuple(found), following, queries)
        return ChunkPage(tuple(found), None, queries)

    def _read(
        self, job_id: str, shard: int, where: list[Where], limit: int, budget: Budget
    ) -> list[FoundChunk]:
        partition = layout.shard_partition(job_id, shard)
        query = functools.partial(self._query, partition, where, limit)
        return [_chunk(job_id, record) for record in budget.call(query)]

    def _query(self, partition: str, where: Sequence[Where], limit: int) -> list[Record]:
        return list(self._records.query(layout.TASKS_TABLE, partition, where, limit=limit))


def shard_ranges(first: int, count: int) -> dict[int, tuple[int, int]]:
    """Each shard holding some of the chunks ``first`` to ``first + count - 1``, with
    the lowest and highest of them there (every index between the two that is in that
    shard is in the range too)."""
    last = first + count - 1
    ranges: dict[int, tuple[int, int]] = {}
    block = first // layout.SHARD_BLOCK
    while block * layout.SHARD_BLOCK <= last:
        low = max(first, block * layout.SHARD_BLOCK)
        high = min(last, (block + 1) * layout.SHARD_BLOCK - 1)
        shard = block % layout.SHARDS
        ranges[shard] = (ranges[shard][0], high) if shard in ranges else (low, high)
        block += 1
    return ranges


def _chunk(job_id: str, record: Record) -> FoundChunk:
    index = layout.index_of_row(record.row_key)
    try:
        return index, TaskRecord.from_record(job_id, "chunk", index, record)
    except BadRecord as bad:
        return index, bad


def _check_count(count: int) -> None:
    if not 1 <= count <= MAX_PAGE_CHUNKS:
        raise ConfigurationError(f"a page holds 1 to {MAX_PAGE_CHUNKS} chunks, not {count}")
