"""The embedded backend: Azure Storage semantics on one local directory, no server.

The default backend and the reference implementation of the storage contract, not a
mock. ``<directory>/store.sqlite3`` holds queues, records and blob metadata;
``<directory>/blobs/<container>/<name>`` holds blob bytes as plain files. Several
processes on one machine may use one directory at once (see :mod:`.db`); several
machines may not (SQLite over a network file system does not lock reliably).
"""

from __future__ import annotations

import errno
from pathlib import Path

from checkpoint.backends.embedded import blobs, queues, records
from checkpoint.backends.embedded.db import Database
from checkpoint.clock import Clock, SystemClock
from checkpoint.errors import ConfigurationError
from checkpoint.storage import Storage

DATABASE_FILE = "store.sqlite3"
BLOB_FOLDER = "blobs"


def check_directory(directory: Path) -> Path:
    """``directory`` resolved, if a store can be there: neither it nor the nearest of
    its parents that exists is a file.

    Raises:
        ConfigurationError: it is, saying which (``--storage squares.py``).
    """
    directory = Path(directory).expanduser().resolve()
    if directory.exists() and not directory.is_dir():
        raise ConfigurationError(
            f"cannot open the embedded store at {directory}: it is a file, not a folder"
        )
    for parent in directory.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigurationError(
                    f"cannot open the embedded store at {directory}: {parent} is a file, "
                    "not a folder"
                )
            break
    return directory


def store_file(directory: Path) -> Path:
    """The file whose presence makes ``directory`` a store."""
    return Path(directory).expanduser().resolve() / DATABASE_FILE


def store_paths(directory: Path) -> list[Path]:
    """Everything a store in ``directory`` consists of: the database, the files SQLite
    and our process lock (:mod:`.db`) keep beside it, the blob folder."""
    database = store_file(directory)
    ends = ("-wal", "-shm", "-journal", ".lock")
    beside = [database.with_name(database.name + end) for end in ends]
    return [database, *beside, database.parent / BLOB_FOLDER]


def open_embedded(directory: Path, *, clock: Clock | None = None, writable: bool = True) -> Storage:
    """Open (creating if missing) the embedded store in ``directory``.

    Args:
        directory: where the store lives; created with its parents if missing.
        clock: time source for visibility, TTL, ETag timestamps; the real clock if None.
        writable: refuse a store this process may only read (a read-only file system,
            a folder of another user's); with False it is opened for reading, and each
            write raises StoreReadOnly.

    Returns:
        A :class:`~checkpoint.storage.Storage`; ``close()`` it to release connections.

    Raises:
        StoreReadOnly: ``writable`` and this process may not write the store.
        ConfigurationError: the directory is a file, or under one, or cannot be made.
    """
    directory = check_directory(directory)
    _make(directory)
    clock = clock if clock is not None else SystemClock()
    db = Database(directory / DATABASE_FILE, queues.SCHEMA + records.SCHEMA + blobs.SCHEMA)
    if writable and db.read_only is not None:
        db.close()
        raise db.refusal()
    return Storage(
        queues=queues.EmbeddedQueues(db, clock),
        records=records.EmbeddedRecords(db, clock),
        blobs=blobs.EmbeddedBlobs(db, clock, directory / BLOB_FOLDER),
        description=f"embedded:{directory}",
        closer=db.close,
    )


def _make(directory: Path) -> None:
    """Make ``directory`` and its missing parents; what stops it is one line."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        why = "permission denied" if error.errno != errno.EROFS else "read-only file system"
        raise ConfigurationError(
            f"cannot create the embedded store at {directory}: {why} to make {error.filename}"
        ) from error
