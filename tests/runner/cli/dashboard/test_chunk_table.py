"""A page of a job's chunks as the dashboard shows it (runner/cli/dashboard/chunk_table.py):
the query a URL asks for, and rows read without a blob read, whatever a chunk holds."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.clock import FakeClock
from checkpoint.errors import ConfigurationError
from checkpoint.records import CHECKPOINT_ON, SPILL_BYTES, Progress
from checkpoint.storage import ANY_ETAG, PropertyValue, Storage
from checkpoint.store import CheckpointStore
from checkpoint.tasks.chunk_pages import ChunkCursor
from runner.cli.dashboard.chunk_table import (
    DEFAULT_PAGE_CHUNKS,
    PAYLOAD_CHARS,
    ChunkQuery,
    read_chunk_table,
)
from tests.backends import Backend

#: Over SPILL_BYTES once msgpacked: spilled to a blob.
LARGE = "x" * (SPILL_BYTES + 100)


@pytest.mark.parametrize(
    "params, query",
    [
        ({}, ChunkQuery()),
        ({"page": "3"}, ChunkQuery(page=3)),
        ({"chunk": "120", "size": "25"}, ChunkQuery(page=4, size=25)),
        ({"state": "done"}, ChunkQuery(state="done")),
        ({"state": "done", "page": "3"}, ChunkQuery(state="done")),
        (
            {"state": "done", "after": "3.1027"},
            ChunkQuery(state="done", after=ChunkCursor(3, 1027)),
        ),
        ({"state": "", "after": "3.1027"}, ChunkQuery()),
    ],
)
def test_a_query_is_read_from_the_url_and_written_back_to_it(params, query):
    assert ChunkQuery.from_params(params) == query
    assert ChunkQuery.from_params(query.params()) == query


@pytest.mark.parametrize(
    "params, problem",
    [
        ({"state": "lost"}, "not a chunk state"),
        ({"size": "0"}, "size is 1 to 500"),
        ({"page": "two"}, "page is a whole number"),
        ({"page": "1" * 13}, "page is a whole number"),
        ({"chunk": "-4"}, "chunk is a whole number"),
        ({"state": "done", "after": "99."}, "not a chunk cursor"),
    ],
)
def test_a_query_not_understood_says_why(params, problem):
    with pytest.raises(ConfigurationError, match=problem):
        ChunkQuery.from_params(params)


def test_the_default_query_is_written_as_no_params():
    assert ChunkQuery().params() == {}
    assert ChunkQuery(size=DEFAULT_PAGE_CHUNKS + 1).params() == {"size": "51"}


class CountingBlobs:
    def __init__(self, blobs: Any):
        self._blobs = blobs
        self.gets = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._blobs, name)

    def get(self, *args: Any, **kwargs: Any) -> bytes:
        self.gets += 1
        return bytes(self._blobs.get(*args, **kwargs))


def test_rows_say_each_chunks_state_without_reading_a_blob(backend: Backend):
    # Given chunks: one running at 40 % (lease running out), one running whose lease
    # expired with a state too large to keep inline, one with a payload spilled to a blob,
    # one whose state cannot be read, and one retrying
    clock = FakeClock()
    blobs = CountingBlobs(backend.storage.blobs)
    storage = Storage(backend.storage.queues, backend.storage.records, blobs, "counted")
    store = CheckpointStore(storage, clock)
    job_id = f"table-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "tests:Job", "table-q", {})
    store.add_chunks(job_id, 0, [{"i": 0}, {"i": 1}, LARGE, {"i": "x" * 500}, 4])
    now = clock.now()
    running = {"state": "running", "owner": "w:1:ab12", "attempt": 2, "max_attempts": 5}
    store.write_task(
        store.get_task(job_id, "chunk", 0),
        {
            **running,
            "lease_until": now + timedelta(seconds=20),
            CHECKPOINT_ON: now - timedelta(seconds=3),
            **Progress(0.4, 4, 10).properties(),
        },
        {"progress": 4},
    )
    store.write_task(
        store.get_task(job_id, "chunk", 1),
        {**running, "lease_until": now - timedelta(seconds=1)},
        {"progress": LARGE},
    )
    partition = layout.shard_partition(job_id, 0)
    garbled: dict[str, PropertyValue] = {"progress": b"\xc1", "progress_fraction": 5.0}
    store.storage.records.merge(
        layout.TASKS_TABLE, partition, layout.chunk_row(3), garbled, etag=ANY_ETAG
    )
    store.write_task(
        store.get_task(job_id, "chunk", 4),
        {"state": "retrying", "retry_at": now + timedelta(seconds=9), "error_type": "E"},
    )
    gets = blobs.gets

    # When the page is read
    table = read_chunk_table(store, job_id, ChunkQuery())

    # Then each row says it, and no blob was read
    assert blobs.gets == gets
    first, second, third, fourth, fifth = table.rows
    assert (first.state, first.worker, first.attempt, first.max_attempts) == (
        "running",
        "w:1:ab12",
        2,
        5,
    )
    assert first.lease_until == now + timedelta(seconds=20) and not first.lease_expired
    assert first.checkpoint_on == now - timedelta(seconds=3)
    assert (first.progress_fraction, first.progress_text) == (0.4, "40% (4/10)")
    assert first.payload_text == '{"i": 0}'  # JSON, as runner report shows it
    assert second.lease_expired and second.progress_text == "(large progress, kept in a blob)"
    assert third.payload_text == "(large payload, kept in a blob)" and third.state == "waiting"
    assert len(fourth.payload_text) == PAYLOAD_CHARS and fourth.payload_text.endswith("...")
    assert fourth.progress_text.startswith("(cannot be read: chunk 3 of job")
    assert fourth.progress_fraction is None
    assert (fifth.state, fifth.retry_at, fifth.worker) == (
        "retrying",
        now + timedelta(seconds=9),
        None,
    )
    assert fifth.error_type == "E" and fifth.error_message is None
    assert table.next == ChunkQuery(page=1) and table.queries == 2 and table.error is None


def test_a_row_for_a_record_that_cannot_be_read_says_why(backend: Backend):
    store = CheckpointStore(backend.storage, FakeClock())
    job_id = f"table-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "tests:Job", "table-q", {})
    store.add_chunks(job_id, 0, [0, 1])
    partition = layout.shard_partition(job_id, 0)
    store.storage.records.merge(
        layout.TASKS_TABLE, partition, layout.chunk_row(1), {"attempt": "many"}, etag=ANY_ETAG
    )

    table = read_chunk_table(store, job_id, ChunkQuery(state="waiting"))

    assert [(row.index, row.state) for row in table.rows] == [(0, "waiting"), (1, "unreadable")]
    assert "attempt 'many' is not a whole number" in (table.rows[1].problem or "")
    assert table.next is None
