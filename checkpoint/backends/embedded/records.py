"""Azure Table storage semantics on SQLite.

A record row holds its keys, its properties (msgpack, see :mod:`.entities`), its ETag
(made and read here) and its timestamp. Every write is one ``BEGIN IMMEDIATE``
transaction that checks the ETag and writes in the same breath, so compare-and-swap
holds across processes; a batch is one transaction for all its operations, rolled back
whole when one fails.

Table names are case-insensitive, as on Azure: ``Jobs`` and ``jobs`` are one table.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

from checkpoint import service_targets
from checkpoint.backends.embedded.db import Database, epoch, utc
from checkpoint.backends.embedded.entities import merged, pack, satisfies, unpack
from checkpoint.clock import Clock
from checkpoint.errors import (
    AlreadyExists,
    BatchFailed,
    CodecError,
    Conflict,
    InvalidRequest,
    NotFound,
    StorageError,
)
from checkpoint.storage import ANY_ETAG, BatchKind, BatchOp, PropertyValue, Record, Where

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS record_tables (name TEXT PRIMARY KEY) WITHOUT ROWID",
    # A rowid table (not WITHOUT ROWID): rows may be up to 1 MiB, too big for the
    # clustered index pages WITHOUT ROWID would store them in.
    """CREATE TABLE IF NOT EXISTS records (
        tbl TEXT NOT NULL,
        pk TEXT NOT NULL,
        rk TEXT NOT NULL,
        props BLOB NOT NULL,
        etag TEXT NOT NULL,
        ts REAL NOT NULL,
        UNIQUE (tbl, pk, rk)
    )""",
)

#: Named parameters of one statement.
Params = dict[str, object]

#: Records read per statement while a query is iterated (Azure's page size).
QUERY_PAGE_SIZE = 1000

_KINDS = frozenset({"insert", "replace", "merge", "upsert_replace", "upsert_merge", "delete"})
_KEY = "tbl = :tbl AND pk = :pk AND rk = :rk"
_ETAG_MATCHES = "(:etag = '*' OR etag = :etag)"

_INSERT = """
INSERT INTO records (tbl, pk, rk, props, etag, ts) VALUES (:tbl, :pk, :rk, :props, :new, :ts)
ON CONFLICT (tbl, pk, rk) DO NOTHING
"""
_UPSERT = """
INSERT INTO records (tbl, pk, rk, props, etag, ts) VALUES (:tbl, :pk, :rk, :props, :new, :ts)
ON CONFLICT (tbl, pk, rk) DO UPDATE SET props = excluded.props, etag = excluded.etag,
    ts = excluded.ts
"""
_REPLACE = (
    f"UPDATE records SET props = :props, etag = :new, ts = :ts WHERE {_KEY} AND {_ETAG_MATCHES}"
)
_DELETE = f"DELETE FROM records WHERE {_KEY} AND {_ETAG_MATCHES}"
_CURRENT = f"SELECT props, etag FROM records WHERE {_KEY}"
_TABLE_EXISTS = "SELECT 1 FROM record_tables WHERE name = ?"
_PAGE = """
SELECT rk, props, etag, ts FROM records WHERE tbl = :tbl AND pk = :pk AND rk {cmp} :start
ORDER BY rk LIMIT :limit
"""


def _table_key(table: str) -> str:
    return service_targets.check_table_name(table).lower()


def _missing(params: Mapping[str, object]) -> NotFound:
    return NotFound(
        f"record {params['pk']!r}/{params['rk']!r} does not exist", code="ResourceNotFound"
    )


def _stale(params: Mapping[str, object]) -> Conflict:
    return Conflict(
        f"record {params['pk']!r}/{params['rk']!r} changed since ETag {params['etag']}",
        code="UpdateConditionNotSatisfied",
    )


def _etag_of(op: BatchOp) -> str:
    if op.etag is None:
        return ANY_ETAG
    if not isinstance(op.etag, str):
        raise InvalidRequest(f"an ETag is a string, not {op.etag!r}", code="InvalidInput")
    return op.etag


def new_etag() -> str:
    """A fresh, opaque weak ETag; random, so two writes in the same instant differ."""
    return f'W/"{secrets.token_hex(8)}"'


#: Marks the ETag of a row read as unreadable: a merge given it knows it writes over
#: bytes it could not read (a merge given the bare ETag is refused, see _Writer._merge).
_UNREADABLE_MARK = ";unreadable"


def unreadable_etag(stored: str) -> str:
    """The ETag a reader of an unreadable row is given for it."""
    return stored + _UNREADABLE_MARK


def as_stored_etag(given: str) -> tuple[str, bool]:
    """The stored ETag a write's ETag names, and whether its writer saw the row
    unreadable."""
    if given.endswith(_UNREADABLE_MARK):
        return given[: -len(_UNREADABLE_MARK)], True
    return given, False


def _check_ops(partition_key: str, ops: Sequence[BatchOp]) -> list[int]:
    """Validate operations before any request is made, each in turn (kind, ETag, then
    keys and properties); return their sizes in bytes. One loop, not a call per
    operation: the checks of a batch's entities follow one another in service_targets."""
    sizes = []
    for op in ops:
        if op.kind not in _KINDS:
            raise InvalidRequest(f"unknown record operation {op.kind!r}", code="InvalidInput")
        if op.etag is not None and not isinstance(op.etag, str):
            _etag_of(op)  # raises the invalid-ETag error
        properties = {} if op.kind == "delete" else op.properties
        sizes.append(service_targets.check_entity(partition_key, op.row_key, properties))
    return sizes


class _Writer:
    """Applies operations inside one open write transaction (a single write or a batch)."""

    def __init__(self, conn: sqlite3.Connection, table: str, partition_key: str, now: float):
        self._conn = conn
        self._base: Params = {"tbl": table, "pk": partition_key, "ts": now}

    def apply(self, op: BatchOp, *, in_batch: bool) -> str:
        """Apply ``op``; return its new ETag ("" for a delete) or raise why it failed."""
        given, seen_unreadable = as_stored_etag(_etag_of(op))
        etag = new_etag()
        params = {**self._base, "rk": op.row_key, "etag": given, "new": etag}
        if op.kind == "delete":
            self._delete(params, missing_ok=not in_batch)
            return ""
        if op.kind in ("merge", "upsert_merge"):
            self._merge(op, params, seen_unreadable)
        else:
            params["props"] = pack(op.properties)
            self._write(op.kind, params)
        return etag

    def _merge(self, op: BatchOp, params: Params, seen_unreadable: bool) -> None:
        current = self._current(params)
        if op.kind == "merge":
            if current is None:
                raise _missing(params)
            if params["etag"] not in (ANY_ETAG, current[1]):
                raise _stale(params)
        base: dict[str, PropertyValue] = {}
        if current is not None:
            try:
                base = unpack(current[0])
            except CodecError:
                # Garbled in place (its ETag kept): a writer that read it readable, or
                # planned it, must not merge onto what it never saw. One that read it
                # unreadable (or asks for any version) writes a readable record over it.
                if params["etag"] != ANY_ETAG and not seen_unreadable:
                    raise _stale(params) from None
        params["props"] = pack(merged(base, op.properties))
        self._conn.execute(_UPSERT, params)

    def _write(self, kind: str, params: Params) -> None:
        if kind == "upsert_replace":
            self._conn.execute(_UPSERT, params)
        elif kind == "insert":
            if self._conn.execute(_INSERT, params).rowcount == 0:
                raise AlreadyExists(
                    f"record {params['pk']!r}/{params['rk']!r} already exists",
                    code="EntityAlreadyExists",
                )
        elif self._conn.execute(_REPLACE, params).rowcount == 0:
            raise _stale(params) if self._current(params) else _missing(params)

    def _delete(self, params: Params, *, missing_ok: bool) -> None:
        if self._conn.execute(_DELETE, params).rowcount:
            return
        if self._current(params) is not None:
            raise _stale(params)
        # The SDK forgives deleting a missing record; inside a batch Azure does not.
        if not missing_ok:
            raise _missing(params)

    def _current(self, params: Params) -> tuple[bytes, str] | None:
        current: tuple[bytes, str] | None = self._conn.execute(_CURRENT, params).fetchone()
        return current


class EmbeddedRecords:
    """:class:`~checkpoint.storage.RecordStore` on the embedded store's SQLite file.

    A property set to None is absent: ``insert``, ``replace`` and ``upsert`` leave it out,
    and ``merge`` ignores it (the stored value, if any, is kept).
    """

    def __init__(self, db: Database, clock: Clock):
        self._db = db
        self._clock = clock

    # ----------------------------------------------------------------- tables

    def create_table(self, table: str) -> None:
        key = _table_key(table)
        if self._db.read_only and self._db.has(_TABLE_EXISTS, (key,)):
            return
        with self._db.write() as conn:
            conn.execute("INSERT OR IGNORE INTO record_tables (name) VALUES (?)", (key,))

    def delete_table(self, table: str) -> None:
        key = _table_key(table)
        with self._db.write() as conn:
            conn.execute("DELETE FROM records WHERE tbl = ?", (key,))
            conn.execute("DELETE FROM record_tables WHERE name = ?", (key,))

    @staticmethod
    def _require_table(conn: sqlite3.Connection, table: str) -> None:
        found = conn.execute("SELECT 1 FROM record_tables WHERE name = ?", (table.lower(),))
        if found.fetchone() is None:
            raise NotFound(f"table {table!r} does not exist", code="TableNotFound")

    # ----------------------------------------------------------------- reads

    def get(self, table: str, partition_key: str, row_key: str) -> Record:
        key = _table_key(table)
        service_targets.check_key(partition_key, "PartitionKey")
        service_targets.check_key(row_key, "RowKey")
        params = {"tbl": key, "pk": partition_key, "rk": row_key}
        with self._db.read() as conn:
            row = conn.execute(f"SELECT props, etag, ts FROM records WHERE {_KEY}", params)
            row = row.fetchone()
            if row is None:
                self._require_table(conn, table)
                raise _missing(params)
        return _record(key, partition_key, row_key, row[0], row[1], row[2])

    def query(
        self,
        table: str,
        partition_key: str,
        where: Sequence[Where] = (),
        *,
        select: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> Iterator[Record]:
        key = _table_key(table)
        service_targets.check_key(partition_key, "PartitionKey")
        conditions = [service_targets.check_where(condition) for condition in where]
        select = service_targets.check_select(select)
        service_targets.check_limit(limit)
        # Checked now, not on first iteration, so a missing table fails where it is named.
        with self._db.read() as conn:
            self._require_table(conn, table)
        return self._scan(key, partition_key, conditions, select, limit)

    def _scan(
        self,
        table: str,
        partition_key: str,
        conditions: list[Where],
        select: Sequence[str] | None,
        limit: int | None,
    ) -> Iterator[Record]:
        # Page by RowKey instead of holding one cursor open: a suspended generator must
        # not pin a read snapshot (it would stop WAL checkpoints) between pages.
        params: Params = {"tbl": table, "pk": partition_key, "limit": QUERY_PAGE_SIZE}
        params["start"], cmp, produced = _first_row_key(conditions), ">=", 0
        while True:
            with self._db.read() as conn:
                rows = conn.execute(_PAGE.format(cmp=cmp), params).fetchall()
            for row_key, props, etag, ts in rows:
                if _past_last_row_key(row_key, conditions):
                    return
                record = _record(table, partition_key, row_key, props, etag, ts)
                if _matches(record, conditions):
                    yield _selected(record, select)
                    produced += 1
                    if produced == limit:
                        return
            if len(rows) < QUERY_PAGE_SIZE:
                return
            params["start"], cmp = rows[-1][0], ">"

    # ----------------------------------------------------------------- writes

    def insert(
        self, table: str, partition_key: str, row_key: str, properties: Mapping[str, PropertyValue]
    ) -> str:
        return self._apply(table, partition_key, BatchOp("insert", row_key, properties))

    def replace(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        etag: str,
    ) -> str:
        op = BatchOp("replace", row_key, properties, _required_etag(etag))
        return self._apply(table, partition_key, op)

    def merge(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        etag: str,
    ) -> str:
        op = BatchOp("merge", row_key, properties, _required_etag(etag))
        return self._apply(table, partition_key, op)

    def upsert(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        merge: bool = False,
    ) -> str:
        kind: BatchKind = "upsert_merge" if merge else "upsert_replace"
        return self._apply(table, partition_key, BatchOp(kind, row_key, properties))

    def delete(self, table: str, partition_key: str, row_key: str, *, etag: str) -> None:
        op = BatchOp("delete", row_key, etag=_required_etag(etag))
        self._apply(table, partition_key, op)

    def _apply(self, table: str, partition_key: str, op: BatchOp) -> str:
        key = _table_key(table)
        _check_ops(partition_key, [op])
        now = epoch(self._clock.now())
        with self._db.write() as conn:
            self._require_table(conn, table)
            return _Writer(conn, key, partition_key, now).apply(op, in_batch=False)

    def batch(self, table: str, partition_key: str, operations: Sequence[BatchOp]) -> list[str]:
        key = _table_key(table)
        operations = list(operations)
        sizes = _check_ops(partition_key, operations)
        service_targets.check_batch([op.row_key for op in operations], sizes)
        now = epoch(self._clock.now())
        with self._db.write() as conn:
            self._require_table(conn, table)
            writer = _Writer(conn, key, partition_key, now)
            etags = []
            for index, op in enumerate(operations):
                try:
                    etags.append(writer.apply(op, in_batch=True))
                except StorageError as err:
                    # Raising inside the transaction rolls back every earlier operation.
                    raise BatchFailed(
                        f"batch operation {index} ({op.kind} of row {op.row_key!r}) "
                        f"failed, nothing was applied: {err}",
                        index=index,
                        reason=err,
                    ) from err
        return etags


# --------------------------------------------------------------------------- helpers


def _record(
    table: str, partition_key: str, row_key: str, props: bytes, etag: str, ts: float
) -> Record:
    """The record a stored row holds; one marked unreadable, with no properties, if its
    bytes are not a msgpack map of properties (keys, ETag and time are its columns)."""
    try:
        properties = unpack(props)
    except CodecError as error:
        where = f"row {table}/{partition_key}/{row_key}"
        return Record(
            partition_key, row_key, {}, unreadable_etag(etag), utc(ts), f"{where}: {error}"
        )
    return Record(partition_key, row_key, properties, etag, utc(ts))


def _required_etag(etag: str) -> str:
    if not isinstance(etag, str) or not etag:
        raise InvalidRequest(f"an ETag (or '*') is required, not {etag!r}", code="InvalidInput")
    return etag


def _matches(record: Record, conditions: list[Where]) -> bool:
    """Whether ``record`` meets every condition. An unreadable record is judged by its
    RowKey only (a query names no other key): nothing can say what its properties are,
    and a scan must name it rather than skip it."""
    return all(
        satisfies(_value(record, c.property), c)
        for c in conditions
        if record.unreadable is None or c.property == "RowKey"
    )


def _value(record: Record, name: str) -> PropertyValue:
    if name == "RowKey":
        return record.row_key
    if name == "PartitionKey":
        return record.partition_key
    if name == "Timestamp":
        return record.timestamp
    return record.properties.get(name)


def _selected(record: Record, select: Sequence[str] | None) -> Record:
    if select is None:
        return record
    kept = {name: record.properties[name] for name in select if name in record.properties}
    return replace(record, properties=kept)


def _row_key_bounds(conditions: list[Where]) -> list[tuple[str, str]]:
    """(op, value) of the conditions on RowKey that can bound a scan."""
    return [
        (c.op, c.value) for c in conditions if c.property == "RowKey" and isinstance(c.value, str)
    ]


def _first_row_key(conditions: list[Where]) -> str:
    """Where a scan may start: no row before it can meet the RowKey conditions."""
    lows = [value for op, value in _row_key_bounds(conditions) if op in ("eq", "gt", "ge")]
    return max(lows, default="")


def _past_last_row_key(row_key: str, conditions: list[Where]) -> bool:
    """Whether ``row_key`` and every later one (rows come in RowKey order) fail a
    RowKey upper bound, so the scan can stop."""
    for op, value in _row_key_bounds(conditions):
        if (op == "lt" and row_key >= value) or (op in ("le", "eq") and row_key > value):
            return True
    return False
