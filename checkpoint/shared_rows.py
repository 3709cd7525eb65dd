"""Compare-and-swap on one shared row, with lost answers settled by reading.

Rows every worker changes (a limit's bucket and slots, a job type's learned lease) are
changed the same way: read the row, compute the new one, replace it If-Match its ETag;
a 412 (someone else wrote in between) means read again and compute again.

**Ambiguous writes.** A replace can be applied while we see it fail. Every write puts a
fresh writer token in the row and appends it to the row's ``recent`` list (the last
:data:`RECENT_WRITES` writes), and every try starts by reading the row: if a token of an
earlier try of this change is in that list, that try was applied and its outcome
stands, so a change is never made twice nor lost as someone else's. (Only a write
followed by more than :data:`RECENT_WRITES` others before our read could go
unrecognised.) A caller that gives up on a change (its budget ran out) and tries it
again later passes the same ``tries`` so the later call still recognises the earlier
one's applied write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from checkpoint.errors import AlreadyExists, Conflict, NotFound
from checkpoint.retries import Budget
from checkpoint.settle import WRITER, one_off
from checkpoint.storage import PropertyValue, Record, RecordStore

T = TypeVar("T")
#: Writer tokens kept in a row, to recognise an applied write whose answer was lost.
RECENT_WRITES = 32
RECENT = "recent"

#: What a change makes of the row as read (None: missing): the new row's properties and
#: the outcome, or None and the outcome when nothing is to be written.
Change = Callable[[Record | None], tuple[dict[str, PropertyValue] | None, T]]


class _Again(Exception):
    """Internal: someone else wrote the row in between; read it and compute again."""


def read_row(
    records: RecordStore, table: str, partition: str, row: str, budget: Budget
) -> Record | None:
    try:
        return budget.call(lambda: records.get(table, partition, row))
    except NotFound:
        return None


def change_row(
    records: RecordStore,
    where: tuple[str, str, str],
    change: Change[T],
    budget: Budget,
    tries: dict[str, T] | None = None,
) -> T:
    """Apply ``change`` to the row at ``where`` (table, partition, row) by
    compare-and-swap; ``tries``: the outcome of each write of this change tried so far,
    by token (kept by a caller that may call again with the same change)."""
    table, partition, row = where
    outcomes: dict[str, T] = {} if tries is None else tries

    def attempt() -> T:
        current = read_row(records, table, partition, row, budget)
        recent = recent_writes(current)
        for token, outcome in outcomes.items():
            if token in recent:
                return outcome  # an earlier try was applied; its answer was lost
        properties, outcome = change(current)
        if properties is None:
            return outcome
        token = one_off()
        outcomes[token] = outcome
        written = {
            **properties,
            WRITER: token,
            RECENT: " ".join([*recent, token][-RECENT_WRITES:]),
        }
        try:
            if current is None:
                records.insert(table, partition, row, written)
            else:
                records.replace(table, partition, row, written, etag=current.etag)
        except (Conflict, AlreadyExists, NotFound) as raced:
            raise _Again from raced
        return outcome

    while True:
        try:
            return budget.call(attempt, f"{table} row {partition}/{row}")
        except _Again:
            continue


def recent_writes(row: Record | None) -> list[str]:
    """The tokens of the last writes of ``row`` (none for a missing row)."""
    if row is None:
        return []
    recent = row.properties.get(RECENT)
    return recent.split() if isinstance(recent, str) else []
