"""What the engine decides of a task it will not run (now or again), and why.

A claim's judgement of a delivery (done, poisoned, a duplicate, attempts spent) and an
attempt's end (failed, to be tried again or not) are one type: the reason is logged and
kept with a poisoned mark, and whether trying again could have helped is stored for
``runner status`` and ``runner report`` (docs/semantics.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.errors import ChunkFailed, PipelineStop
from jobs.job import ChunkedJob


@dataclass(frozen=True)
class Verdict:
    """Why a task does not run on, and what is stored of that judgement.

    Attributes:
        reason: what the log says and a poisoned mark keeps.
        retryable: whether trying again could have helped; None when nothing was
            judged (a delivery deleted unrun, a poisoned mark clearing what an earlier
            attempt's failure said).
        max_attempts: the attempts the job class allows, stored beside ``retryable``
            when the judgement counted them.
        tries_again: the task is retried after a backoff (a failed attempt that is
            neither final nor the last).
        job_error: what the job's record says if this poisoning fails the job: a
            :class:`~jobs.errors.PipelineStop`'s own words; None for the usual
            ``<kind> poisoned: <reason>``.
    """

    reason: str
    retryable: bool | None = None
    max_attempts: int | None = None
    tries_again: bool = False
    job_error: str | None = None

    def properties(self) -> dict[str, Any]:
        """The judgement as the task record stores it; ``""`` clears a ``retryable`` an
        earlier attempt left (a merge keeps what it does not name)."""
        stored: dict[str, Any] = {"retryable": "" if self.retryable is None else self.retryable}
        if self.max_attempts is not None:
            stored["max_attempts"] = self.max_attempts
        return stored


def failure_verdict(attempt: int, error: BaseException, job_class: type[ChunkedJob]) -> Verdict:
    """The verdict on an attempt that raised ``error``: tried again after a backoff,
    unless trying again cannot help or it was the last attempt allowed."""
    max_attempts = job_class.max_attempts
    if isinstance(error, PipelineStop):
        reason = f"stopped the pipeline on attempt {attempt}: {error}"
        return Verdict(reason, retryable=False, max_attempts=max_attempts, job_error=str(error))
    if not _retryable(error, job_class):
        reason = f"failed on attempt {attempt}, not retryable: {error!r}"
        return Verdict(reason, retryable=False, max_attempts=max_attempts)
    if attempt >= max_attempts:
        reason = f"failed on attempt {attempt} of {max_attempts}: {error!r}"
        return Verdict(reason, retryable=True, max_attempts=max_attempts)
    reason = f"failed on attempt {attempt} of {max_attempts}: {error!r}; tried again"
    return Verdict(reason, retryable=True, max_attempts=max_attempts, tries_again=True)


def _retryable(error: BaseException, job_class: type[ChunkedJob]) -> bool:
    """False for what trying again will not mend: ``ChunkFailed(..., retry=False)`` and
    the job class's ``non_retryable`` exception types."""
    if isinstance(error, ChunkFailed) and not error.retry:
        return False
    return not isinstance(error, job_class.non_retryable)
