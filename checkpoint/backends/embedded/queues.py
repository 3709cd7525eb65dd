"""Azure Queue storage semantics on SQLite.

A message row carries what Azure keeps: body, dequeue count, insertion, expiry and
next-visible times (float epoch seconds from the injected clock) and the current pop
receipt. A receive is one ``UPDATE ... RETURNING`` inside a ``BEGIN IMMEDIATE``
transaction, so no visible message reaches two receivers, even in other processes.

Order: messages are handed out by the time they became visible, then by insertion. For
messages sent without a delay that is insertion order; a message whose visibility
timeout ran out queues up behind the ones that were visible before it. Azure promises
no order at all; this is "roughly FIFO" and lets one index serve every receive.

Expired messages (``now >= expires_on``) are invisible to every operation at once and
are deleted lazily, at most once a minute per queue and process.
"""

from __future__ import annotations

import secrets
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from checkpoint import service_targets
from checkpoint.backends.embedded.db import Database, epoch, utc
from checkpoint.clock import Clock
from checkpoint.errors import LeaseLost, NotFound, StorageError
from checkpoint.storage import NEVER_EXPIRES, QueueMessage, Receipt

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS queues (name TEXT PRIMARY KEY) WITHOUT ROWID",
    """CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        id TEXT NOT NULL UNIQUE,
        body BLOB NOT NULL,
        dequeue_count INTEGER NOT NULL,
        inserted_on REAL NOT NULL,
        expires_on REAL,
        next_visible REAL NOT NULL,
        pop_receipt TEXT NOT NULL
    )""",
    # Serves receive and peek (visible = next_visible <= now) in hand-out order.
    "CREATE INDEX IF NOT EXISTS messages_visible ON messages (queue, next_visible, seq)",
)

#: Seconds of clock time between two sweeps of expired messages of one queue.
SWEEP_INTERVAL_SECONDS = 60.0

_COLUMNS = "id, body, dequeue_count, inserted_on, expires_on, next_visible, pop_receipt"
_UNEXPIRED = "(expires_on IS NULL OR expires_on > :now)"

_SEND = f"""
INSERT INTO messages (queue, id, body, dequeue_count, inserted_on, expires_on,
                      next_visible, pop_receipt)
SELECT :queue, :id, :body, 0, :now, :expires, :visible, :receipt
WHERE EXISTS (SELECT 1 FROM queues WHERE name = :queue)
RETURNING {_COLUMNS}
"""

_SEND_MANY = """
INSERT INTO messages (queue, id, body, dequeue_count, inserted_on, expires_on,
                      next_visible, pop_receipt)
VALUES (:queue, :id, :body, 0, :now, :expires, :visible, :receipt)
"""

# The random receipt comes from SQLite (randomblob) so one statement serves the batch.
_RECEIVE = f"""
UPDATE messages
SET next_visible = :until, dequeue_count = dequeue_count + 1,
    pop_receipt = lower(hex(randomblob(12)))
WHERE seq IN (
    SELECT seq FROM messages
    WHERE queue = :queue AND next_visible <= :now AND {_UNEXPIRED}
    ORDER BY next_visible, seq LIMIT :limit)
RETURNING seq, {_COLUMNS}
"""

_PEEK = f"""
SELECT {_COLUMNS} FROM messages
WHERE queue = :queue AND next_visible <= :now AND {_UNEXPIRED}
ORDER BY next_visible, seq LIMIT :limit
"""

_UPDATE = f"""
UPDATE messages SET next_visible = :until, pop_receipt = :new, body = coalesce(:body, body)
WHERE id = :id AND queue = :queue AND pop_receipt = :receipt AND {_UNEXPIRED}
"""

_DELETE = f"""
DELETE FROM messages
WHERE id = :id AND queue = :queue AND pop_receipt = :receipt AND {_UNEXPIRED}
"""


def _new_receipt() -> str:
    # Same shape as the receipts SQLite makes in _RECEIVE: 24 lowercase hex digits.
    return secrets.token_hex(12)


def _message(row: tuple[Any, ...], receipt: bool = True) -> QueueMessage:
    msg_id, body, count, inserted, expires, visible, pop_receipt = row
    return QueueMessage(
        id=msg_id,
        body=body,
        dequeue_count=count,
        inserted_on=utc(inserted),
        expires_on=None if expires is None else utc(expires),
        next_visible_on=utc(visible),
        pop_receipt=pop_receipt if receipt else None,
    )


class EmbeddedQueues:
    """:class:`~checkpoint.storage.QueueStore` on the embedded store's SQLite file."""

    def __init__(self, db: Database, clock: Clock):
        self._db = db
        self._clock = clock
        self._swept: dict[str, float] = {}

    def _now(self) -> float:
        return epoch(self._clock.now())

    # ----------------------------------------------------------------- queues

    def create_queue(self, queue: str) -> None:
        service_targets.check_queue_name(queue)
        if self._db.read_only and self._db.has("SELECT 1 FROM queues WHERE name = ?", (queue,)):
            return
        with self._db.write() as conn:
            conn.execute("INSERT OR IGNORE INTO queues (name) VALUES (?)", (queue,))

    def delete_queue(self, queue: str) -> None:
        service_targets.check_queue_name(queue)
        with self._db.write() as conn:
            conn.execute("DELETE FROM messages WHERE queue = ?", (queue,))
            conn.execute("DELETE FROM queues WHERE name = ?", (queue,))

    def list_queues(self, prefix: str = "") -> list[str]:
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT name FROM queues WHERE name >= ? ORDER BY name", (prefix,)
            ).fetchall()
        return [name for (name,) in rows if name.startswith(prefix)]

    def _require_queue(self, conn: sqlite3.Connection, queue: str) -> None:
        if conn.execute("SELECT 1 FROM queues WHERE name = ?", (queue,)).fetchone() is None:
            raise NotFound(f"queue {queue!r} does not exist", code="QueueNotFound")

    # ----------------------------------------------------------------- messages

    def send(
        self,
        queue: str,
        body: bytes,
        *,
        delay_seconds: int = 0,
        ttl_seconds: int | None = None,
    ) -> QueueMessage:
        service_targets.check_queue_name(queue)
        body = service_targets.check_message_body(body)
        service_targets.check_whole(delay_seconds, "delay_seconds", 0)
        ttl_seconds = service_targets.check_ttl(ttl_seconds, delay_seconds)
        now = self._now()
        # Azure counts the TTL from insertion, not from the end of the delay.
        expires = None if ttl_seconds == NEVER_EXPIRES else now + ttl_seconds
        params = {
            "queue": queue,
            "id": str(uuid.uuid4()),
            "body": body,
            "now": now,
            "expires": expires,
            "visible": now + delay_seconds,
            "receipt": _new_receipt(),
        }
        with self._db.write() as conn:
            row = conn.execute(_SEND, params).fetchone()
        if row is None:
            raise NotFound(f"queue {queue!r} does not exist", code="QueueNotFound")
        return _message(row)

    def send_many(
        self, queue: str, bodies: Sequence[bytes], *, ttl_seconds: int | None = None
    ) -> list[StorageError | None]:
        service_targets.check_queue_name(queue)
        bodies = [service_targets.check_message_body(body) for body in bodies]
        ttl_seconds = service_targets.check_ttl(ttl_seconds, 0)
        if not bodies:
            return []
        now = self._now()
        expires = None if ttl_seconds == NEVER_EXPIRES else now + ttl_seconds
        rows = [
            {
                "queue": queue,
                "id": str(uuid.uuid4()),
                "body": body,
                "now": now,
                "expires": expires,
                "visible": now,
                "receipt": _new_receipt(),
            }
            for body in bodies
        ]
        with self._db.write() as conn:  # one transaction: all are sent or none
            self._require_queue(conn, queue)
            conn.executemany(_SEND_MANY, rows)
        return [None] * len(bodies)

    def receive(
        self, queue: str, *, max_messages: int = 1, visibility_seconds: int = 30
    ) -> list[QueueMessage]:
        service_targets.check_queue_name(queue)
        service_targets.check_max_messages(max_messages)
        service_targets.check_whole(visibility_seconds, "visibility_seconds", 1)
        now = self._now()
        params = {
            "queue": queue,
            "now": now,
            "until": now + visibility_seconds,
            "limit": max_messages,
        }
        with self._db.write() as conn:
            self._sweep(conn, queue, now)
            rows = conn.execute(_RECEIVE, params).fetchall()
            if not rows:
                self._require_queue(conn, queue)
        # RETURNING gives no order; hand the batch out in insertion order.
        rows.sort(key=lambda row: row[0])
        return [_message(row[1:]) for row in rows]

    def _sweep(self, conn: sqlite3.Connection, queue: str, now: float) -> None:
        # Expired rows are already invisible to every query; deleting them only saves
        # space and scan time, so a sweep per minute is plenty.
        if now - self._swept.get(queue, float("-inf")) < SWEEP_INTERVAL_SECONDS:
            return
        self._swept[queue] = now
        conn.execute("DELETE FROM messages WHERE queue = ? AND expires_on <= ?", (queue, now))

    def update(
        self,
        queue: str,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_seconds: int,
        body: bytes | None = None,
    ) -> Receipt:
        service_targets.check_queue_name(queue)
        service_targets.check_lease(message_id, pop_receipt)
        service_targets.check_whole(visibility_seconds, "visibility_seconds", 0)
        if body is not None:
            body = service_targets.check_message_body(body)
        now, receipt = self._now(), _new_receipt()
        until = now + visibility_seconds
        params = {
            "queue": queue,
            "id": message_id,
            "receipt": pop_receipt,
            "now": now,
            "until": until,
            "new": receipt,
            "body": body,
        }
        with self._db.write() as conn:
            if conn.execute(_UPDATE, params).rowcount == 0:
                self._explain_lost(conn, queue, message_id, now)
        return Receipt(pop_receipt=receipt, next_visible_on=utc(until))

    def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        service_targets.check_queue_name(queue)
        service_targets.check_lease(message_id, pop_receipt)
        now = self._now()
        params = {"queue": queue, "id": message_id, "receipt": pop_receipt, "now": now}
        with self._db.write() as conn:
            if conn.execute(_DELETE, params).rowcount == 0:
                self._explain_lost(conn, queue, message_id, now)

    def delete_many(
        self, queue: str, messages: Sequence[tuple[str, str]]
    ) -> list[StorageError | None]:
        service_targets.check_queue_name(queue)
        for message_id, pop_receipt in messages:
            service_targets.check_lease(message_id, pop_receipt)  # all before any is deleted
        now = self._now()
        errors: list[StorageError | None] = []
        with self._db.write() as conn:  # one transaction for them all
            self._require_queue(conn, queue)
            for message_id, pop_receipt in messages:
                params = {"queue": queue, "id": message_id, "receipt": pop_receipt, "now": now}
                try:
                    if conn.execute(_DELETE, params).rowcount == 0:
                        self._explain_lost(conn, queue, message_id, now)
                except LeaseLost as lost:
                    errors.append(lost)
                else:
                    errors.append(None)
        return errors

    def _explain_lost(
        self, conn: sqlite3.Connection, queue: str, message_id: str, now: float
    ) -> None:
        """Raise why an update or delete matched no row: no queue, no message, or a
        stale pop receipt (the statuses and codes Azure answers with)."""
        self._require_queue(conn, queue)
        row = conn.execute(
            "SELECT expires_on FROM messages WHERE id = ? AND queue = ?", (message_id, queue)
        ).fetchone()
        if row is None or (row[0] is not None and row[0] <= now):
            raise LeaseLost(
                f"message {message_id} is no longer in queue {queue!r} (deleted or expired)",
                status=404,
                code="MessageNotFound",
            )
        raise LeaseLost(
            f"pop receipt of message {message_id} in queue {queue!r} is stale: the message "
            "was received or updated again since",
            status=400,
            code="PopReceiptMismatch",
        )

    def peek(self, queue: str, *, max_messages: int = 1) -> list[QueueMessage]:
        service_targets.check_queue_name(queue)
        service_targets.check_max_messages(max_messages)
        params = {"queue": queue, "now": self._now(), "limit": max_messages}
        with self._db.read() as conn:
            rows = conn.execute(_PEEK, params).fetchall()
            if not rows:
                self._require_queue(conn, queue)
        return [_message(row, receipt=False) for row in rows]

    def approximate_length(self, queue: str) -> int:
        service_targets.check_queue_name(queue)
        with self._db.read() as conn:
            self._require_queue(conn, queue)
            count: int
            (count,) = conn.execute(
                f"SELECT count(*) FROM messages WHERE queue = :queue AND {_UNEXPIRED}",
                {"queue": queue, "now": self._now()},
            ).fetchone()
        return count
