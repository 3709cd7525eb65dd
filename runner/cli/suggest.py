""" "Did you mean": the ids of existing jobs close to one that was not found.

Only once a lookup has failed, and bounded whatever the store holds: the ids (RowKeys
alone, no job record) sharing a prefix with the mistyped one, longest prefix first, at
most :data:`IDS_PER_QUERY` per query and :data:`MAX_QUERIES` queries. A generated id
is ``<queue>-<date>-<time>-<hex>``, so a typo in its hex part is found among the jobs of
the same second, one in its date among those of its type; an id with a typo in its
first character is not looked for. An id cut short (``squares-20261128``) is looked
for first as what it is: the ids it begins, the newest first.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.catalogue.job_index import is_index_row
from checkpoint.errors import JobNotFound, RunnerError
from checkpoint.storage import Storage, Where

#: Ids read per prefix at most: one page of an Azure table query.
IDS_PER_QUERY = 500
#: Prefixes tried at most, longest first.
MAX_QUERIES = 5
#: Suggestions shown at most.
MAX_SUGGESTIONS = 3
#: How alike (difflib's ratio) an id must be to be offered, at least; a long id must
#: be within about two characters' change (:func:`_cutoff`), or the first ids of a
#: type's thousands would be offered for a typo in its date.
CUTOFF = 0.75
#: Characters' change (about) a long id may differ by and still be offered.
_CHANGED_CHARS = 2.5
#: Job ids are ASCII letters, digits, '.', '_' and '-': all sort before this.
_PAST_EVERY_ID_CHAR = "~"
#: Where a job id's parts end.
_SEPARATORS = "-_."

F = TypeVar("F", bound=Callable[..., Any])


def similar_job_ids(
    storage: Storage, job_id: str, *, ids_per_query: int = IDS_PER_QUERY
) -> list[str]:
    """The ids of existing jobs most like ``job_id``, best first; none if the store
    cannot be read (the caller's own error is the one to show)."""
    try:
        for prefix in _prefixes(job_id):
            ids = _ids_starting(storage, prefix, ids_per_query)
            if prefix == job_id and ids:
                # Cut short: a generated id's tail is its time, so the last sort newest.
                return ids[::-1][:MAX_SUGGESTIONS]
            close = difflib.get_close_matches(
                job_id, ids, n=MAX_SUGGESTIONS, cutoff=_cutoff(job_id)
            )
            if close:
                return close
    except RunnerError:
        return []
    return []


def did_you_mean(ids: Sequence[str]) -> str:
    """``; did you mean 'x'?`` to end an error line, or nothing."""
    if not ids:
        return ""
    if len(ids) == 1:
        return f"; did you mean {ids[0]!r}?"
    return f"; did you mean one of {', '.join(map(repr, ids))}?"


def suggests_job_ids(command: F) -> F:
    """A command naming one job (its ``job_id`` and ``storage`` arguments): a
    JobNotFound for that id is raised again with the ids it may have meant."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except JobNotFound as missing:
            job_id = kwargs.get("job_id")
            if not job_id:
                raise
            with open_storage(kwargs.get("storage"), create=False) as opened:
                hint = did_you_mean(similar_job_ids(opened, job_id))
            if not hint:
                raise
            raise JobNotFound(f"{missing}{hint}") from missing

    return run  # type: ignore[return-value]


def _cutoff(job_id: str) -> float:
    return max(CUTOFF, 1 - _CHANGED_CHARS / len(job_id))


def _prefixes(job_id: str) -> list[str]:
    """The id itself (cut short, it begins the ids meant), then each part boundary's
    prefix (separator included), longest first, then the first character: at most
    :data:`MAX_QUERIES`."""
    cuts = [at + 1 for at, char in enumerate(job_id[:-1]) if char in _SEPARATORS]
    prefixes = [job_id] + [job_id[:cut] for cut in reversed(cuts)] + [job_id[:1]]
    return list(dict.fromkeys(prefixes))[:MAX_QUERIES]


def _ids_starting(storage: Storage, prefix: str, limit: int) -> list[str]:
    where = [Where("RowKey", "ge", prefix), Where("RowKey", "lt", prefix + _PAST_EVERY_ID_CHAR)]
    found = storage.records.query(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, where, select=["RowKey"], limit=limit
    )
    # The catalogue's own index rows (``~...``) share the partition: never a job's id.
    return [record.row_key for record in found if not is_index_row(record.row_key)]
