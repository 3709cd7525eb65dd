"""Planning memory stays bounded: a job of many more chunks takes no more memory to plan.

``split`` is consumed a page at a time (:data:`runner.worker.tasks.plan.PAGE_CHUNKS`), so planning
holds one page of payloads, never the job's. Measured with tracemalloc (Python
allocations, deterministic enough to compare; no time is asserted): the peak while a
worker plans a small job and a job several pages larger must be about the same, where
holding every payload would add kilobytes a chunk. The million-chunk figure is
in ``make bench`` (BENCHMARKS.md, "Planning a million chunks").
"""

from __future__ import annotations

import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.loop import WorkerLoop
from runner.worker.tasks.plan import PAGE_CHUNKS
from tests.backends import Backend
from tests.bench.throughput import PlanOnlyQueues, plan_only_loop

#: Bytes of padding in each payload: materialising a job's payloads would cost this (and
#: a message body of about as much) per chunk.
PAD_BYTES = 4000
#: Chunks of the small and the large job (whole pages, so both end on a full page).
SIZES = {"embedded": (2 * PAGE_CHUNKS, 8 * PAGE_CHUNKS), "azurite": (PAGE_CHUNKS, 3 * PAGE_CHUNKS)}
#: Allowed growth of the peak from the small job to the large one (noise: caches, the
#: Azure SDK's connections and buffers). Below 400 KiB on a quiet machine; on Azurite in
#: a loaded suite (its requests' buffers in flight at once depend on the scheduling)
#: up to 1.66 MB was seen, in 3 of 5 full runs over 1 MiB. Azurite's large job is two
#: pages longer, so that holding its extra payloads (8.2 MB) stays far above the slack.
SLACK_BYTES = {"embedded": 1024 * 1024, "azurite": 5 * 1024 * 1024 // 2}


class Wide(ChunkedJob):
    """Chunks with a few hundred bytes of payload each."""

    def split(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for n in range(params["chunks"]):
            yield {"n": n, "pad": "x" * PAD_BYTES}

    def process(self, chunk: Chunk) -> None:
        return None


def _planned(backend: Backend, chunks: int) -> tuple[WorkerLoop, PlanOnlyQueues]:
    """A job of ``chunks`` submitted, and a loop of one worker that plans it and stops."""
    job = type("Wide", (Wide,), {"queue": f"plan-mem-{uuid.uuid4().hex[:8]}"})
    backend.made += [("queue", job.queue), ("queue", job.poison_queue())]
    submit(job, {"chunks": chunks}, storage=backend.storage)
    return plan_only_loop(backend.storage, job)


def _planning_peak_bytes(backend: Backend, chunks: int) -> int:
    """Peak of traced memory over its level at the start, while one worker plans a job."""
    loop, queues = _planned(backend, chunks)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        loop.run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert queues.stopped_at is not None, "planning did not run to its end"
    return peak - start


def test_planning_a_larger_job_takes_no_more_memory(backend: Backend):
    # Given two jobs of wide payloads, the second several pages longer
    small, large = SIZES[backend.name]

    # When one worker plans each (the small one first, so caches are warm for both: not
    # traced, tracemalloc doubling its time on Azurite, and its peak not used)
    loop, queues = _planned(backend, small)
    loop.run()
    assert queues.stopped_at is not None, "planning did not run to its end"
    small_peak = _planning_peak_bytes(backend, small)
    large_peak = _planning_peak_bytes(backend, large)

    # Then the peak did not grow with the chunks: holding the extra chunks' payloads
    # alone would have added (large - small) x PAD_BYTES
    slack = SLACK_BYTES[backend.name]
    assert (large - small) * PAD_BYTES > 2 * slack  # the test can tell
    assert large_peak - small_peak < slack, (small_peak, large_peak)
