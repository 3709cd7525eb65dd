"""The job of a chaos run: numbered items applied to an idempotent sink, every
application counted.

Each item ``(chunk, item)`` is applied by creating the file ``<dir>/sink/CCCC-IIII`` with
``O_EXCL``: the first application creates it, any later one finds it there. Every
application is also appended to the event log of :mod:`tests.e2e.e2e_jobs` (``apply``
with ``new`` false for a re-application), as is every ``process()`` start (chunk, attempt,
pid, time: what :mod:`tests.chaos.analysis` needs to tell who fenced whom) and every
finalize run. Nothing here takes a lock: a worker SIGSTOPped or SIGKILLed anywhere
blocks nobody and leaves whole lines and whole files.

Params: ``dir``, ``chunks``, ``items`` (per chunk), ``item_seconds``.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

from jobs import Chunk, ChunkedJob, JobSummary
from tests.e2e.e2e_jobs import queue_for, record

SINK_DIR = "sink"


def item_name(chunk: int, item: int) -> str:
    return f"{chunk:04d}-{item:04d}"


def apply_item(params: dict[str, Any], chunk: int, item: int) -> bool:
    """Apply one item to the sink; False if it had been applied before."""
    sink = Path(params["dir"]) / SINK_DIR
    try:
        fd = os.open(sink / item_name(chunk, item), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno != errno.ENOENT:
            raise
        sink.mkdir(exist_ok=True)
        return apply_item(params, chunk, item)
    os.close(fd)
    return True


class Chaos(ChunkedJob):
    """``chunks`` chunks of ``items`` items; checkpoints after every item."""

    queue = queue_for("chaos")
    # The adaptive lease (no lease_seconds), from a 5 s floor: what the workers learn
    # from kills, stops, faults and the outage is part of what a run tests.
    lease_bounds = (5, 600)
    checkpoint_interval_seconds = 0.2

    def split(self, params: dict[str, Any]) -> Any:
        for _ in range(params["chunks"]):
            yield {"items": params["items"]}

    def process(self, chunk: Chunk) -> Any:
        params = chunk.params
        record(params, "start", chunk=chunk.index, attempt=chunk.attempt, state=chunk.state)
        item = chunk.state or 0
        while item < chunk.payload["items"]:
            time.sleep(params["item_seconds"])
            new = apply_item(params, chunk.index, item)
            record(params, "apply", chunk=chunk.index, item=item, new=new)
            item += 1
            chunk.checkpoint(item)
        return item

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        record(params, "finalize", total=summary.total, done=summary.done)
        items = sum(result for _, result in summary.results())
        record(params, "finalize_end", items=items)
