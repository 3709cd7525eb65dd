"""Jobs the tests of ``jobs.testing`` share: those that both a ``ChunkEnvironment`` and a
whole ``run_job`` run (tests/jobs/test_chunk_environment*.py, tests/jobs/test_run_job.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkpoint.clock import FakeClock
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.summary import JobSummary
from jobs.testing import ChunkEnvironment


class CountRows(ChunkedJob):
    """Rows ``first..last`` of each chunk, one checkpoint per row."""

    checkpoint_interval_seconds = 5

    def split(self, params: Any) -> Iterator[dict[str, int]]:
        for first in range(0, params["rows"], 10):
            yield {"first": first, "last": min(first + 10, params["rows"])}

    def process(self, chunk: Chunk) -> dict[str, Any]:
        row = chunk.state if chunk.state is not None else chunk.payload["first"]
        seen = []
        while row < chunk.payload["last"]:
            seen.append(row)
            row += 1
            chunk.checkpoint(row)
        return {"last": row, "seen": seen}

    def finalize(self, params: Any, summary: JobSummary) -> dict[str, Any]:
        return {
            "total": summary.total,
            "done": summary.done,
            "rows": sum(len(result["seen"]) for _, result in summary.results()),
            "order": [index for index, _ in summary.results()],
        }


def count_rows_env(clock: FakeClock | None = None, **kwargs: Any) -> ChunkEnvironment:
    """CountRows on rows 0-9; one second of work per row unless a clock is given."""
    clock = clock or FakeClock()
    kwargs.setdefault("on_checkpoint", lambda _state: clock.advance(1))
    return ChunkEnvironment(
        CountRows, params={"rows": 10}, payload={"first": 0, "last": 10}, clock=clock, **kwargs
    )


class SaysProgress(ChunkedJob):
    """Ten steps a chunk, saying how far it got at each, and nothing at the last."""

    checkpoint_interval_seconds = 5

    def split(self, params: Any) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> int:
        for step in range((chunk.state or 0) + 1, 11):
            chunk.checkpoint(step, progress=(step, 10) if step < 10 else None)
        return chunk.payload


class Publishes(ChunkedJob):
    """Publishes its chunk's output, then checkpoints; finalize reports the publications."""

    def split(self, params: Any) -> Iterator[dict[str, int]]:
        yield {"n": 1}

    def process(self, chunk: Chunk) -> dict[str, Any]:
        before = chunk.published()
        chunk.publish("out/chunk-0", {"by": chunk.claim})
        chunk._control.record_spark_session("{}")
        chunk.checkpoint("published")
        taken_over = chunk.taken_over
        return {
            "claim": chunk.claim,
            "before": before,
            "from": taken_over.claim if taken_over else None,
        }

    def finalize(self, params: Any, summary: JobSummary) -> dict[str, Any]:
        return dict(summary.outputs())


class CallsApi(ChunkedJob):
    """Two requests to a shared API per chunk, each waiting for a unit of its rate."""

    queue = "harness-calls-api"
    limits = {"crm-api": "5/s"}

    def split(self, params: Any) -> Any:
        return [{"ids": [1, 2]}, {"ids": [3]}]

    def process(self, chunk: Chunk) -> Any:
        for _ in chunk.payload["ids"]:
            chunk.limit("crm-api")
        chunk.limit("crm-api", units=2)
        return len(chunk.payload["ids"])
