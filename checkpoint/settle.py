"""Writes that settle the ambiguous case by reading what is there, never by guessing.

Any write can be applied and still reported lost: the connection drops after the
service applied it (azure-core does not retry POST or MERGE on a lost connection, so
the error reaches us), or the SDK's own retry of an applied write gets 412, 409 or 404.
So every record write here carries a **writer token** in the ``writer`` property:
``<claim>.<sequence>``, where ``<claim>`` is random per claim of a task (or per one-off
write). After a failure or a conflict the record is read:

- it carries this write's token: the write was applied; carry on from the record read;
- it carries another token of the same claim: an earlier write of ours was applied
  although we saw it fail; write again on top of it (never a reason to stop);
- it is unchanged: the write was not applied; try it again (a transient fault);
- anything else: someone else wrote it (a real conflict), as the caller was told.

So a worker recognises its own applied write and never fences itself, and a write
that failed is retried only once it is known not to have been applied.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from checkpoint import metering
from checkpoint.errors import AlreadyExists, BatchFailed, Conflict, NotFound
from checkpoint.retries import TRANSIENT, Budget
from checkpoint.storage import BatchOp, Record, RecordStore, Where

#: The property holding the token of the write that last changed a record.
WRITER = "writer"


class Writer:
    """The tokens of one claim: ``<claim>.1``, ``<claim>.2``, ... (thread-safe)."""

    def __init__(self) -> None:
        self.claim = secrets.token_hex(6)
        self._sequence = itertools.count(1)
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            return f"{self.claim}.{next(self._sequence)}"


def one_off() -> str:
    """A token for a write that belongs to no claim (a job update, an insert)."""
    return Writer().next()


def token_of(properties: Mapping[str, Any]) -> str:
    token = properties.get(WRITER)
    return token if isinstance(token, str) else ""


def same_claim(token: str, other: str) -> bool:
    """Whether two tokens come from one claim (so the other write was ours too)."""
    return bool(token) and token.partition(".")[0] == other.partition(".")[0]


def merge(
    records: RecordStore,
    table: str,
    record: Record,
    changes: Mapping[str, Any],
    budget: Budget,
) -> Record:
    """Merge ``changes`` (holding a fresh ``writer`` token) into ``record`` if its ETag
    still matches; returns the record as it now stands.

    Raises Conflict if someone else wrote it, NotFound if it is gone, and the transient
    error once ``budget`` is spent without knowing whether the write was applied.
    """
    token = token_of(changes)
    assert token, "a settled write carries a writer token"
    base = [record]

    def attempt() -> Record:
        current = base[0]
        try:
            etag = records.merge(
                table, current.partition_key, current.row_key, changes, etag=current.etag
            )
        except Conflict as refused:
            found = records.get(table, current.partition_key, current.row_key)
            if same_claim(token, token_of(found.properties)):
                # The SDK's own retry of a write of ours that was applied got 412.
                metering.report(refused, "ambiguous_settled")
            return _settled(found, token, base)
        except TRANSIENT as lost:
            found = records.get(table, current.partition_key, current.row_key)
            if found.etag == current.etag:
                raise lost  # not applied: the budget decides whether to try again
            metering.report(lost, "ambiguous_settled")
            return _settled(found, token, base)
        return _with(current, {**current.properties, **changes}, etag)

    while True:
        try:
            return budget.call(attempt, f"write {record.row_key}")
        except _Again:
            continue  # an earlier write of ours was applied: go again on top of it


class _Again(Exception):
    """Internal: write again, on top of a record an earlier write of ours changed."""


def _settled(found: Record, token: str, base: list[Record]) -> Record:
    written = token_of(found.properties)
    if written == token:
        return found  # this very write was applied
    if same_claim(token, written):
        base[0] = found
        raise _Again
    raise Conflict(
        f"record {found.row_key} was changed by another writer ({written or 'unknown'})",
        code="ConditionNotMet",
    )


def insert(
    records: RecordStore,
    table: str,
    partition_key: str,
    row_key: str,
    properties: Mapping[str, Any],
    budget: Budget,
    beside: Sequence[BatchOp] = (),
) -> Record | None:
    """Insert a record (``properties`` hold a fresh ``writer`` token); returns it, or None
    if a record of someone else's was there already. ``beside``: rows of its partition
    written in the same atomic batch (applied with it, or not at all)."""
    token = token_of(properties)

    def write() -> str:
        if not beside:
            return records.insert(table, partition_key, row_key, properties)
        try:
            return records.batch(
                table, partition_key, [BatchOp("insert", row_key, properties), *beside]
            )[0]
        except BatchFailed as failed:
            if failed.index == 0 and isinstance(failed.reason, AlreadyExists):
                raise failed.reason from failed
            raise

    def attempt() -> Record | None:
        try:
            etag = write()
        except AlreadyExists as refused:
            found = records.get(table, partition_key, row_key)
            if token_of(found.properties) != token:
                return None
            metering.report(refused, "ambiguous_settled")  # an earlier try of ours applied
            return found
        except TRANSIENT as lost:
            try:
                found = records.get(table, partition_key, row_key)
            except NotFound:
                raise lost from None  # not applied: try again while the budget allows
            metering.report(lost, "ambiguous_settled")
            return found if token_of(found.properties) == token else None
        return Record(partition_key, row_key, dict(properties), etag)

    return budget.call(attempt, f"insert {row_key}")


def insert_many(
    records: RecordStore,
    table: str,
    partition_key: str,
    ops: Sequence[BatchOp],
    budget: Budget,
) -> list[Record | None]:
    """Insert ``ops`` (one partition, each with a ``writer`` token) in one batch where
    possible; return each one's record, or None where a record of someone else's was
    there already (a crashed planning attempt recorded it, and it may have run).

    After an ambiguous batch or one refused because a row exists, the rows are read in
    one query and only the missing ones are inserted again.
    """
    outcome: dict[str, Record | None] = {}

    def attempt() -> None:
        # Never empty: the loop below stops once every row is settled, and an attempt
        # that settles them all returns instead of raising for another try.
        missing = [op for op in ops if op.row_key not in outcome]
        try:
            etags = records.batch(table, partition_key, missing)
        except BatchFailed as failed:
            if not isinstance(failed.reason, AlreadyExists):
                raise
            _read_existing(records, table, partition_key, ops, outcome)
            raise _Again from failed
        except TRANSIENT as lost:
            _read_existing(records, table, partition_key, ops, outcome)
            if len(outcome) == len(ops):
                metering.report(lost, "ambiguous_settled")
                return  # applied after all (its answer lost): nothing is left to try
            raise
        for op, etag in zip(missing, etags, strict=True):
            outcome[op.row_key] = Record(partition_key, op.row_key, dict(op.properties), etag)

    while len(outcome) < len(ops):
        try:
            budget.call(attempt, f"insert {len(ops)} records in {partition_key}")
        except _Again:
            continue
    return [outcome[op.row_key] for op in ops]


def _read_existing(
    records: RecordStore,
    table: str,
    partition_key: str,
    ops: Sequence[BatchOp],
    outcome: dict[str, Record | None],
) -> None:
    """Note every row of ``ops`` that exists: ours (our token) or someone else's."""
    rows = sorted(op.row_key for op in ops)
    tokens = {op.row_key: token_of(op.properties) for op in ops}
    where = [Where("RowKey", "ge", rows[0]), Where("RowKey", "le", rows[-1])]
    for found in records.query(table, partition_key, where):
        if found.row_key in tokens:
            mine = token_of(found.properties) == tokens[found.row_key]
            outcome[found.row_key] = found if mine else None


def _with(record: Record, properties: Mapping[str, Any], etag: str) -> Record:
    return Record(record.partition_key, record.row_key, dict(properties), etag)
