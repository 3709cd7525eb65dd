"""The jobs of the adaptive-lease benchmark (importable as ``module:Class`` by workers).

:class:`Ticking` sets no ``lease_seconds``: its lease is the adaptive default, sized by
the workers within ``lease_bounds`` (10-600 s). Its chunks run ``params["seconds"]``
seconds each, checkpointing every second (the count of seconds done is the state, so a
chunk taken over resumes where its last checkpoint left it), and end early once
``params["stop_file"]`` exists, so a benchmark ends a run the moment it has measured
what it came for. Each scenario has a class, and so a queue and a learned-lease row, of
its own; the ``Fixed*`` ones are the same chunks under a fixed lease, the reference.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jobs.chunk import Chunk
from jobs.job import ChunkedJob

#: Seconds between two checkpoints (and the checkpoint write interval).
TICK_SECONDS = 1.0


class Ticking(ChunkedJob):
    """``params["chunks"]`` chunks of ``params["seconds"]`` seconds, one checkpoint a
    second, under the adaptive lease (crash recovery on a healthy store)."""

    queue = "bench-lease-crash"
    checkpoint_interval_seconds = TICK_SECONDS

    def split(self, params: dict[str, Any]) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> Any:
        stop_file = Path(chunk.params["stop_file"])
        ticks = chunk.state or 0
        while ticks < chunk.params["seconds"] and not stop_file.exists():
            time.sleep(TICK_SECONDS)
            ticks += 1
            chunk.checkpoint(ticks)
        return ticks


class FixedCrash(Ticking):
    """:class:`Ticking` under the fixed 30 s lease, the default before the adaptive one."""

    queue = "bench-lease-crash-fixed"
    lease_seconds = 30


class Slowing(Ticking):
    """:class:`Ticking` for the slowing store."""

    queue = "bench-lease-slowing"


class FixedSlowing(Ticking):
    """:class:`Slowing` under a fixed 8 s lease."""

    queue = "bench-lease-slowing-fixed"
    lease_seconds = 8


class Stalled(Ticking):
    """:class:`Ticking` for the stalled worker."""

    queue = "bench-lease-stalled"


class QuickTicking(Ticking):
    """:class:`Ticking` with a 3 s floor, for the benchmark's own quick test."""

    queue = "bench-lease-quick"
    lease_bounds = (3, 60)


class FixedQuick(Ticking):
    """:class:`QuickTicking` under a fixed 4 s lease."""

    queue = "bench-lease-quick-fixed"
    lease_seconds = 4
