"""What ``finalize`` is told about its job: counts, and the chunks' results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JobSummary:
    """The finished job as ``finalize`` sees it.

    Attributes:
        job_id: the job's id.
        total: chunks the job was split into (all done when finalize runs).
        done: chunks done (equal to ``total`` when finalize runs).
    """

    job_id: str
    total: int
    done: int
    _results: Callable[[], Iterator[tuple[int, Any]]] = field(repr=False, compare=False)

    def results(self) -> Iterator[tuple[int, Any]]:
        """``(index, result)`` of every chunk in index order, read lazily from the
        checkpoint store (so a million results are never all in memory)."""
        return self._results()
