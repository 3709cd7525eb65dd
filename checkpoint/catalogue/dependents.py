"""Each job's dependents (the jobs submitted to run after it), and each pipeline's steps.

A job submitted ``after=[a, b]`` is noted here under ``a`` and under ``b`` *before* its
own record is written (:mod:`jobs.dependencies`), one row per dependent in a partition
of the predecessor's own (:func:`~checkpoint.layout.dependents_partition`). So when a
job ends, its hand-off reads its own dependents in one query, however many jobs the
store holds; and a note never names a dependent that could have been missed: a row
whose job does not exist (its submit died between the two writes) is skipped by the
hand-off and completed by the submit's retry.

A pipeline's steps are noted the same way, before each step's record, one row per job
in a partition of the pipeline's (:func:`~checkpoint.layout.pipeline_partition`): a
pipeline's view reads its steps, never the catalogue, and skips a row whose job does
not exist.

A note is an unconditional upsert of a row with no properties of its own: writing it
twice, or once with its answer lost and again, leaves the same row.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from checkpoint import layout, retries
from checkpoint.clock import Clock
from checkpoint.errors import NotFound
from checkpoint.retries import Budget
from checkpoint.storage import RecordStore


class Notes:
    """Rows naming jobs, in partitions of their own (one per ``key``)."""

    def __init__(self, records: RecordStore, clock: Clock, partition: Callable[[str], str]):
        self._records = records
        self._clock = clock
        self._partition = partition

    def note(self, key: str, job_id: str, budget: Budget | None = None) -> None:
        """Note ``job_id`` under ``key`` (idempotent)."""
        budget = retries.given(budget, self._clock)
        upsert = functools.partial(
            self._records.upsert, layout.JOBS_TABLE, self._partition(key), job_id, {"noted": True}
        )
        budget.call(upsert)

    def of(self, key: str, budget: Budget | None = None) -> list[str]:
        """The job ids noted under ``key``, sorted: one query (none in a store that has
        no jobs table yet)."""
        budget = retries.given(budget, self._clock)
        partition = self._partition(key)
        try:
            rows = budget.call(lambda: list(self._records.query(layout.JOBS_TABLE, partition)))
        except NotFound:
            return []
        return sorted(row.row_key for row in rows)

    def forget(self, key: str, job_id: str, budget: Budget | None = None) -> None:
        budget = retries.given(budget, self._clock)
        delete = functools.partial(
            self._records.delete, layout.JOBS_TABLE, self._partition(key), job_id, etag="*"
        )
        budget.call(delete)

    def forget_all(self, key: str, budget: Budget | None = None) -> None:
        """Delete every note under ``key`` (once the job they name is deleted)."""
        for job_id in self.of(key, budget):
            self.forget(key, job_id, budget)


def dependents(records: RecordStore, clock: Clock) -> Notes:
    """Each job's dependents, by the job's id."""
    return Notes(records, clock, layout.dependents_partition)


def pipeline_steps(records: RecordStore, clock: Clock) -> Notes:
    """Each pipeline's steps, by the pipeline's id."""
    return Notes(records, clock, layout.pipeline_partition)
