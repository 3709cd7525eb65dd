"""The jobs the chunk-engine benchmark runs (importable as ``module:Class`` by workers).

:class:`Trivial` measures the engine alone: its ``process`` returns at once.
:class:`Checkpointing` holds one chunk for as long as the benchmark wants, writing a
checkpoint every 0.2 s under a 3 s lease, so a SIGKILLed worker leaves a chunk whose
message reappears when the lease runs out. :class:`Renewing` runs chunks past two lease
renewals, checkpointing all along (the storage requests of a long chunk).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jobs.chunk import Chunk
from jobs.job import ChunkedJob

#: Seconds between two checkpoints of :class:`Checkpointing` (also its write interval).
CHECKPOINT_SECONDS = 0.2
#: Longest a :class:`Checkpointing` chunk runs if nobody creates its stop file.
MAX_HOLD_SECONDS = 120.0


class Trivial(ChunkedJob):
    """``params["chunks"]`` chunks whose ``process`` returns at once."""

    queue = "bench-trivial"
    lease_seconds = 30

    def split(self, params: dict[str, Any]) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> Any:
        return None


class TrivialSpread(Trivial):
    """:class:`Trivial` on four queues (``queues = 4``)."""

    queue = "bench-trivial-spread"
    queues = 4


class Checkpointing(ChunkedJob):
    """One chunk that checkpoints every 0.2 s until ``params["stop_file"]`` exists."""

    queue = "bench-checkpointing"
    lease_seconds = 3
    checkpoint_interval_seconds = CHECKPOINT_SECONDS

    def split(self, params: dict[str, Any]) -> Any:
        yield 0

    def process(self, chunk: Chunk) -> Any:
        stop_file = Path(chunk.params["stop_file"])
        ticks = chunk.state or 0
        began = time.monotonic()
        while not stop_file.exists() and time.monotonic() - began < MAX_HOLD_SECONDS:
            time.sleep(CHECKPOINT_SECONDS)
            ticks += 1
            chunk.checkpoint(ticks)
        return ticks


class Padded(ChunkedJob):
    """``params["chunks"]`` chunks of about 120 bytes of payload each (planning memory)."""

    queue = "bench-padded"

    def split(self, params: dict[str, Any]) -> Any:
        pad = "x" * 100
        return ({"n": n, "pad": pad} for n in range(params["chunks"]))

    def process(self, chunk: Chunk) -> Any:
        return None


#: Seconds between two ``checkpoint`` calls of :class:`Renewing` (most are coalesced).
RENEWING_CALL_SECONDS = 0.1


class Renewing(ChunkedJob):
    """``params["chunks"]`` chunks of ``params["seconds"]`` each, ``checkpoint`` called
    every 0.1 s: written at most once a second, the 4 s lease renewed every 2 s."""

    queue = "bench-renewing"
    lease_seconds = 4
    checkpoint_interval_seconds = 1.0

    def split(self, params: dict[str, Any]) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> Any:
        ticks = chunk.state or 0
        began = time.monotonic()
        while time.monotonic() - began < chunk.params["seconds"]:
            time.sleep(RENEWING_CALL_SECONDS)
            ticks += 1
            chunk.checkpoint(ticks)
        return ticks


class Paced(ChunkedJob):
    """``params["chunks"]`` chunks each taking ``params["ms"]`` milliseconds (0: returns
    at once, as :class:`Trivial`)."""

    queue = "bench-paced"

    def split(self, params: dict[str, Any]) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> Any:
        time.sleep(chunk.params["ms"] / 1000)
        return None


class PacedOther(Paced):
    """:class:`Paced` as a second job type, on a queue of its own (fairness between
    types)."""

    queue = "bench-paced-other"
