"""What ``finalize`` is told about its job: counts, the chunks' results, and when to stop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jobs.chunk import ChunkControl


@dataclass(frozen=True)
class PoisonedChunk:
    """A chunk that was poisoned: what it was given and how it last failed."""

    index: int
    payload: Any
    attempts: int
    error_type: str
    error_message: str


@dataclass(frozen=True)
class JobSummary:
    """The finished job as ``finalize`` sees it.

    ``finalize`` runs under a lease like a chunk, but has no state to checkpoint. Its
    cancellation points are reading :meth:`results` (checked before each result) and
    :meth:`raise_if_stopped`: a finalize whose lease was lost (the worker was paused past
    it, and another worker has taken finalize over) stops there with
    :class:`~checkpoint.errors.LeaseLost`, so its remainder does not run beside the new owner's.
    Call :meth:`raise_if_stopped` before each side effect of a long finalize that does
    not read results.

    Attributes:
        job_id: the job's id.
        total: chunks the job was split into (all ended when finalize runs).
        done: chunks done: ``total``, unless the job tolerates failures
            (``tolerated_failures``) and some chunks were poisoned within it.
        poisoned: chunks poisoned (``total - done``); :meth:`poisoned_chunks` lists them.
    """

    job_id: str
    total: int
    done: int
    _results: Callable[[], Iterator[tuple[int, Any]]] = field(repr=False, compare=False)
    _control: ChunkControl | None = field(default=None, repr=False, compare=False)
    _poisoned: Callable[[], Iterator[PoisonedChunk]] = field(
        default=lambda: iter(()), repr=False, compare=False
    )
    _outputs: Callable[[], Iterator[tuple[int, Any]]] = field(
        default=lambda: iter(()), repr=False, compare=False
    )

    @property
    def poisoned(self) -> int:
        return self.total - self.done

    def poisoned_chunks(self) -> Iterator[PoisonedChunk]:
        """Each poisoned chunk (within ``tolerated_failures``) in index order, with its
        payload and last error, read lazily like :meth:`results`."""
        for item in self._poisoned():
            self.raise_if_stopped()
            yield item

    def results(self) -> Iterator[tuple[int, Any]]:
        """``(index, result)`` of every chunk in index order, read lazily from the
        checkpoint store (so a million results are never all in memory)."""
        for item in self._results():
            self.raise_if_stopped()
            yield item

    def outputs(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(index, outputs)`` of every done chunk in index order: what its attempts
        published (``chunk.publish``, as ``write_chunk_output`` does), by name, each
        the record of the attempt readers follow. Read lazily like :meth:`results`."""
        for item in self._outputs():
            self.raise_if_stopped()
            yield item

    def raise_if_stopped(self) -> None:
        """Raise LeaseLost (the lease is gone: someone else may run finalize now) or
        ChunkStopped (the worker is stopping; finalize runs again elsewhere)."""
        if self._control is not None:
            self._control.raise_if_stopped()

    @property
    def stopping(self) -> bool:
        """True once finalize should stop."""
        return self._control is not None and self._control.stopping
