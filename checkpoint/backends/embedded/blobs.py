"""Azure Blob storage semantics on plain files plus a SQLite row per blob.

A blob's bytes live in ``<store>/blobs/<container>/<name>``, a real file users can open;
its ETag, size and modification time live in SQLite. Every change runs inside one
``BEGIN IMMEDIATE`` transaction: the condition is checked, the new bytes are written to
a temporary file and moved into place with ``os.replace`` (atomic), and the row is
updated, so conditional puts hold across processes and a reader sees the old bytes or
the new ones, never a mix.

Azure allows blobs ``a`` and ``a/b`` side by side; a file system cannot hold a file and
a folder of one name, and one that ignores case cannot hold ``A`` and ``a``. A blob
whose natural path is taken that way is kept under ``blobs/.clashes/<container>/``
instead (container names cannot start with a dot, so that folder never collides); its
row records where. Durability is the database's (``synchronous=NORMAL``): files are not
fsynced.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from checkpoint import service_targets
from checkpoint.backends.embedded.db import Database, epoch, utc
from checkpoint.clock import Clock
from checkpoint.errors import AlreadyExists, Conflict, InvalidRequest, NotFound
from checkpoint.storage import ANY_ETAG, BlobInfo

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS containers (name TEXT PRIMARY KEY) WITHOUT ROWID",
    """CREATE TABLE IF NOT EXISTS blobs (
        container TEXT NOT NULL,
        name TEXT NOT NULL,
        size INTEGER NOT NULL,
        etag TEXT NOT NULL,
        last_modified REAL NOT NULL,
        path TEXT NOT NULL,
        PRIMARY KEY (container, name)
    ) WITHOUT ROWID""",
    # Finds a blob already using a file path, even one differing only in case.
    "CREATE INDEX IF NOT EXISTS blobs_path ON blobs (path COLLATE NOCASE)",
)

#: Blobs listed per statement while a listing is iterated (Azure's page size).
LIST_PAGE_SIZE = 5000
#: Folders under the blob root that no container can be named (names start a-z/0-9).
CLASHES, TEMPORARY = ".clashes", ".tmp"

_ROW = "SELECT size, etag, last_modified, path FROM blobs WHERE container = ? AND name = ?"
#: What ``_ROW`` selects.
_Row = tuple[int, str, float, str]
_SAVE = """
INSERT OR REPLACE INTO blobs (container, name, size, etag, last_modified, path)
VALUES (?, ?, ?, ?, ?, ?)
"""
_PAGE = """
SELECT name, size, etag, last_modified FROM blobs WHERE container = ? AND name {cmp} ?
ORDER BY name LIMIT ?
"""
_PATH_TAKEN = """
SELECT 1 FROM blobs WHERE path = ? COLLATE NOCASE AND NOT (container = ? AND name = ?)
"""
_CONTAINER_EXISTS = "SELECT 1 FROM containers WHERE name = ?"
#: Tries of a read that raced a concurrent move or delete of the blob's file.
_READ_TRIES = 3


def _new_etag() -> str:
    # Azure's blob ETags look like "0x8DC2B9F1A2B3C4D"; random, so every write differs.
    return f'"0x{secrets.token_hex(8).upper()}"'


def _not_found(container: str, name: str) -> NotFound:
    return NotFound(f"blob {name!r} does not exist in {container!r}", code="BlobNotFound")


def _condition_not_met(container: str, name: str, if_match: str) -> Conflict:
    return Conflict(
        f"blob {name!r} in {container!r} does not match ETag {if_match}", code="ConditionNotMet"
    )


class EmbeddedBlobs:
    """:class:`~checkpoint.storage.BlobStore` on files under ``root`` and SQLite rows."""

    def __init__(self, db: Database, clock: Clock, root: Path):
        self._db = db
        self._clock = clock
        self._root = root
        if not db.read_only:
            (root / TEMPORARY).mkdir(parents=True, exist_ok=True)

    # ----------------------------------------------------------------- containers

    def create_container(self, container: str) -> None:
        service_targets.check_container_name(container)
        if self._db.read_only and self._db.has(_CONTAINER_EXISTS, (container,)):
            return
        with self._db.write() as conn:
            conn.execute("INSERT OR IGNORE INTO containers (name) VALUES (?)", (container,))
            (self._root / container).mkdir(exist_ok=True)

    def delete_container(self, container: str) -> None:
        service_targets.check_container_name(container)
        with self._db.write() as conn:
            conn.execute("DELETE FROM blobs WHERE container = ?", (container,))
            conn.execute("DELETE FROM containers WHERE name = ?", (container,))
            # Inside the transaction, so a concurrent re-create cannot lose new files.
            shutil.rmtree(self._root / container, ignore_errors=True)
            shutil.rmtree(self._root / CLASHES / container, ignore_errors=True)

    @staticmethod
    def _require_container(conn: sqlite3.Connection, container: str) -> None:
        found = conn.execute("SELECT 1 FROM containers WHERE name = ?", (container,))
        if found.fetchone() is None:
            raise NotFound(f"container {container!r} does not exist", code="ContainerNotFound")

    # ----------------------------------------------------------------- writes

    def put(
        self,
        container: str,
        name: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> BlobInfo:
        service_targets.check_container_name(container)
        service_targets.check_blob_name(name)
        service_targets.check_put_conditions(if_match, if_none_match)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidRequest(f"blob data is bytes, not {type(data).__name__}")
        data = bytes(data)
        now, etag = epoch(self._clock.now()), _new_etag()
        with self._db.write() as conn:
            self._require_container(conn, container)
            row = conn.execute(_ROW, (container, name)).fetchone()
            if if_match is not None and (row is None or if_match not in (ANY_ETAG, row[1])):
                raise _condition_not_met(container, name, if_match)
            if if_none_match and row is not None:
                raise AlreadyExists(
                    f"blob {name!r} already exists in {container!r}", code="BlobAlreadyExists"
                )
            path = self._store(conn, container, name, data)
            conn.execute(_SAVE, (container, name, len(data), etag, now, path))
            if row is not None and row[3] != path:
                self._remove(row[3])
        return BlobInfo(name, len(data), etag, utc(now))

    def _store(self, conn: sqlite3.Connection, container: str, name: str, data: bytes) -> str:
        """Write ``data`` to the blob's natural path or, if that is taken, a clash path;
        return the path used, relative to the blob root."""
        natural = f"{container}/{name}"
        taken = conn.execute(_PATH_TAKEN, (natural, container, name)).fetchone()
        if taken is None:
            try:
                self._write_file(natural, data)
                return natural
            except OSError:
                # A file where a folder must be or the reverse, or a path too long:
                # drop the folders made on the way and fall through.
                self._prune(natural)
        clash = f"{CLASHES}/{container}/{uuid.uuid4().hex}"
        self._write_file(clash, data)
        return clash

    def _write_file(self, relative: str, data: bytes) -> None:
        target = self._root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self._root / TEMPORARY)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _remove(self, relative: str) -> None:
        """Delete a blob's file and the folders it leaves empty."""
        (self._root / relative).unlink(missing_ok=True)
        self._prune(relative)

    def _prune(self, relative: str) -> None:
        """Remove the empty folders above ``relative``, up to (not including) its
        container's folder."""
        if relative.startswith(CLASHES + "/"):
            return  # a flat folder, removed with its container
        # parents of "c/a/b/x" are c/a/b, c/a, c and "."; keep the last two.
        for parent in list(Path(relative).parents)[:-2]:
            try:
                (self._root / parent).rmdir()
            except OSError:
                return  # not empty (or never made): nothing further up is empty either

    def delete(self, container: str, name: str, *, if_match: str | None = None) -> None:
        service_targets.check_container_name(container)
        service_targets.check_blob_name(name)
        with self._db.write() as conn:
            row = conn.execute(_ROW, (container, name)).fetchone()
            if row is None:
                self._require_container(conn, container)
                raise _not_found(container, name)
            if if_match is not None and if_match not in (ANY_ETAG, row[1]):
                raise _condition_not_met(container, name, if_match)
            conn.execute("DELETE FROM blobs WHERE container = ? AND name = ?", (container, name))
            self._remove(row[3])

    # ----------------------------------------------------------------- reads

    def _row(self, container: str, name: str) -> _Row:
        service_targets.check_container_name(container)
        service_targets.check_blob_name(name)
        with self._db.read() as conn:
            row: _Row | None = conn.execute(_ROW, (container, name)).fetchone()
            if row is None:
                self._require_container(conn, container)
                raise _not_found(container, name)
        return row

    def info(self, container: str, name: str) -> BlobInfo:
        size, etag, last_modified, _ = self._row(container, name)
        return BlobInfo(name, size, etag, utc(last_modified))

    def get(
        self, container: str, name: str, *, offset: int = 0, length: int | None = None
    ) -> bytes:
        service_targets.check_range(offset, length)
        for attempt in range(_READ_TRIES):
            _, _, _, path = self._row(container, name)
            # A range from the end or past it reads nothing, as slicing bytes does (the
            # Azure backend turns Azure's 416 InvalidRange into b"" alike).
            try:
                with open(self._root / path, "rb") as file:
                    file.seek(offset)
                    return file.read(-1 if length is None else length)
            except FileNotFoundError:
                # A concurrent put moved the file or a delete removed it: look again.
                if attempt == _READ_TRIES - 1:
                    raise _not_found(container, name) from None
        raise AssertionError("unreachable")

    def list(self, container: str, prefix: str = "") -> Iterator[BlobInfo]:
        service_targets.check_container_name(container)
        with self._db.read() as conn:
            self._require_container(conn, container)
        return self._scan(container, prefix)

    def _scan(self, container: str, prefix: str) -> Iterator[BlobInfo]:
        # Paged by name so a suspended generator pins no read snapshot between pages.
        start, cmp = prefix, ">="
        while True:
            with self._db.read() as conn:
                rows = conn.execute(
                    _PAGE.format(cmp=cmp), (container, start, LIST_PAGE_SIZE)
                ).fetchall()
            for name, size, etag, last_modified in rows:
                if not name.startswith(prefix):
                    return  # names sort, so no later one has the prefix either
                yield BlobInfo(name, size, etag, utc(last_modified))
            if len(rows) < LIST_PAGE_SIZE:
                return
            start, cmp = rows[-1][0], ">"
