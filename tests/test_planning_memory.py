"""Planning memory stays bounded: a job of many more chunks takes no more memory to plan.

``split`` is consumed a page at a time (:data:`runner.plan.PAGE_CHUNKS`), so planning
holds one page of payloads, never the job's. Measured with tracemalloc (Python
allocations, deterministic enough to compare; no time is asserted): the peak while a
worker plans a small job and a job several pages larger must be about the same, where
holding every payload would add hundreds of bytes a chunk. The million-chunk figure is
in ``make bench`` (BENCHMARKS.md, "Planning a million chunks").
"""

from __future__ import annotations

import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.loop import WorkerLoop, WorkerSettings
from runner.plan import PAGE_CHUNKS
from tests.conftest import Backend

#: Bytes of padding in each payload: materialising a job's payloads would cost this (and
#: a message body of about as much) per chunk.
PAD_BYTES = 1000
#: Chunks of the small and the large job (whole pages, so both end on a full page).
SIZES = {"embedded": (2 * PAGE_CHUNKS, 40 * PAGE_CHUNKS), "azurite": (PAGE_CHUNKS, 3 * PAGE_CHUNKS)}
#: Allowed growth of the peak from the small job to the large one (noise: caches, pools).
SLACK_BYTES = 128 * 1024


class Wide(ChunkedJob):
    """Chunks with a few hundred bytes of payload each."""

    def split(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for n in range(params["chunks"]):
            yield {"n": n, "pad": "x" * PAD_BYTES}

    def process(self, chunk: Chunk) -> None:
        return None


class StopAfterPlanning:
    """Queues that stop ``loop`` when it asks for work after the planning message."""

    def __init__(self, queues: Any):
        self._queues = queues
        self.loop: WorkerLoop | None = None
        self.planned = False

    def receive(self, queue: str, **options: Any) -> list[Any]:
        if self.planned:
            assert self.loop is not None
            self.loop.request_stop()
            return []
        got = self._queues.receive(queue, **options)
        self.planned = bool(got)
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queues, name)


def _planning_peak_bytes(backend: Backend, chunks: int) -> int:
    """Peak of traced memory over its level at the start, while one worker plans a job."""
    job = type("Wide", (Wide,), {"queue": f"plan-mem-{uuid.uuid4().hex[:8]}"})
    backend.made += [("queue", job.queue), ("queue", job.poison_queue())]
    queues = StopAfterPlanning(backend.storage.queues)
    storage = replace(backend.storage, queues=queues, closer=None)
    submit(job, {"chunks": chunks}, storage=storage)
    loop = WorkerLoop(storage, [job], WorkerSettings(concurrency=1, prefetch=0))
    queues.loop = loop
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        loop.run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert queues.planned, "planning did not run"
    return peak - start


def test_planning_a_larger_job_takes_no_more_memory(backend: Backend):
    # Given two jobs of wide payloads, the second several pages longer
    small, large = SIZES[backend.name]

    # When one worker plans each (the small one first, so caches are warm for both)
    _planning_peak_bytes(backend, small)
    small_peak = _planning_peak_bytes(backend, small)
    large_peak = _planning_peak_bytes(backend, large)

    # Then the peak did not grow with the chunks: holding the extra chunks' payloads
    # alone would have added (large - small) x PAD_BYTES
    assert (large - small) * PAD_BYTES > 4 * SLACK_BYTES  # the test can tell
    assert large_peak - small_peak < SLACK_BYTES, (small_peak, large_peak)
