"""The job and task records as Python objects, and their stored properties.

A *task* is anything a worker runs under a lease: a job's planning, one chunk, or its
finalize. All three share one record shape, so claiming, fencing and checkpointing
are written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from checkpoint.storage import PropertyValue, Record

TaskKind = Literal["plan", "chunk", "final"]
TaskState = Literal["waiting", "running", "retrying", "done", "poisoned"]
JobState = Literal["planning", "running", "finalizing", "done", "failed"]

#: Fields whose msgpack value moves to a blob when larger than this many bytes. Azure's
#: property limit is 64 KiB; staying under it leaves room for the rest of the record.
SPILL_BYTES = 48 * 1024
#: The spillable fields; ``<field>_blob`` names the blob when spilled.
SPILLABLE = ("params", "payload", "progress", "result")
#: Longest error text kept (characters); tracebacks keep their end, where the cause is.
MAX_ERROR_CHARS = 8_000


@dataclass(frozen=True)
class JobRecord:
    """A submitted job: its type, parameters and overall state."""

    job_id: str
    job_type: str
    queue: str
    state: JobState
    total: int | None
    created_on: datetime | None
    updated_on: datetime | None
    error: str | None
    etag: str
    properties: dict[str, PropertyValue]

    @classmethod
    def from_record(cls, record: Record) -> JobRecord:
        p = dict(record.properties)
        return cls(
            job_id=record.row_key,
            job_type=str(p.get("job_type", "")),
            queue=str(p.get("queue", "")),
            state=p.get("state", "planning"),  # type: ignore[arg-type]
            total=p.get("total"),  # type: ignore[arg-type]
            created_on=p.get("created_on"),  # type: ignore[arg-type]
            updated_on=p.get("updated_on"),  # type: ignore[arg-type]
            error=p.get("error") or None,  # type: ignore[arg-type]
            etag=record.etag,
            properties=p,
        )


@dataclass(frozen=True)
class TaskRecord:
    """Planning, a chunk or finalize: who holds it, how far it got, how it ended."""

    job_id: str
    kind: TaskKind
    index: int
    state: TaskState
    attempt: int
    owner: str | None
    message_id: str | None
    lease_until: datetime | None
    error: dict[str, str] | None
    updated_on: datetime | None
    etag: str
    properties: dict[str, PropertyValue]

    @classmethod
    def from_record(cls, job_id: str, kind: TaskKind, index: int, record: Record) -> TaskRecord:
        p = dict(record.properties)
        error = None
        if p.get("error_type"):
            error = {
                "type": str(p.get("error_type", "")),
                "message": str(p.get("error_message", "")),
                "traceback": str(p.get("error_traceback", "")),
            }
        return cls(
            job_id=job_id,
            kind=kind,
            index=index,
            state=p.get("state", "waiting"),  # type: ignore[arg-type]
            attempt=int(p.get("attempt", 0) or 0),  # type: ignore[arg-type]
            owner=p.get("owner") or None,  # type: ignore[arg-type]
            message_id=p.get("message_id") or None,  # type: ignore[arg-type]
            lease_until=p.get("lease_until"),  # type: ignore[arg-type]
            error=error,
            updated_on=p.get("updated_on"),  # type: ignore[arg-type]
            etag=record.etag,
            properties=p,
        )

    @property
    def has_progress(self) -> bool:
        return bool(self.properties.get("progress") or self.properties.get("progress_blob"))


def error_properties(error: BaseException | None, traceback_text: str = "") -> dict[str, Any]:
    """The error fields of a task record; empty strings clear them (merge keeps None)."""
    if error is None:
        return {"error_type": "", "error_message": "", "error_traceback": ""}
    return {
        "error_type": type(error).__name__,
        "error_message": str(error)[:MAX_ERROR_CHARS],
        "error_traceback": traceback_text[-MAX_ERROR_CHARS:],
    }
