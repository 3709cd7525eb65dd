"""The three storage protocols the core talks to: queues, records and blobs.

Each backend (embedded SQLite in ``checkpoint/backends/embedded``, Azure Storage in
``checkpoint/backends/azure``) implements all three with Azure's semantics and service targets,
and raises only the errors of :mod:`jobs.errors`. Names of queues, tables and containers,
keys, property values and sizes are checked by :mod:`checkpoint.service_targets` before a request
is made, so both backends refuse exactly the same input.

Times are timezone-aware UTC datetimes; durations are whole or fractional seconds as the
parameter name says.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from checkpoint.errors import StorageError

#: A property value a record can hold. ``None`` means "no such property": Azure does not
#: store nulls, so a property set to None is simply absent when read back.
PropertyValue = str | int | float | bool | bytes | datetime | None

#: Time to live meaning "never expires" (Azure's ``-1``).
NEVER_EXPIRES = -1


# --------------------------------------------------------------------------- queues


@dataclass(frozen=True)
class QueueMessage:
    """A message as the queue returned it.

    ``pop_receipt`` is None for peeked messages: only a receive or an update grants one.
    ``expires_on`` is None when the message never expires.
    """

    id: str
    body: bytes
    dequeue_count: int
    inserted_on: datetime
    expires_on: datetime | None
    next_visible_on: datetime
    pop_receipt: str | None = None


@dataclass(frozen=True)
class Receipt:
    """What an update returns: the newest pop receipt and the new visibility time."""

    pop_receipt: str
    next_visible_on: datetime


class QueueStore(Protocol):
    """The queues of one storage account (Azure Queue storage semantics)."""

    def create_queue(self, queue: str) -> None:
        """Create ``queue``; creating an existing queue is not an error."""
        ...

    def delete_queue(self, queue: str) -> None:
        """Delete ``queue`` and its messages; deleting a missing queue is not an error."""
        ...

    def list_queues(self, prefix: str = "") -> list[str]:
        """Names of the queues starting with ``prefix``, sorted."""
        ...

    def send(
        self,
        queue: str,
        body: bytes,
        *,
        delay_seconds: int = 0,
        ttl_seconds: int | None = None,
    ) -> QueueMessage:
        """Add a message, invisible for ``delay_seconds``.

        ``ttl_seconds`` None keeps Azure's default of 7 days; :data:`NEVER_EXPIRES` (-1)
        keeps the message until it is deleted. Raises TooLarge over 48 KiB of body
        (64 KiB once base64-encoded), NotFound if the queue does not exist.
        """
        ...

    def send_many(
        self, queue: str, bodies: Sequence[bytes], *, ttl_seconds: int | None = None
    ) -> list[StorageError | None]:
        """Add several messages, as :meth:`send` each (visible at once), in as few round
        trips as the service allows.

        Returns, in order, None for each body sent or the passing trouble (Throttled,
        Unavailable) that kept it from being confirmed: send those again, and only
        those (an ambiguous one may have been sent too; ours can take a duplicate). Not
        atomic on Azure, which has no batch send. Raises as :meth:`send` for any other
        error, or if the call as a whole failed (then some may have been sent), and
        before sending anything if any body is invalid."""
        ...

    def receive(
        self, queue: str, *, max_messages: int = 1, visibility_seconds: int = 30
    ) -> list[QueueMessage]:
        """Take up to ``max_messages`` (1-32) visible messages, hiding each for
        ``visibility_seconds`` and incrementing its dequeue count. Each comes with a fresh
        pop receipt; no visible message is handed to two callers."""
        ...

    def update(
        self,
        queue: str,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_seconds: int,
        body: bytes | None = None,
    ) -> Receipt:
        """Set the message invisible for ``visibility_seconds`` from now (0 = visible at
        once) and, if ``body`` is given, replace its content. Returns the new pop receipt:
        the old one stops working. Raises LeaseLost if the receipt is stale or the
        message is gone."""
        ...

    def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        """Delete the message. Raises LeaseLost if the receipt is stale or the message is
        gone."""
        ...

    def delete_many(
        self, queue: str, messages: Sequence[tuple[str, str]]
    ) -> list[StorageError | None]:
        """Delete several messages, each given as ``(message id, pop receipt)``.

        Returns, in order, None for each deleted message or the error :meth:`delete`
        would have raised for it (LeaseLost for a stale receipt or a message gone).
        Raises only if the call as a whole failed (the queue is missing, the store
        cannot be reached); then none or some may have been deleted."""
        ...

    def peek(self, queue: str, *, max_messages: int = 1) -> list[QueueMessage]:
        """Look at up to ``max_messages`` (1-32) visible messages without receiving them."""
        ...

    def approximate_length(self, queue: str) -> int:
        """Messages in the queue, visible or not (Azure counts expired ones not yet
        swept, so treat this as approximate)."""
        ...


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Record:
    """A table entity: its keys, its properties and the ETag of this version.

    ``unreadable`` says why a backend could not decode what it stores for the record
    (the embedded store's row is not msgpack after a hand edit, say); its properties
    are then empty, and reading it as a job or task raises BadRecord with that reason.
    Its keys and timestamp are real, and its ETag is one of its own: a write
    conditional on it can write over the record (a merge keeps none of it), while a
    merge with an ETag read before the record became unreadable is a Conflict. A query
    returns it whatever its property conditions, so a scan names it instead of failing
    or hiding it.
    """

    partition_key: str
    row_key: str
    properties: Mapping[str, PropertyValue]
    etag: str
    timestamp: datetime | None = None
    unreadable: str | None = None


#: Match any version in a conditional write (``If-Match: *``).
ANY_ETAG = "*"

Comparison = Literal["eq", "ne", "gt", "ge", "lt", "le"]


@dataclass(frozen=True)
class Where:
    """One condition of a query: ``property op value``. Conditions of a query are ANDed.

    ``property`` may be ``RowKey`` or any property name. Comparing a property that a
    record lacks is false, as in Azure's OData filters. Compare a property only with a
    value of the type it is stored with (int and float are different types, as are int
    and bool): Azure matches nothing across types and Azurite may answer 500. Bytes
    compare only with ``eq``/``ne``. :func:`checkpoint.service_targets.check_where` has the rules.
    """

    property: str
    op: Comparison
    value: PropertyValue


BatchKind = Literal["insert", "replace", "merge", "upsert_replace", "upsert_merge", "delete"]


@dataclass(frozen=True)
class BatchOp:
    """One operation of an atomic batch. ``etag`` applies to replace, merge and delete
    (None there means unconditional, like :data:`ANY_ETAG`)."""

    kind: BatchKind
    row_key: str
    properties: Mapping[str, PropertyValue] = field(default_factory=dict)
    etag: str | None = None


class RecordStore(Protocol):
    """The tables of one storage account (Azure Table storage semantics)."""

    def create_table(self, table: str) -> None:
        """Create ``table``; creating an existing table is not an error."""
        ...

    def delete_table(self, table: str) -> None:
        """Delete ``table`` and its records; deleting a missing table is not an error."""
        ...

    def get(self, table: str, partition_key: str, row_key: str) -> Record:
        """Read one record. Raises NotFound."""
        ...

    def insert(
        self, table: str, partition_key: str, row_key: str, properties: Mapping[str, PropertyValue]
    ) -> str:
        """Create a record that must not exist yet; returns its ETag. Raises AlreadyExists."""
        ...

    def replace(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        etag: str,
    ) -> str:
        """Replace all properties if the record's ETag still matches (:data:`ANY_ETAG`
        for any). Returns the new ETag. Raises Conflict on a mismatch, NotFound if the
        record is gone."""
        ...

    def merge(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        etag: str,
    ) -> str:
        """Like :meth:`replace`, but properties not given are kept."""
        ...

    def upsert(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        merge: bool = False,
    ) -> str:
        """Create or overwrite (``merge=True``: create or merge) unconditionally."""
        ...

    def delete(self, table: str, partition_key: str, row_key: str, *, etag: str) -> None:
        """Delete if the ETag still matches. Raises Conflict on a mismatch; deleting a
        missing record is not an error (as in the Azure SDK)."""
        ...

    def query(
        self,
        table: str,
        partition_key: str,
        where: Sequence[Where] = (),
        *,
        select: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> Iterator[Record]:
        """Records of one partition matching every condition, in RowKey order.

        ``select`` keeps only the named properties; ``limit`` stops after that many."""
        ...

    def batch(self, table: str, partition_key: str, operations: Sequence[BatchOp]) -> list[str]:
        """Apply 1-100 operations on distinct rows of one partition atomically.

        Returns the new ETag of each operation ("" for deletes). If any operation fails
        none is applied and BatchFailed says which and why."""
        ...


# --------------------------------------------------------------------------- blobs


@dataclass(frozen=True)
class BlobInfo:
    """A blob's name and properties."""

    name: str
    size: int
    etag: str
    last_modified: datetime


class BlobStore(Protocol):
    """The blob containers of one storage account (Azure Blob storage semantics)."""

    def create_container(self, container: str) -> None:
        """Create ``container``; creating an existing container is not an error."""
        ...

    def delete_container(self, container: str) -> None:
        """Delete ``container`` and its blobs; deleting a missing one is not an error."""
        ...

    def put(
        self,
        container: str,
        name: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> BlobInfo:
        """Write a blob, overwriting by default.

        ``if_match``: only if the blob's ETag still matches, else Conflict (a missing
        blob gives Conflict too: Azure answers 412). ``if_none_match``: only if no blob
        has the name, else AlreadyExists."""
        ...

    def get(
        self, container: str, name: str, *, offset: int = 0, length: int | None = None
    ) -> bytes:
        """Read the blob, or ``length`` bytes from ``offset``. Raises NotFound."""
        ...

    def info(self, container: str, name: str) -> BlobInfo:
        """The blob's properties. Raises NotFound."""
        ...

    def delete(self, container: str, name: str, *, if_match: str | None = None) -> None:
        """Delete the blob. Raises NotFound if missing, Conflict if ``if_match`` differs."""
        ...

    def list(self, container: str, prefix: str = "") -> Iterator[BlobInfo]:
        """Blobs whose name starts with ``prefix``, in name order."""
        ...


# --------------------------------------------------------------------------- together


@dataclass(frozen=True)
class Storage:
    """One storage account: its queues, records and blobs, and a safe description.

    ``description`` names the backend and location with every secret removed; it is
    what logs, errors and ``repr`` show.
    """

    queues: QueueStore
    records: RecordStore
    blobs: BlobStore
    description: str
    closer: Any = field(default=None, repr=False, compare=False)

    def close(self) -> None:
        """Release connections and files held by the backend."""
        if self.closer is not None:
            self.closer()

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Storage({self.description})"
