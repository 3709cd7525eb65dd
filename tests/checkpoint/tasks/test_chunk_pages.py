"""Pages of a job's chunks on every backend (checkpoint/tasks/chunk_pages.py): a range of
indices in index order, or the chunks in one state shard by shard from a cursor, each
at a number of queries, and rows read, that does not grow with the job."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint import layout
from checkpoint.errors import BadRecord, ConfigurationError
from checkpoint.records import TaskRecord
from checkpoint.storage import ANY_ETAG, Record, RecordStore
from checkpoint.store import CheckpointStore
from checkpoint.tasks.chunk_pages import (
    MAX_PAGE_CHUNKS,
    ChunkCursor,
    ChunkPage,
    ChunkPages,
    shard_ranges,
)
from tests.backends import Backend


class CountingRecords:
    """A record store counting its queries and the rows they returned."""

    def __init__(self, records: RecordStore):
        self._records = records
        self.queries = 0
        self.rows = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)

    def query(self, *args: Any, **kwargs: Any) -> Iterator[Record]:
        found = list(self._records.query(*args, **kwargs))
        self.queries += 1
        self.rows += len(found)
        return iter(found)


@pytest.fixture
def store(backend: Backend) -> CheckpointStore:
    return CheckpointStore(backend.storage)


def _job(store: CheckpointStore, chunks: int) -> str:
    job_id = f"pages-{uuid.uuid4().hex[:10]}"
    store.create_job(job_id, "tests:Job", "pages-q", {})
    store.add_chunks(job_id, 0, [{"i": i} for i in range(chunks)])
    return job_id


def _set_state(store: CheckpointStore, job_id: str, state: str, indices: list[int]) -> None:
    for index in indices:
        store.write_task(store.get_task(job_id, "chunk", index), {"state": state})


def _indices(page: ChunkPage) -> list[int]:
    return [index for index, _ in page.chunks]


def _counting(store: CheckpointStore) -> tuple[ChunkPages, CountingRecords]:
    records = CountingRecords(store.storage.records)
    return ChunkPages(records, store.clock), records


# --------------------------------------------------------------------------- by index


def test_a_page_by_index_holds_that_range_in_index_order(store: CheckpointStore):
    job_id = _job(store, 600)

    for first, count in [(0, 50), (20, 30), (500, 100), (590, 50), (700, 10)]:
        page = store.chunk_page(job_id, first, count)

        assert _indices(page) == list(range(first, min(first + count, 600)))
        tasks = [task for _, task in page.chunks if isinstance(task, TaskRecord)]
        assert [(t.index, t.state) for t in tasks] == [(i, "waiting") for i in _indices(page)]
        assert page.next is None


def test_a_page_by_index_costs_one_query_per_shard_it_touches_whatever_the_jobs_size(
    store: CheckpointStore,
):
    # Given a job using every shard once (520 chunks) and one four times larger
    small, large = _job(store, 520), _job(store, 2080)

    for first, count in [(0, 32), (0, 50), (400, 100), (3, 500)]:
        costs = []
        for job_id in (small, large):
            pages, records = _counting(store)
            page = pages.by_index(job_id, first, count)
            costs.append((records.queries, records.rows, page.queries))
            assert records.rows == len(page.chunks) == min(count, 520 - first)

        # Then both pages cost the same: one query per shard the range touches
        assert costs[0] == costs[1]
        assert costs[0][0] == len(shard_ranges(first, count)) <= layout.SHARDS


# --------------------------------------------------------------------------- in a state


def test_pages_in_a_state_go_shard_by_shard_from_a_cursor(store: CheckpointStore):
    # Given chunks retrying in shards 0 (5), 1 (40, 41), 2 (600, 1099) and 15 (1000)
    job_id = _job(store, 1100)
    _set_state(store, job_id, "retrying", [1000, 600, 41, 5, 1099, 40])

    # When they are read two a page, each page from the cursor the last one gave
    seen, cursor, pages = [], None, 0
    while True:
        page = store.chunk_page_in_state(job_id, "retrying", 2, cursor)
        pages += 1
        seen += _indices(page)
        assert all(isinstance(t, TaskRecord) and t.state == "retrying" for _, t in page.chunks)
        assert page.queries <= layout.SHARDS
        if page.next is None:
            break
        cursor = ChunkCursor.parse(page.next.token())

    # Then each came once, shard by shard, each shard's in index order
    assert seen == [5, 40, 41, 600, 1099, 1000]
    assert pages == 3


def test_a_full_page_at_a_shards_end_goes_on_at_the_next_shard(store: CheckpointStore):
    job_id = _job(store, 100)
    _set_state(store, job_id, "retrying", [1, 2, 40])

    first = store.chunk_page_in_state(job_id, "retrying", 2)
    assert _indices(first) == [1, 2] and first.next == ChunkCursor(1)
    second = store.chunk_page_in_state(job_id, "retrying", 2, first.next)
    assert _indices(second) == [40] and second.next is None


def test_a_full_page_in_the_last_shard_has_no_next(store: CheckpointStore):
    job_id = _job(store, 512)
    _set_state(store, job_id, "retrying", [480])  # block 15, the last shard

    page = store.chunk_page_in_state(job_id, "retrying", 1)

    assert _indices(page) == [480] and page.next is None and page.queries == layout.SHARDS


def test_a_page_in_a_state_costs_the_same_whatever_the_jobs_size(store: CheckpointStore):
    small, large = _job(store, 520), _job(store, 2080)
    for state, queries in [("waiting", 1), ("poisoned", layout.SHARDS)]:
        costs = []
        for job_id in (small, large):
            pages, records = _counting(store)
            page = pages.in_state(job_id, state, 30)
            costs.append((records.queries, records.rows, len(page.chunks)))
        # Many of them: one query, a page and one more row; none: a query per shard
        assert costs[0] == costs[1]
        assert costs[0][0] == queries
        assert costs[0][1] <= 31


# --------------------------------------------------------------------------- the rest


def test_a_chunk_record_that_cannot_be_read_is_in_its_page_saying_why(store: CheckpointStore):
    job_id = _job(store, 40)
    partition = layout.shard_partition(job_id, layout.shard_of(7))
    store.storage.records.merge(
        layout.TASKS_TABLE, partition, layout.chunk_row(7), {"state": "bogus"}, etag=ANY_ETAG
    )

    page = store.chunk_page(job_id, 0, 10)

    (bad,) = [task for index, task in page.chunks if index == 7]
    assert isinstance(bad, BadRecord) and "bogus" in str(bad)
    assert len(page.chunks) == 10


def test_a_cursor_is_text_for_a_url_and_nothing_else_is_taken_for_one():
    for cursor in [ChunkCursor(0), ChunkCursor(3, 1027), ChunkCursor(15, 0)]:
        assert ChunkCursor.parse(cursor.token()) == cursor
    assert ChunkCursor(4).token() == "4."
    for bad in ["", "16.", "3", "x.1", "3.-1", "3.1.2", "1." + "9" * 13]:
        with pytest.raises(ConfigurationError, match="not a chunk cursor"):
            ChunkCursor.parse(bad)


@pytest.mark.parametrize("first, count", [(0, 0), (0, MAX_PAGE_CHUNKS + 1), (-1, 10)])
def test_a_page_out_of_range_is_refused(first, count):
    pages = ChunkPages(None, None)  # type: ignore[arg-type]  # refused before any read
    with pytest.raises(ConfigurationError):
        pages.by_index("job-1", first, count)
    if first >= 0:
        with pytest.raises(ConfigurationError):
            pages.in_state("job-1", "done", count)


@given(st.integers(0, 100_000), st.integers(1, MAX_PAGE_CHUNKS))
def test_shard_ranges_hold_every_index_of_the_range_and_no_other(first, count):
    wanted = set(range(first, first + count))
    for shard, (low, high) in shard_ranges(first, count).items():
        in_shard = {i for i in range(low, high + 1) if layout.shard_of(i) == shard}
        assert in_shard == {i for i in wanted if layout.shard_of(i) == shard}
        assert low in wanted and high in wanted
    assert {layout.shard_of(i) for i in wanted} == set(shard_ranges(first, count))
