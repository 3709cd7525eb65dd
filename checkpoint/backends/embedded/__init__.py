"""The embedded backend: Azure Storage semantics on one local directory, no server.

The default backend and the reference implementation of the storage contract, not a
mock. ``<directory>/store.sqlite3`` holds queues, records and blob metadata;
``<directory>/blobs/<container>/<name>`` holds blob bytes as plain files. Several
processes on one machine may use one directory at once (see :mod:`.db`); several
machines may not (SQLite over a network file system does not lock reliably).
"""

from __future__ import annotations

from pathlib import Path

from checkpoint.backends.embedded import blobs, queues, records
from checkpoint.backends.embedded.db import Database
from checkpoint.clock import Clock, SystemClock
from checkpoint.storage import Storage

DATABASE_FILE = "store.sqlite3"
BLOB_FOLDER = "blobs"


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


def open_embedded(directory: Path, *, clock: Clock | None = None) -> Storage:
    """Open (creating if missing) the embedded store in ``directory``.

    Args:
        directory: where the store lives; created with its parents if missing.
        clock: time source for visibility, TTL, ETag timestamps; the real clock if None.

    Returns:
        A :class:`~checkpoint.storage.Storage`; ``close()`` it to release connections.
    """
    directory = Path(directory).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    clock = clock if clock is not None else SystemClock()
    db = Database(directory / DATABASE_FILE, queues.SCHEMA + records.SCHEMA + blobs.SCHEMA)
    return Storage(
        queues=queues.EmbeddedQueues(db, clock),
        records=records.EmbeddedRecords(db, clock),
        blobs=blobs.EmbeddedBlobs(db, clock, directory / BLOB_FOLDER),
        description=f"embedded:{directory}",
        closer=db.close,
    )
