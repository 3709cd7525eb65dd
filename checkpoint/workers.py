"""Workers' heartbeats: one small record per worker process, rewritten every few seconds.

A worker says who it is (host, pid), what it serves, what it is running and when it was
last seen; ``runner status`` shows from them which workers serve a queue, which are idle
and which are gone. Each record is written by its worker alone, so writes are
unconditional upserts (no ETag, nothing to settle: the next beat writes it again). The
workers themselves remove records not seen for :data:`REMOVE_AFTER_SECONDS`, so the
table holds about the workers of the last hour.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from checkpoint import layout
from checkpoint.errors import BadRecord, Conflict
from checkpoint.records import Properties
from checkpoint.retries import Budget
from checkpoint.storage import PropertyValue, Record, RecordStore, Where

WorkerState = Literal["serving", "stopping", "stopped"]
WORKER_STATES: tuple[WorkerState, ...] = ("serving", "stopping", "stopped")

#: A worker not seen for this many of its own beat intervals is taken to be gone.
GONE_AFTER_BEATS = 3
#: Records not rewritten for this long are removed (by any worker, a few at a time).
REMOVE_AFTER_SECONDS = 3600.0
#: Records removed per pass at most (a pass every few minutes keeps up with any churn).
REMOVE_PER_PASS = 50
#: Longest text of the running tasks kept in a record (Azure allows 32 K characters).
TASKS_CHARS = 8000


@dataclass(frozen=True)
class WorkerRecord:
    """One worker process as its last heartbeat described it.

    Attributes:
        worker_id: ``host:pid:4 hex``, as in task records' ``owner``.
        queues, job_types: what it serves.
        concurrency: chunk slots (threads).
        tasks: what it runs now: ``JOB#INDEX`` per chunk, ``JOB:plan`` / ``JOB:final``.
        running: how many (``tasks`` may be cut short; this is not).
        state: ``serving``; ``stopping`` once asked to stop; ``stopped`` at a clean exit.
        started_on, seen_on: when it started, when it last wrote this (its own clock).
        beat_seconds: how often it writes this.
    """

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    job_types: tuple[str, ...]
    concurrency: int
    tasks: tuple[str, ...]
    running: int
    state: WorkerState
    started_on: datetime
    seen_on: datetime
    beat_seconds: float

    def gone(self, now: datetime) -> bool:
        """Not seen for :data:`GONE_AFTER_BEATS` beats (or stopped): killed, paused,
        cut off from the store, or exited."""
        if self.state == "stopped":
            return True
        silence = (now - self.seen_on).total_seconds()
        return silence > GONE_AFTER_BEATS * self.beat_seconds

    def properties(self) -> dict[str, PropertyValue]:
        tasks = " ".join(self.tasks)
        if len(tasks) > TASKS_CHARS:
            tasks = tasks[:TASKS_CHARS].rsplit(" ", 1)[0]
        return {
            "host": self.host,
            "pid": self.pid,
            "queues": " ".join(self.queues),
            "job_types": " ".join(self.job_types),
            "concurrency": self.concurrency,
            "tasks": tasks,
            "running": self.running,
            "state": self.state,
            "started_on": self.started_on,
            "seen_on": self.seen_on,
            "beat_seconds": float(self.beat_seconds),
        }

    @classmethod
    def from_record(cls, record: Record) -> WorkerRecord:
        """Raises BadRecord naming what is wrong with a stored heartbeat."""
        p = Properties(record, f"worker {record.row_key!r}")
        started_on, seen_on = p.time("started_on"), p.time("seen_on")
        beat = record.properties.get("beat_seconds")
        if started_on is None or seen_on is None:
            raise p.bad("started_on and seen_on are required")
        if not isinstance(beat, float) or beat <= 0:
            raise p.bad(f"beat_seconds {beat!r} is not a number of seconds > 0")
        return cls(
            worker_id=record.row_key,
            host=p.text("host"),
            pid=p.count("pid", required=True),
            queues=tuple(p.text("queues").split()),
            job_types=tuple(p.text("job_types").split()),
            concurrency=p.count("concurrency", required=True),
            tasks=tuple(p.text("tasks").split()),
            running=p.count("running", required=True),
            state=p.one_of("state", WORKER_STATES),
            started_on=started_on,
            seen_on=seen_on,
            beat_seconds=beat,
        )


class WorkerBook:
    """The heartbeat table: written by each worker, read by ``runner status``.

    Every call takes a :class:`~checkpoint.retries.Budget`: a heartbeat's is short (the
    next beat writes again), a reader's that of a command.
    """

    def __init__(self, records: RecordStore):
        self._records = records

    def beat(self, worker: WorkerRecord, budget: Budget) -> None:
        """Write ``worker``'s record, replacing the last one (an upsert: a PUT, which
        the SDK retries safely, and nothing to settle)."""
        properties = worker.properties()
        budget.call(
            lambda: self._records.upsert(
                layout.WORKERS_TABLE, layout.WORKERS_PARTITION, worker.worker_id, properties
            )
        )

    def get(self, worker_id: str, budget: Budget) -> WorkerRecord:
        """``worker_id``'s heartbeat. Raises NotFound if it has none, BadRecord if it
        cannot be read."""
        record = budget.call(
            lambda: self._records.get(layout.WORKERS_TABLE, layout.WORKERS_PARTITION, worker_id)
        )
        return WorkerRecord.from_record(record)

    def scan(self, budget: Budget) -> list[WorkerRecord | BadRecord]:
        """Every heartbeat record, in worker id order; a BadRecord for one that cannot be
        read."""
        records = budget.call(lambda: list(self._query([])))
        found: list[WorkerRecord | BadRecord] = []
        for record in records:
            try:
                found.append(WorkerRecord.from_record(record))
            except BadRecord as bad:
                found.append(bad)
        return found

    def remove_stale(self, now: datetime, budget: Budget) -> int:
        """Delete up to :data:`REMOVE_PER_PASS` records not rewritten for
        :data:`REMOVE_AFTER_SECONDS` (conditional on the ETag read: a worker that came
        back meanwhile keeps its record). Returns how many went."""
        cutoff = now - timedelta(seconds=REMOVE_AFTER_SECONDS)
        where = [Where("seen_on", "lt", cutoff)]
        stale = budget.call(lambda: list(self._query(where, REMOVE_PER_PASS)))
        removed = 0
        for record in stale:
            if record.unreadable is not None and not _written_before(record, cutoff):
                continue  # no seen_on to judge by: its last write time says it is recent
            delete = functools.partial(
                self._records.delete,
                layout.WORKERS_TABLE,
                layout.WORKERS_PARTITION,
                record.row_key,
                etag=record.etag,
            )
            try:
                budget.call(delete)
            except Conflict:
                continue  # rewritten since it was read: not stale after all
            removed += 1
        return removed

    def _query(self, where: list[Where], limit: int | None = None) -> Iterator[Record]:
        return self._records.query(
            layout.WORKERS_TABLE, layout.WORKERS_PARTITION, where, limit=limit
        )


def _written_before(record: Record, cutoff: datetime) -> bool:
    return record.timestamp is not None and record.timestamp < cutoff
