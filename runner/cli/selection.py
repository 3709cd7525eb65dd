"""Which jobs ``runner status`` lists, and in what order: newest first, then filtered by
state and cut to a number.

A record that cannot be read has no state or age to go by: it is listed after the
readable jobs, and left out when ``--state`` asks for particular states.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

from checkpoint.errors import BadRecord
from checkpoint.records import JobRecord

Found = tuple[str, JobRecord | BadRecord]

_OLDEST = datetime.min.replace(tzinfo=UTC)


def select_jobs(
    found: list[Found], states: Collection[str] = (), limit: int | None = None
) -> list[Found]:
    """``found`` newest first (by ``created_on``, then job id), only those in ``states``
    (all if empty), at most ``limit`` of them (all if None)."""
    readable = [item for item in found if isinstance(item[1], JobRecord)]
    readable.sort(key=_created_then_id, reverse=True)
    unreadable = [item for item in found if isinstance(item[1], BadRecord)]
    chosen = [
        item
        for item in readable
        if not states or (isinstance(item[1], JobRecord) and item[1].state in states)
    ]
    if not states:
        chosen += unreadable
    return chosen if limit is None else chosen[:limit]


def _created_then_id(item: Found) -> tuple[datetime, str]:
    job_id, job = item
    created = job.created_on if isinstance(job, JobRecord) else None
    return created or _OLDEST, job_id
