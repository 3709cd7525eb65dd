"""The yardstick: a hand-rolled loop on the Azure SDKs making the minimal calls per message.

Per message: one send, a share of one receive of 32, an insert and an ETag-conditional
replace of one entity (a task record claimed, then marked done), one delete. One
thread, synchronous calls, the SDK clients used directly (no engine, no retries of our
own): what a user would write by hand. All messages are sent first and then worked
off, as the engine's planning does, so both keep the same queue depth.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from azure.core import MatchConditions
from azure.data.tables import TableClient, UpdateMode
from azure.storage.queue import BinaryBase64EncodePolicy, QueueClient

#: About the size of the engine's chunk message (a msgpack envelope of ~60 bytes).
BODY = b"\x85" + b"x" * 63


@dataclass
class RawTimes:
    """Seconds of the send phase and of the receive-and-work phase."""

    messages: int
    send_seconds: float
    work_seconds: float

    @property
    def seconds(self) -> float:
        return self.send_seconds + self.work_seconds

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def work_rate(self) -> float:
        return self.messages / self.work_seconds


def run_raw_loop(connection_string: str, messages: int) -> RawTimes:
    """Send ``messages`` messages to a fresh queue, then receive by 32 and work them off."""
    tag = uuid.uuid4().hex[:10]
    queue = QueueClient.from_connection_string(
        connection_string, f"raw-{tag}", message_encode_policy=BinaryBase64EncodePolicy()
    )
    table = TableClient.from_connection_string(connection_string, f"raw{tag}")
    queue.create_queue()
    table.create_table()
    try:
        started = time.perf_counter()
        for _ in range(messages):
            queue.send_message(BODY, time_to_live=-1)
        sent = time.perf_counter()
        worked = 0
        while worked < messages:
            pages = queue.receive_messages(messages_per_page=32, visibility_timeout=30).by_page()
            page = next(pages)  # one Get Messages call: the first page only
            for message in page:
                _work(queue, table, message, worked)
                worked += 1
        return RawTimes(messages, sent - started, time.perf_counter() - sent)
    finally:
        queue.delete_queue()
        table.delete_table()
        queue.close()
        table.close()


def _work(queue: QueueClient, table: TableClient, message: object, number: int) -> None:
    entity = {"PartitionKey": f"p{number % 16:02d}", "RowKey": message.id, "state": "running"}  # type: ignore[attr-defined]
    created = table.create_entity(entity)
    table.update_entity(
        {**entity, "state": "done"},
        mode=UpdateMode.REPLACE,
        etag=created["etag"],
        match_condition=MatchConditions.IfNotModified,
    )
    queue.delete_message(message)  # type: ignore[arg-type]
