"""A page of one job's chunks as the dashboard shows it: which page a viewer asks for
(:class:`ChunkQuery`, from the URL) and its rows (:class:`ChunkTable`).

A page is read by :meth:`checkpoint.store.CheckpointStore.chunk_page` (consecutive
indices) or :meth:`~checkpoint.store.CheckpointStore.chunk_page_in_state` (one state, from
a cursor), so it costs the same whatever the job's size: no blob is read for it either,
a state or payload spilled to a blob is only said to be there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from checkpoint import checks
from checkpoint.errors import BadRecord, ConfigurationError
from checkpoint.records import CHECKPOINT_ON, TASK_STATES, Progress, TaskRecord
from checkpoint.store import CheckpointStore
from checkpoint.tasks.chunk_pages import MAX_PAGE_CHUNKS, ChunkCursor, ChunkPage
from runner.cli.json_form import user_text
from runner.cli.status import PROGRESS_CHARS

#: Chunks per page unless the viewer asks for another number.
DEFAULT_PAGE_CHUNKS = 50
#: The longest payload text shown in a row.
PAYLOAD_CHARS = 120


@dataclass(frozen=True)
class ChunkQuery:
    """Which chunks a viewer asks for: ``size`` of them, page ``page`` of every chunk
    in index order, or, with ``state``, those in that state from ``after``."""

    state: str | None = None
    page: int = 0
    size: int = DEFAULT_PAGE_CHUNKS
    after: ChunkCursor | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> ChunkQuery:
        """The query of a URL's parameters (``state``, ``page``, ``size``, ``after``;
        ``chunk``: the page holding that chunk).

        Raises ConfigurationError for a value out of range or not understood."""
        state = params.get("state") or None
        if state is not None and state not in TASK_STATES:
            raise ConfigurationError(f"{state[:40]!r} is not a chunk state")
        size = _whole(params, "size", DEFAULT_PAGE_CHUNKS)
        if not 1 <= size <= MAX_PAGE_CHUNKS:
            raise ConfigurationError(f"size is 1 to {MAX_PAGE_CHUNKS} chunks, not {size}")
        after = params.get("after")
        page = _whole(params, "page", 0)
        if params.get("chunk"):  # the page holding that chunk
            page = _whole(params, "chunk", 0) // size
        return cls(
            state=state,
            page=0 if state else page,
            size=size,
            after=ChunkCursor.parse(after) if state and after else None,
        )

    def params(self) -> dict[str, str]:
        """The URL parameters that ask for this query (defaults left out)."""
        found: dict[str, str] = {}
        if self.state:
            found["state"] = self.state
            if self.after is not None:
                found["after"] = self.after.token()
        elif self.page:
            found["page"] = str(self.page)
        if self.size != DEFAULT_PAGE_CHUNKS:
            found["size"] = str(self.size)
        return found


def _whole(params: Mapping[str, str], name: str, default: int) -> int:
    text = params.get(name)
    if not text:
        return default
    if not text.isdigit() or len(text) > 12:
        raise ConfigurationError(f"{name} is a whole number, not {text[:40]!r}")
    return int(text)


@dataclass(frozen=True)
class ChunkRow:
    """One chunk as a row: where it is, who holds it, how far it got, how it failed.

    ``problem`` is set (and the rest empty) for a record that cannot be read."""

    index: int
    state: str
    worker: str | None = None
    attempt: int = 0
    max_attempts: int | None = None
    lease_until: datetime | None = None
    lease_expired: bool = False
    checkpoint_on: datetime | None = None
    progress_fraction: float | None = None
    progress_text: str = ""
    payload_text: str = ""
    retry_at: datetime | None = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    problem: str | None = None


@dataclass(frozen=True)
class ChunkTable:
    """A page of chunk rows as read at ``read_on``; ``next`` asks for the page after it
    (None: none), ``queries`` is what reading it took; ``error`` when the last read
    failed and these rows are the last good ones."""

    job_id: str
    query: ChunkQuery
    rows: tuple[ChunkRow, ...]
    next: ChunkQuery | None
    queries: int
    read_on: datetime
    error: str | None = None


def read_chunk_table(store: CheckpointStore, job_id: str, query: ChunkQuery) -> ChunkTable:
    """The page ``query`` asks for, read now."""
    now = store.clock.now()
    if query.state:
        page = store.chunk_page_in_state(job_id, query.state, query.size, query.after)
        following = replace(query, after=page.next) if page.next else None
    else:
        page = store.chunk_page(job_id, query.page * query.size, query.size)
        following = replace(query, page=query.page + 1)
    return ChunkTable(job_id, query, _rows(store, page, now), following, page.queries, now)


def stale_table(table: ChunkTable, error: str) -> ChunkTable:
    """The last good page, marked with why it could not be read again."""
    return replace(table, error=error)


def _rows(store: CheckpointStore, page: ChunkPage, now: datetime) -> tuple[ChunkRow, ...]:
    return tuple(
        ChunkRow(index, "unreadable", problem=str(task))
        if isinstance(task, BadRecord)
        else chunk_row(store, task, now)
        for index, task in page.chunks
    )


def chunk_row(store: CheckpointStore, task: TaskRecord, now: datetime) -> ChunkRow:
    """The row of a chunk as of ``now``."""
    error = task.error or {}
    properties = task.properties
    max_attempts = properties.get("max_attempts")
    checkpoint_on = properties.get(CHECKPOINT_ON)
    retry_at = properties.get("retry_at")
    progress = _progress(task)
    running = task.state == "running"
    return ChunkRow(
        index=task.index,
        state=task.state,
        worker=task.owner if running else None,
        attempt=task.attempt,
        max_attempts=max_attempts if checks.is_whole(max_attempts) else None,
        lease_until=task.lease_until if running else None,
        lease_expired=running and task.lease_until is not None and task.lease_until <= now,
        checkpoint_on=checkpoint_on if isinstance(checkpoint_on, datetime) else None,
        progress_fraction=progress.fraction if progress else None,
        progress_text=str(progress) if progress else _value_text(store, task, "progress"),
        payload_text=_value_text(store, task, "payload", PAYLOAD_CHARS),
        retry_at=retry_at if isinstance(retry_at, datetime) and task.state == "retrying" else None,
        error_type=error.get("type") or None,
        error_message=error.get("message") or None,
        traceback=error.get("traceback") or None,
    )


def _progress(task: TaskRecord) -> Progress | None:
    try:
        return Progress.from_properties(task.properties, task.name)
    except BadRecord:
        return None  # the state itself is shown instead


def _value_text(
    store: CheckpointStore, task: TaskRecord, field: str, chars: int = PROGRESS_CHARS
) -> str:
    """A stored value as short text, read only if it is inline: a value spilled to a
    blob is not fetched (a page must not cost a blob read per row)."""
    if task.properties.get(f"{field}_blob"):
        return f"(large {field}, kept in a blob)"
    try:
        value: Any = store.value(task.properties, field, of=task.name)
    except BadRecord as bad:
        return f"(cannot be read: {bad})"
    if value is None:
        return ""
    return user_text(value, chars)
