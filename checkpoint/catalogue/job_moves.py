"""A job's changes of state and its record's deletion, each in one atomic batch with the
index rows that follow it (:mod:`checkpoint.catalogue.job_index`).

The job record is written on the ETag its writer read, the counts row on the ETag it
was last read with. A batch refused for the counts row alone (another job ended
meanwhile) reads that row again and goes again; refused for the job record, it is the
caller's conflict, as a plain merge's would be. A batch that failed ambiguously is
settled by reading the job record: the batch is atomic, so the record's writer token
(for a change) or its absence (for a deletion) says whether every row was written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from checkpoint import layout, metering, settle
from checkpoint.catalogue.job_index import (
    COUNTS_ROW,
    INDEXED,
    IndexRows,
    index_ops,
    merged,
    reopened,
)
from checkpoint.errors import BatchFailed, Conflict, NotFound
from checkpoint.records import REMOVED, JobRecord, JobState
from checkpoint.retries import TRANSIENT, Budget
from checkpoint.settle import token_of
from checkpoint.storage import BatchOp, Record, RecordStore


class _CountsMoved(Exception):
    """Internal: the counts row changed since it was read; read it and go again."""


class StateMoves:
    """Writes a job's change of state, or deletes its record, with its index rows."""

    def __init__(self, records: RecordStore, index: IndexRows):
        self._records = records
        self._index = index

    def move(self, job: JobRecord, changes: Mapping[str, Any], budget: Budget) -> Record:
        """Merge ``changes`` (a new ``state``, or a property :data:`REMOVED`, and a
        fresh writer token) into the job if its ETag still matches, with its index
        rows; returns the job record written. A change removing a property replaces the
        record whole: what was read, changed, on the ETag it was read with.

        Raises Conflict if someone else wrote the job, NotFound if it is gone."""
        after: JobState = changes.get("state", job.state)
        token = settle.token_of(changes)
        record = Record(layout.JOBS_PARTITION, job.job_id, job.properties, job.etag)

        def attempt() -> Record:
            counts = self._index.counts_row(budget)
            written = {**changes, **({INDEXED: True} if reopened(job, after, counts) else {})}
            ops = [_job_op(job, written)]
            ops += index_ops(job, after, counts, changes["updated_on"])
            try:
                etags = self._batch(ops)
            except TRANSIENT as lost:
                self._index.forget()
                found = self._get(job.job_id)
                if token_of(found.properties) == token:
                    metering.report(lost, "ambiguous_settled")
                    return found
                if found.etag == job.etag:
                    raise lost  # not applied: the budget decides whether to try again
                raise _changed(found) from lost
            self._index.wrote(ops, etags)
            if ops[0].kind == "replace":
                return Record(record.partition_key, record.row_key, ops[0].properties, etags[0])
            return merged(record, written, etags[0])

        return _again_while_counts_move(lambda: budget.call(attempt, f"write {job.job_id}"))

    def delete(self, job_id: str, budget: Budget) -> None:
        """Delete the job's record with its index rows (gone already: nothing to do)."""

        def attempt() -> None:
            try:
                found = self._get(job_id)
            except NotFound:
                return
            job = JobRecord.from_record(found)
            counts = self._index.counts_row(budget)
            ops = [BatchOp("delete", job_id, etag=job.etag), *index_ops(job, None, counts, None)]
            try:
                etags = self._batch(ops)
            except TRANSIENT:
                self._index.forget()
                raise  # settled by the next try's read: gone, or as it was
            except (Conflict, NotFound):
                raise _CountsMoved from None  # changed or gone meanwhile: read it again
            self._index.wrote(ops, etags)

        _again_while_counts_move(lambda: budget.call(attempt, f"delete {job_id}"))

    def _batch(self, ops: list[BatchOp]) -> list[str]:
        """Write ``ops``; raises _CountsMoved if only the counts row refused, and the
        job record's own error (Conflict, NotFound) if it refused."""
        try:
            return self._records.batch(layout.JOBS_TABLE, layout.JOBS_PARTITION, ops)
        except BatchFailed as failed:
            refused = ops[failed.index]
            if refused.row_key == COUNTS_ROW and isinstance(failed.reason, Conflict):
                self._index.forget()
                raise _CountsMoved from failed
            if failed.index == 0:
                raise failed.reason from failed
            if refused.kind == "delete" and isinstance(failed.reason, NotFound):
                # The active row is gone already (deleted by hand): write the rest.
                etags = self._batch([op for op in ops if op is not refused])
                return [*etags[: failed.index], "", *etags[failed.index :]]
            raise

    def _get(self, job_id: str) -> Record:
        return self._records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id)


_T = TypeVar("_T")


def _job_op(job: JobRecord, written: Mapping[str, Any]) -> BatchOp:
    """The job record's own write: a merge of ``written``, or, if it removes a property
    (:data:`REMOVED`), a replace by the record as read with ``written`` applied."""
    if not any(value is REMOVED for value in written.values()):
        return BatchOp("merge", job.job_id, written, etag=job.etag)
    whole = {**job.properties, **written}
    kept = {name: value for name, value in whole.items() if value is not REMOVED}
    return BatchOp("replace", job.job_id, kept, etag=job.etag)


def _again_while_counts_move(write: Callable[[], _T]) -> _T:
    while True:
        try:
            return write()
        except _CountsMoved:
            continue


def _changed(found: Record) -> Conflict:
    written = token_of(found.properties)
    return Conflict(
        f"record {found.row_key} was changed by another writer ({written or 'unknown'})",
        code="ConditionNotMet",
    )
