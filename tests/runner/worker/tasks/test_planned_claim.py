"""Claiming a chunk from the record its message carries as planned, without reading it.

In-process worker loops on the embedded store on the real clock (the e2e suite runs the
same path on Azurite: every chunk message sent at planning carries its planned record).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.settle import WRITER
from checkpoint.store import CheckpointStore
from jobs.backoff import Backoff
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.loop import WorkerLoop, WorkerSettings

#: Chunk indexes that fail on their first attempt (set by the test).
FAIL_FIRST: set[int] = set()


class Doubling(ChunkedJob):
    queue = "planned-claim"
    lease_seconds = 30
    backoff = Backoff(first_seconds=1, max_seconds=1, jitter=0)

    def split(self, params: dict[str, Any]) -> Any:
        return ({"n": n} for n in range(params["chunks"]))

    def process(self, chunk: Chunk) -> Any:
        if chunk.index in FAIL_FIRST and chunk.attempt == 1:
            raise RuntimeError("first attempt fails")
        return chunk.payload["n"] * 2


class ChunkReads:
    """The real record store, counting reads of chunk records by index."""

    def __init__(self, records: Any):
        self._records = records
        self.chunk_reads: Counter[int] = Counter()

    def get(self, table: str, partition_key: str, row_key: str) -> Any:
        if table == layout.TASKS_TABLE and row_key.startswith("c"):
            self.chunk_reads[layout.index_of_row(row_key)] += 1
        return self._records.get(table, partition_key, row_key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)


def _run(tmp_path: Path, chunks: int) -> tuple[CheckpointStore, str, ChunkReads]:
    storage = open_storage(str(tmp_path / "store"))
    reads = ChunkReads(storage.records)
    counted = replace(storage, records=reads, closer=None)
    job_id = submit(Doubling, {"chunks": chunks}, storage=counted)
    WorkerLoop(counted, [Doubling], WorkerSettings(concurrency=2, burst=True)).run()
    return CheckpointStore(storage), job_id, reads


def test_planning_knows_each_new_chunk_record_exactly(tmp_path: Path):
    store = CheckpointStore(open_storage(str(tmp_path / "store")))
    store.create_job("j", "tests:Job", "planned-claim", {})

    # Chunks recorded now: their ETags and payloads are the records' own
    planned = store.add_chunks("j", 0, [{"n": 0}, "x" * 60_000])
    stored = store.get_task("j", "chunk", 0)
    assert planned[0].etag == stored.etag
    assert planned[0].payload is not None
    task = store.planned_task("j", 0, planned[0].etag, planned[0].payload)
    # All but planning's writer token, which only planning itself reads (to settle an
    # ambiguous insert); the ETag stands for the whole record.
    assert task.properties == {k: v for k, v in stored.properties.items() if k != WRITER}
    assert stored.properties[WRITER]
    # but not a payload spilled to a blob (too big to travel in the message anyway)
    assert planned[1].etag is None and planned[1].payload is None

    # And planning resumed after a crash does not know what became of existing ones
    assert store.add_chunks("j", 0, [{"n": 0}])[0].etag is None


def test_first_deliveries_claim_without_reading_the_chunk_record(tmp_path: Path):
    FAIL_FIRST.clear()
    store, job_id, reads = _run(tmp_path, chunks=40)

    assert store.get_job(job_id).state == "done"
    assert list(store.results(job_id)) == [(n, n * 2) for n in range(40)]
    assert all(task.attempt == 1 for task in store.chunks(job_id))
    assert sum(reads.chunk_reads.values()) == 0


def test_a_chunk_changed_since_planning_is_read_and_claimed_as_usual(tmp_path: Path):
    # Given chunks 3 and 7 whose first attempt fails (their records then say "retrying")
    FAIL_FIRST.clear()
    FAIL_FIRST.update({3, 7})
    try:
        store, job_id, reads = _run(tmp_path, chunks=10)
    finally:
        FAIL_FIRST.clear()

    # Then their second delivery found the planned record stale, read it and ran again;
    # every other chunk ran once, unread
    assert store.get_job(job_id).state == "done"
    assert list(store.results(job_id)) == [(n, n * 2) for n in range(10)]
    attempts = {task.index: task.attempt for task in store.chunks(job_id)}
    assert attempts == {n: 2 if n in (3, 7) else 1 for n in range(10)}
    assert set(reads.chunk_reads) == {3, 7}
