"""Job types of the limits benchmark (:mod:`tests.bench.limits`): each chunk sleeps a
given time and logs its start and end (wall clock) to a file of its worker process, so
the benchmark can count starts per second and chunks running at once."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from jobs.chunk import Chunk
from jobs.job import ChunkedJob


class Spanned(ChunkedJob):
    """No limit: the reference the limited runs are measured beside."""

    queue = "bench-unlimited"
    lease_seconds = 30

    def split(self, params: dict[str, Any]) -> Any:
        return ({} for _ in range(params["chunks"]))

    def process(self, chunk: Chunk) -> Any:
        started = time.time()
        if chunk.params["seconds"]:
            time.sleep(chunk.params["seconds"])
        ended = time.time()
        # One file per process, appended whole lines: nothing to lock across processes.
        spans = Path(chunk.params["spans"]) / f"{os.getpid()}.txt"
        with spans.open("a") as file:
            file.write(f"{started:.6f} {ended:.6f}\n")


class RateBench(Spanned):
    """100 chunks started a second, over all workers."""

    queue = "bench-rate"
    rate_limit = "100/s"


class RunningBench(Spanned):
    """20 chunks running at once, over all workers."""

    queue = "bench-running"
    max_running = 20
