"""Azure Queue storage as a :class:`~checkpoint.storage.QueueStore`.

Bodies travel base64-encoded (``BinaryBase64EncodePolicy``), so they are bytes on both
sides and the raw limit is 48 KiB. Names, sizes and ranges are checked by
:mod:`checkpoint.service_targets` first, so Azure and the embedded backend refuse the same input.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import (
    BinaryBase64EncodePolicy,
    QueueClient,
    QueueServiceClient,
)
from azure.storage.queue import QueueMessage as SdkMessage

from checkpoint import service_targets
from checkpoint.backends.azure.errors import being_deleted, translated
from checkpoint.backends.azure.times import as_utc
from checkpoint.errors import LeaseLost, StorageError, Unavailable
from checkpoint.retries import TRANSIENT
from checkpoint.storage import QueueMessage, Receipt

T = TypeVar("T")
A = TypeVar("A")

#: Requests in flight at once for send_many and delete_many (the SDK's connection pool
#: keeps 10 connections per host).
CONCURRENT_CALLS = 8

#: Azure reports a message that never expires as expiring at the end of year 9999.
_NEVER_YEAR = 9999


class AzureQueues:
    """The queues of one storage account (see :class:`~checkpoint.storage.QueueStore`).

    Args:
        service: the account's queue service client (retry policy already set).
    """

    def __init__(self, service: QueueServiceClient) -> None:
        self._service = service
        self._clients: dict[str, QueueClient] = {}

    def _queue(self, queue: str) -> QueueClient:
        service_targets.check_queue_name(queue)
        client = self._clients.get(queue)
        if client is None:
            # Clients share the service's pipeline; caching only saves building one per call.
            # No decode policy: we decode base64 ourselves (see _body), so a foreign
            # message that is not base64 cannot fail a whole receive batch.
            client = self._service.get_queue_client(
                queue, message_encode_policy=BinaryBase64EncodePolicy()
            )
            self._clients[queue] = client
        return client

    def create_queue(self, queue: str) -> None:
        """Create ``queue``; creating an existing queue is not an error."""
        client = self._queue(queue)
        with translated(f"create queue {queue!r}"):
            try:
                client.create_queue()
            except ResourceExistsError as err:
                # 409 QueueAlreadyExists (only when its metadata differs) means it is there;
                # QueueBeingDeleted means it is not, and cannot be for a while.
                if being_deleted(err):
                    raise

    def delete_queue(self, queue: str) -> None:
        """Delete ``queue``; deleting a missing queue is not an error."""
        client = self._queue(queue)
        with translated(f"delete queue {queue!r}"):
            try:
                client.delete_queue()
            except ResourceNotFoundError:
                pass

    def list_queues(self, prefix: str = "") -> list[str]:
        """Names of the queues starting with ``prefix``, sorted."""
        with translated(f"list queues starting with {prefix!r}"):
            names = [q.name for q in self._service.list_queues(name_starts_with=prefix or None)]
        return sorted(names)

    def send(
        self,
        queue: str,
        body: bytes,
        *,
        delay_seconds: int = 0,
        ttl_seconds: int | None = None,
    ) -> QueueMessage:
        """Add a message, invisible for ``delay_seconds`` (see ``QueueStore.send``)."""
        client = self._queue(queue)
        body = service_targets.check_message_body(body)
        service_targets.check_whole(delay_seconds, "delay_seconds", 0)
        ttl = service_targets.check_ttl(ttl_seconds, delay_seconds)
        with translated(f"send to queue {queue!r}"):
            sent = client.send_message(body, visibility_timeout=delay_seconds, time_to_live=ttl)
        return _message(sent, body)

    def send_many(
        self, queue: str, bodies: Sequence[bytes], *, ttl_seconds: int | None = None
    ) -> list[StorageError | None]:
        """Add several messages (see ``QueueStore.send_many``): Azure has no batch send,
        so they go as concurrent single sends, each one's passing trouble returned."""
        self._queue(queue)
        bodies = [service_targets.check_message_body(body) for body in bodies]
        service_targets.check_ttl(ttl_seconds, 0)

        def send(body: bytes) -> StorageError | None:
            try:
                self.send(queue, body, ttl_seconds=ttl_seconds)
            except TRANSIENT as trouble:
                return trouble
            return None

        return list(_concurrently(send, bodies))

    def receive(
        self, queue: str, *, max_messages: int = 1, visibility_seconds: int = 30
    ) -> list[QueueMessage]:
        """Take up to ``max_messages`` visible messages, hiding each for a while."""
        client = self._queue(queue)
        service_targets.check_max_messages(max_messages)
        service_targets.check_whole(visibility_seconds, "visibility_seconds", 1)
        with translated(f"receive from queue {queue!r}"):
            # Exactly one Get Messages call (the first page): iterating further would
            # ask again whenever fewer than max_messages came back, hiding more later.
            pages = client.receive_messages(
                messages_per_page=max_messages, visibility_timeout=visibility_seconds
            ).by_page()
            return [_message(m) for m in next(pages, [])]

    def update(
        self,
        queue: str,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_seconds: int,
        body: bytes | None = None,
    ) -> Receipt:
        """Hide the message for ``visibility_seconds`` more (and maybe replace its body)."""
        client = self._queue(queue)
        service_targets.check_lease(message_id, pop_receipt)
        service_targets.check_whole(visibility_seconds, "visibility_seconds", 0)
        if body is not None:
            body = service_targets.check_message_body(body)
        with translated(f"update message {message_id!r} in queue {queue!r}"):
            updated = client.update_message(
                message_id,
                pop_receipt=pop_receipt,
                visibility_timeout=visibility_seconds,
                content=body,
            )
        return Receipt(
            _required(updated.pop_receipt, "a pop receipt"),
            as_utc(_required(updated.next_visible_on, "a visibility time")),
        )

    def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        """Delete the message; LeaseLost if the receipt is stale or the message gone."""
        client = self._queue(queue)
        service_targets.check_lease(message_id, pop_receipt)
        with translated(f"delete message {message_id!r} from queue {queue!r}"):
            client.delete_message(message_id, pop_receipt=pop_receipt)

    def delete_many(
        self, queue: str, messages: Sequence[tuple[str, str]]
    ) -> list[StorageError | None]:
        """Delete several messages (see ``QueueStore.delete_many``): Azure has no batch
        delete, so they go as concurrent single deletes, once every one is known valid."""
        self._queue(queue)
        for message_id, pop_receipt in messages:
            service_targets.check_lease(message_id, pop_receipt)

        def delete(message: tuple[str, str]) -> StorageError | None:
            try:
                self.delete(queue, *message)
            except LeaseLost as lost:
                return lost
            return None

        return list(_concurrently(delete, messages))

    def peek(self, queue: str, *, max_messages: int = 1) -> list[QueueMessage]:
        """Look at up to ``max_messages`` visible messages without receiving them."""
        client = self._queue(queue)
        service_targets.check_max_messages(max_messages)
        with translated(f"peek at queue {queue!r}"):
            return [_message(m) for m in client.peek_messages(max_messages=max_messages)]

    def approximate_length(self, queue: str) -> int:
        """Messages in the queue, visible or not (approximate, as Azure says)."""
        client = self._queue(queue)
        with translated(f"count messages in queue {queue!r}"):
            return int(client.get_queue_properties().approximate_message_count or 0)


def _concurrently(call: Callable[[A], T], items: Sequence[A]) -> Iterator[T]:
    """``call`` on each item, up to :data:`CONCURRENT_CALLS` at once, results in order.
    The first exception raised is raised (the other calls still run to their end)."""
    if len(items) <= 1:
        yield from map(call, items)
        return
    with ThreadPoolExecutor(min(CONCURRENT_CALLS, len(items))) as pool:
        yield from pool.map(call, items)


def _message(sdk: SdkMessage, body: bytes | None = None) -> QueueMessage:
    """Our message from the SDK's; a sent message's content is the body we sent."""
    expires_on = as_utc(sdk.expires_on) if sdk.expires_on is not None else None
    if expires_on is not None and expires_on.year >= _NEVER_YEAR:
        expires_on = None
    inserted_on = as_utc(_required(sdk.inserted_on, "an insertion time"))
    # Peek reports no visibility time: a peeked message is visible, so it became visible
    # at some moment not after now; its insertion time is the one we know.
    next_visible_on = as_utc(sdk.next_visible_on) if sdk.next_visible_on else inserted_on
    return QueueMessage(
        id=sdk.id,
        body=body if body is not None else _body(sdk.content),
        dequeue_count=sdk.dequeue_count or 0,
        inserted_on=inserted_on,
        expires_on=expires_on,
        next_visible_on=next_visible_on,
        pop_receipt=sdk.pop_receipt,
    )


def _body(content: object) -> bytes:
    """The bytes a message carries: its base64 text decoded.

    A message some other producer put as plain text is not base64; it comes back as its
    UTF-8 text bytes so the caller can refuse it as foreign instead of the whole receive
    failing on it.
    """
    if isinstance(content, bytes):
        return content
    text = str(content or "")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text.encode("utf-8", errors="replace")


def _required(value: T | None, what: str) -> T:
    """A field the service always sends; its absence means a broken answer."""
    if value is None:
        raise Unavailable(f"Azure Queue storage answered without {what}", code="MalformedResponse")
    return value
