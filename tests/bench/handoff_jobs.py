"""The jobs of the pipeline hand-off benchmark (importable as ``module:Class`` by workers).

:class:`Step` is a pipeline step of ``params["chunks"]`` chunks of ``params["ms"]``
milliseconds each, with a ``finalize`` (a real step has one, and the dependents start
only after it): the hand-off crosses the finalize too.
"""

from __future__ import annotations

import time
from typing import Any

from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.summary import JobSummary


class Step(ChunkedJob):
    """``params["chunks"]`` chunks of ``params["ms"]`` ms; a finalize that returns."""

    queue = "bench-handoff"

    def split(self, params: dict[str, Any]) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> Any:
        time.sleep(chunk.params["ms"] / 1000)
        return None

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        return None
