"""The job catalogue's index: the active jobs listed and the ended ones counted, in rows
of the jobs partition itself, so a view of the active jobs reads one range query, not a
row per job of the store.

Its rows sort after every job id (``~`` follows each character a job id may hold):

- ``~active~<job id>``: one per job not ended, with its state and creation time;
- ``~counts``: how many jobs ended in each ended state, and the last few that ended.

Each is written in the same atomic batch as the job record whose state it follows (see
:class:`checkpoint.catalogue.job_records.JobRecords`), so whatever fails, the rows and the records
agree: a batch applied with its answer lost is recognised by the job record's writer
token, and nothing is counted twice. The counts row is written on its ETag: two jobs
ending at once each read it again after losing the race, never a job's own conflict.

A store's counts row is made when its first job is created (an empty catalogue: zero
is right). A store whose catalogue had jobs before (made by an earlier version) has
none, keeps none, and its views scan the catalogue as before (:meth:`IndexRows.read`
answers None).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checkpoint import layout, settle
from checkpoint.errors import BadRecord, NotFound
from checkpoint.records import ENDED_JOB_STATES, JOB_STATES, JobRecord, JobState, Properties
from checkpoint.retries import Budget
from checkpoint.storage import BatchOp, PropertyValue, Record, RecordStore, Where

#: What every index row's key starts with; no job id does.
INDEX_PREFIX = "~"
#: An active job's row is this followed by its job id.
ACTIVE_PREFIX = "~active~"
#: The row counting the ended jobs.
COUNTS_ROW = "~counts"
#: A job record property: True when the job was given an active row (it has one while
#: it is not ended). Jobs recorded before the index, or in a store without it, have none.
INDEXED = "indexed"
#: Ended jobs the counts row names, newest first (``runner status --watch`` shows them).
RECENT_ENDED = 5
_RECENT = "recent"


def is_index_row(row_key: str) -> bool:
    """Whether a row of the jobs partition is the index's, not a job's."""
    return row_key.startswith(INDEX_PREFIX)


def active_row(job_id: str) -> str:
    return ACTIVE_PREFIX + job_id


@dataclass(frozen=True)
class CatalogueEntry:
    """A job as the catalogue lists it, read without its record in full: enough to
    count jobs by state, order them newest first (or by their last change) and pick a
    page of them."""

    job_id: str
    state: JobState
    created_on: datetime | None
    updated_on: datetime | None = None

    @classmethod
    def from_record(cls, record: Record, job_id: str | None = None) -> CatalogueEntry:
        """Raises BadRecord if its state or times cannot be read."""
        job_id = job_id or record.row_key
        p = Properties(record, f"job {job_id!r}")
        state = p.one_of("state", JOB_STATES)
        return cls(job_id, state, p.time("created_on"), p.time("updated_on"))


@dataclass(frozen=True)
class JobIndex:
    """What the index holds: each active job (an entry, or a BadRecord for a row that
    cannot be read), the ended jobs counted by state, and the last few that ended."""

    active: list[tuple[str, CatalogueEntry | BadRecord]]
    ended: dict[str, int]
    recent: list[CatalogueEntry] = field(default_factory=list)


def counts_of(record: Record) -> dict[str, int]:
    """The ended jobs a counts row counts, by state. Raises BadRecord."""
    p = Properties(record, "the job counts")
    return {state: int(p.count(state) or 0) for state in ENDED_JOB_STATES}


def recent_of(record: Record) -> list[CatalogueEntry]:
    """The last jobs ended, as the counts row names them (none if it cannot be read)."""
    try:
        rows = json.loads(str(record.properties.get(_RECENT) or "[]"))
        return [
            CatalogueEntry(job_id, state, None, datetime.fromisoformat(on))
            for job_id, state, on in rows
            if state in ENDED_JOB_STATES
        ]
    except (ValueError, TypeError):
        return []


def index_ops(
    job: JobRecord, after: JobState | None, counts: Record | None, now: datetime | None
) -> list[BatchOp]:
    """The index rows to write beside the job's own write, which moves it from its state
    to ``after`` (None: the job record is deleted). ``counts``: the counts row as last
    read (None: the store keeps no index, so no row is written)."""
    if counts is None:
        return []
    ops: list[BatchOp] = []
    indexed, ends = job.properties.get(INDEXED) is True, after is None or after in ENDED_JOB_STATES
    if indexed and not job.ended and ends:
        ops.append(BatchOp("delete", active_row(job.job_id)))
    elif not ends and (indexed or job.ended):
        # A reopened job gets its row back (and its record INDEXED: see reopened).
        row = {"state": after, "created_on": job.created_on}
        ops.append(BatchOp("upsert_merge", active_row(job.job_id), row))
    leaves = job.ended and after != job.state
    enters = after is not None and after in ENDED_JOB_STATES and after != job.state
    if leaves or enters:
        ended, recent = counts_of(counts), recent_of(counts)
        if leaves:
            ended[job.state] = max(0, ended[job.state] - 1)
            recent = [entry for entry in recent if entry.job_id != job.job_id]
        if enters:
            assert after is not None
            ended[after] += 1
            recent = [CatalogueEntry(job.job_id, after, None, now), *recent][:RECENT_ENDED]
        changes: dict[str, PropertyValue] = {**ended, _RECENT: _recent_text(recent)}
        ops.append(BatchOp("merge", COUNTS_ROW, changes, etag=counts.etag))
    return ops


def reopened(job: JobRecord, after: JobState, counts: Record | None) -> bool:
    """Whether a change to ``after`` gives the ended ``job`` its active row back."""
    return counts is not None and job.ended and after not in ENDED_JOB_STATES


def _recent_text(recent: Sequence[CatalogueEntry]) -> str:
    return json.dumps(
        [[e.job_id, e.state, e.updated_on.isoformat() if e.updated_on else ""] for e in recent]
    )


def zero_counts() -> dict[str, Any]:
    """A new store's counts row: nothing ended yet."""
    return {**dict.fromkeys(ENDED_JOB_STATES, 0), _RECENT: "[]", settle.WRITER: settle.one_off()}


class IndexRows:
    """Reads the index, and keeps the counts row as last read (thread-safe), so a job's
    end writes its batch without reading the counts row first unless it moved since."""

    def __init__(self, records: RecordStore):
        self._records = records
        self._counts: Record | None = None
        self._lock = threading.Lock()

    def noted(self, record: Record) -> None:
        """Keep the counts row as a scan of the jobs partition found it."""
        if record.row_key != COUNTS_ROW:
            return
        try:
            counts_of(record)
        except BadRecord:
            return
        with self._lock:
            self._counts = record

    def forget(self) -> None:
        """The counts row kept may be stale (another write moved it): read it next time."""
        with self._lock:
            self._counts = None

    def wrote(self, ops: Sequence[BatchOp], etags: Sequence[str]) -> None:
        """Keep the counts row as a batch just wrote it."""
        for op, etag in zip(ops, etags, strict=True):
            if op.row_key == COUNTS_ROW:
                with self._lock:
                    kept = self._counts
                    if kept is not None:
                        self._counts = merged(kept, op.properties, etag)

    def counts_row(self, budget: Budget) -> Record | None:
        """The counts row (as kept, else read now); None if the store has none."""
        with self._lock:
            if self._counts is not None:
                return self._counts
        try:
            found = budget.call(
                lambda: self._records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW)
            )
        except NotFound:
            return None
        self.noted(found)
        with self._lock:
            # None for a row garbled by hand: the views scan, and no row is written.
            return self._counts

    def kept(self, budget: Budget) -> bool:
        """Whether this store keeps the index; a store whose catalogue is empty is given
        its counts row now (before its first job: a process that then finds a job
        finds the row too)."""
        if self.counts_row(budget) is not None:
            return True
        first = budget.call(
            lambda: list(
                self._records.query(
                    layout.JOBS_TABLE,
                    layout.JOBS_PARTITION,
                    [Where("RowKey", "lt", INDEX_PREFIX)],
                    select=["RowKey"],
                    limit=1,
                )
            )
        )
        if first:
            return self.counts_row(budget) is not None  # made meanwhile, before that job
        settle.insert(
            self._records,
            layout.JOBS_TABLE,
            layout.JOBS_PARTITION,
            COUNTS_ROW,
            zero_counts(),
            budget,
        )
        return True

    def read(self, budget: Budget) -> JobIndex | None:
        """The index, in one range query; None if the store keeps none (or its counts
        row cannot be read): then only a scan of the catalogue counts its jobs."""
        rows = budget.call(
            lambda: list(
                self._records.query(
                    layout.JOBS_TABLE,
                    layout.JOBS_PARTITION,
                    [Where("RowKey", "ge", INDEX_PREFIX)],
                )
            )
        )
        counts = next((row for row in rows if row.row_key == COUNTS_ROW), None)
        if counts is None:
            return None
        try:
            ended = counts_of(counts)
        except BadRecord:
            return None
        self.noted(counts)
        active = [_active_entry(row) for row in rows if row.row_key.startswith(ACTIVE_PREFIX)]
        return JobIndex(active, ended, recent_of(counts))


def _active_entry(row: Record) -> tuple[str, CatalogueEntry | BadRecord]:
    job_id = row.row_key.removeprefix(ACTIVE_PREFIX)
    try:
        return job_id, CatalogueEntry.from_record(row, job_id)
    except BadRecord as bad:
        return job_id, bad


def merged(record: Record, changes: Mapping[str, Any], etag: str) -> Record:
    """The record as a merge of ``changes`` leaves it, with its new ETag."""
    return Record(record.partition_key, record.row_key, {**record.properties, **changes}, etag)
