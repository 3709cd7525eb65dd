"""SQLite connections and transactions of the embedded store, and its error translation.

One connection per thread (``threading.local``), in WAL mode so readers never block the
writer, ``synchronous=NORMAL`` (durable at each WAL checkpoint, consistent always) and a
generous busy timeout so several worker processes on one machine can share the file.
Every write is one short ``BEGIN IMMEDIATE`` transaction: the write lock is taken up
front, so a transaction never reads a snapshot that another process then invalidates, and
a read-then-update (a receive, a compare-and-swap) is atomic across processes.

A store this process may read but not write (a read-only file system, a folder of
another user's) is opened for reading only: no lock file, SQLite's read-only mode, and
every write raises :class:`~checkpoint.errors.StoreReadOnly`.

``sqlite3`` errors never leave this package: :func:`translated` turns a database that
stayed locked past the busy timeout into :class:`~checkpoint.errors.Throttled` (retry later)
and anything else into a plain :class:`~checkpoint.errors.StorageError`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path

from checkpoint.errors import ConfigurationError, StorageError, StoreReadOnly, Throttled

#: How long a statement waits for another connection's write lock before giving up.
BUSY_TIMEOUT_SECONDS = 30.0
#: WAL pages between automatic checkpoints (SQLite's default: 1,000).
WAL_CHECKPOINT_PAGES = 4000
#: Bump when a schema change needs a migration; stored in ``PRAGMA user_version``.
SCHEMA_VERSION = 1

#: What opening a file to write it fails with when this process may only read it: a
#: folder or file of another user's (EACCES), an immutable file (EPERM), a read-only
#: file system (EROFS).
_CANNOT_WRITE = (errno.EACCES, errno.EPERM, errno.EROFS)
#: The cheapest read that needs the database readable, WAL index included.
_PROBE = "SELECT count(*) FROM sqlite_master"

# Connections inherited through fork() must never be closed by the child: closing the
# last connection of a "process" checkpoints and may delete the WAL the parent still
# uses. They are parked here for the life of the child instead.
_INHERITED: list[sqlite3.Connection] = []


def epoch(moment: datetime) -> float:
    """A timezone-aware datetime as float seconds since the epoch (how times are stored)."""
    return moment.timestamp()


def utc(seconds: float) -> datetime:
    """Stored epoch seconds back to a timezone-aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


@contextmanager
def translated() -> Iterator[None]:
    """Turn ``sqlite3`` errors raised inside the block into the project's errors."""
    try:
        yield
    except sqlite3.OperationalError as err:
        text = str(err)
        if "locked" in text or "busy" in text:
            # Usually after the busy timeout, but some statements (PRAGMA journal_mode)
            # fail at once: say what happened, not for how long.
            raise Throttled(
                f"embedded store is locked by another connection, try again: {text}",
                code="ServerBusy",
            ) from err
        raise StorageError(f"embedded store failed: {text}", status=500) from err
    except sqlite3.Error as err:
        raise StorageError(f"embedded store failed: {err}", status=500) from err


def _check_writable(database: Path) -> None:
    """Raise an OSError if the database exists and this process may not write it
    (SQLite would open it read-only without a word, and fail at the first write).

    Asked with access(2), never by opening it: closing a descriptor of the file would
    drop the POSIX locks every SQLite connection of this process holds on it."""
    if not database.exists() or os.access(database, os.W_OK, effective_ids=True):
        return
    read_only_fs = os.statvfs(database).f_flag & os.ST_RDONLY
    code = errno.EROFS if read_only_fs else errno.EACCES
    raise OSError(code, os.strerror(code), str(database))


class _ProcessLock:
    """An exclusive lock on a file, shared by every process that opens the store.

    Write transactions of our own processes queue here instead of in SQLite, whose busy
    handler sleeps 1, 2, 5 ... up to 100 ms between tries: with transactions of tens of
    microseconds, that made a second worker process slow the first down. Waiting polls
    in steps of at most :data:`_POLL_MAX_SECONDS` and gives up after the busy timeout,
    like SQLite, so a stopped process holding the lock cannot hang the others for ever.
    Connections are opened under it too: two processes creating one fresh store at once
    would otherwise collide on ``PRAGMA journal_mode``, which does not wait at all.
    """

    def __init__(self, path: Path):
        self._path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def reopen(self) -> None:
        """After fork: flock belongs to the open file, which the parent shares, so the
        child needs its own (closing the inherited copy leaves the parent's lock alone)."""
        os.close(self._fd)
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)

    def __enter__(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
        pause = _POLL_MIN_SECONDS
        while True:
            time.sleep(pause)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Throttled(
                        f"embedded store {self._path.parent} stayed locked by another process "
                        f"for {BUSY_TIMEOUT_SECONDS:.0f} s",
                        code="ServerBusy",
                    ) from None
            pause = min(pause * 2, _POLL_MAX_SECONDS)

    def __exit__(self, *exc_info: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


#: Waits for another process's write lock, first and longest.
_POLL_MIN_SECONDS = 0.00005
_POLL_MAX_SECONDS = 0.002


class Database:
    """The SQLite file of one embedded store, shared by the threads of this process.

    Args:
        path: the database file; created with ``schema`` if missing.
        schema: DDL statements, each idempotent (``CREATE ... IF NOT EXISTS``).
    """

    def __init__(self, path: Path, schema: Sequence[str]):
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False
        #: Why this process cannot write the store (None: it can). Then it only reads:
        #: no lock file, no schema written, and every write raises StoreReadOnly.
        self.read_only: str | None = None
        self._process_lock: _ProcessLock | None = None
        try:
            self._process_lock = _ProcessLock(path.with_name(path.name + ".lock"))
            _check_writable(path)
        except OSError as error:
            if error.errno not in _CANNOT_WRITE:
                raise
            self.read_only = f"{Path(error.filename or path).name}: {error.strerror}"
            if self._process_lock is not None:
                self._process_lock.close()
                self._process_lock = None
            if not path.exists():
                raise ConfigurationError(
                    f"cannot create the embedded store at {path.parent}: {self.read_only}"
                ) from error
            return
        with self.write() as conn:
            for statement in schema:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def has(self, query: str, args: Sequence[object]) -> bool:
        """Whether ``query`` finds a row: what a read-only store answers a create of
        something it holds already (creating it would write nothing)."""
        with self.read() as conn:
            return conn.execute(query, args).fetchone() is not None

    def refusal(self) -> StoreReadOnly:
        """What a write to a read-only store raises."""
        return StoreReadOnly(
            f"the embedded store at {self.path.parent} is read-only to this process "
            f"({self.read_only}): commands that only read it work, this one writes",
            code="AuthorizationPermissionMismatch",
        )

    def _opening_lock(self) -> AbstractContextManager[None]:
        return self._process_lock if self._process_lock is not None else nullcontext()

    def _connect(self) -> sqlite3.Connection:
        if self.read_only is not None:
            conn = self._connect_read_only()
            with self._lock:
                self._connections.append(conn)
            return conn
        with translated():
            # check_same_thread=False only so close() may close every thread's
            # connection; each connection is still used by its own thread alone.
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_SECONDS,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            # A checkpoint (copying the WAL into the database, with an fsync) every 4,000
            # pages, not SQLite's 1,000: a worker commits thousands of small transactions
            # a second, and checkpointing 4x less often made it ~15 % faster. The WAL file
            # is cut back to 64 MiB after each checkpoint.
            conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit = {64 * 1024 * 1024}")
        with self._lock:
            self._connections.append(conn)
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        uri = self.path.as_uri()
        with translated():
            conn = self._open(f"{uri}?mode=ro")
            try:
                conn.execute(_PROBE).fetchone()
            except sqlite3.OperationalError:
                # A WAL database is read through its -shm index, which a folder we
                # cannot write cannot get unless a writer made it: read the file as it
                # is instead, which holds every commit once no writer has it open.
                conn.close()
                conn = self._open(f"{uri}?immutable=1")
                conn.execute(_PROBE).fetchone()
        return conn

    @staticmethod
    def _open(uri: str) -> sqlite3.Connection:
        return sqlite3.connect(
            uri,
            uri=True,
            timeout=BUSY_TIMEOUT_SECONDS,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
        )

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        if self._closed:
            raise StorageError(f"embedded store {self.path.parent} is closed")
        if os.getpid() != self._pid:
            self._forget_inherited()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with self._write_lock, self._opening_lock():
                conn = self._local.conn = self._connect()
        return conn

    def _forget_inherited(self) -> None:
        # We are a forked child: the parent's connections are not ours to use or close.
        with self._lock:
            _INHERITED.extend(self._connections)
            self._connections = []
            self._local = threading.local()
            self._pid = os.getpid()
            if self._process_lock is not None:
                self._process_lock.reopen()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A connection for reads in autocommit mode (each statement its own snapshot)."""
        conn = self.connection()
        with translated():
            yield conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed if the block succeeds, rolled
        back if it raises (whatever it raises, which then propagates)."""
        if self._process_lock is None:
            raise self.refusal()
        conn = self.connection()
        # Threads of one process queue here, not in SQLite: SQLite's busy handler waits
        # by sleeping (1, 2, 5, 10 ms ...), which would cost a worker's threads far more
        # than the microseconds a write transaction takes. Other processes still meet
        # the busy handler, which is what it is for.
        with self._write_lock, self._process_lock, translated():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                # SQLite may already have rolled back on some errors (SQLITE_FULL, ...).
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection this process opened; later use raises StorageError.

        Call it when no operation is running: a connection is closed under its thread.
        """
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        if self._process_lock is not None:
            self._process_lock.close()
