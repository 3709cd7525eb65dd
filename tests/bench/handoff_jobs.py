"""The jobs of the pipeline hand-off benchmark (importable as ``module:Class`` by workers).

:class:`Step` is a pipeline step: :class:`~tests.bench.chunk_jobs.Paced` chunks (of
``params["ms"]`` milliseconds each) with a ``finalize``, as a real step has one and its
dependents start only after it: the hand-off crosses the finalize too.
"""

from __future__ import annotations

from typing import Any

from jobs.summary import JobSummary
from tests.bench.chunk_jobs import Paced


class Step(Paced):
    """:class:`Paced` on a queue of its own, with a finalize that returns."""

    queue = "bench-handoff"

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        return None
