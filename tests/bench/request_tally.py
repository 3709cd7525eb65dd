"""Storage requests counted two ways: by operation at the protocols, by HTTP request on the wire.

- :class:`OperationTally` is a :class:`~checkpoint.metering.RequestMeter`: given to
  :func:`checkpoint.metering.metered`, it counts each call of the queue, record and
  blob protocols by operation (``queue_receive``, ``record_batch``, ...) inside a
  :class:`Window`. A call of ``send_many`` or ``delete_many`` is one operation here.
- :class:`HttpTally` counts what the Azure SDKs put on the wire (Azure bills and limits
  HTTP requests, and ``send_many`` of 32 messages is 32 of them): ``requests``'
  ``Session.send``, through which every SDK client of the Azure backend sends, is
  wrapped while :meth:`HttpTally.installed` is in force. :func:`classify` names each
  request's kind and the partition it touches, from its method, URL and (a batch's)
  body alone, so the count is what Azure would see, not what we meant to send.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import requests

from checkpoint import layout
from checkpoint.metering import Outcome

#: Operations that make the store ready (tables, queues, a container): paid once per
#: worker start, not per chunk, so reported apart.
START_UP = ("create", "delete_table", "delete_queue", "delete_container")


class Window:
    """When requests count: from :meth:`open` to :meth:`close` (``time.monotonic()``)."""

    def __init__(self) -> None:
        self.opened_at: float | None = None
        self.closed_at: float | None = None

    def open(self) -> None:
        self.opened_at, self.closed_at = time.monotonic(), None

    def close(self) -> None:
        self.closed_at = time.monotonic()

    def holds(self, moment: float) -> bool:
        """Whether a request started at ``moment`` counts."""
        if self.opened_at is None or moment < self.opened_at:
            return False
        return self.closed_at is None or moment <= self.closed_at


def is_start_up(operation: str) -> bool:
    """``queue_create_queue``, ``table create`` ...: a store made ready, not a chunk run."""
    return any(word in operation for word in START_UP)


class OperationTally:
    """Storage calls by operation and outcome within a window (a thread-safe meter)."""

    def __init__(self, window: Window) -> None:
        self._window = window
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        #: Calls that did not end ``ok``, by ``operation outcome`` (retries among them).
        self.not_ok: Counter[str] = Counter()

    def request(self, operation: str, outcome: Outcome, seconds: float | None) -> None:
        """Count one call by when it started; a follow-up (``retried``, ...) apart."""
        if seconds is None:
            with self._lock:
                self.not_ok[f"{operation} {outcome}"] += 1
            return
        if not self._window.holds(time.monotonic() - seconds):
            return
        with self._lock:
            self.calls[operation] += 1
            if outcome != "ok":
                self.not_ok[f"{operation} {outcome}"] += 1


# --------------------------------------------------------------------------- the wire


@dataclass(frozen=True)
class Wire:
    """One HTTP request as Azure would count it: its kind and the partition it falls in."""

    kind: str
    #: ``catalogue``, ``heartbeats``, ``shard``, ``control``, ``park``, or "" (a queue,
    #: a blob, or no single partition).
    partition: str = ""
    #: The partition key itself ("" when none): to see how the shards share the load.
    partition_key: str = ""


_TABLE_PATH = re.compile(r"^(?P<table>[A-Za-z][A-Za-z0-9]*)\((?P<keys>[^)]*)\)$")
_KEYS = re.compile(r"PartitionKey='(?P<pk>(?:[^']|'')*)'")
_FILTER_PK = re.compile(r"PartitionKey eq '(?P<pk>(?:[^']|'')*)'")
_TABLES = {layout.JOBS_TABLE, layout.TASKS_TABLE, layout.WORKERS_TABLE}


def partition_class(partition_key: str) -> str:
    """Which of the store's partitions a key names (:mod:`checkpoint.layout`)."""
    if partition_key == layout.JOBS_PARTITION:
        return "catalogue"
    if partition_key == layout.WORKERS_PARTITION:
        return "heartbeats"
    suffix = partition_key.rpartition("~")[2]
    if suffix == "ctl":
        return "control"
    if suffix == "park":
        return "park"
    return "shard" if suffix.isdigit() else "other"


def _in_partition(kind: str, partition_key: str | None) -> Wire:
    if partition_key is None:
        return Wire(kind)
    key = partition_key.replace("''", "'")
    return Wire(kind, partition_class(key), key)


def classify(method: str, url: str, body: bytes | str | None = None) -> Wire:
    """The kind of an Azure Storage HTTP request (``queue receive``, ``table batch``,
    ...) and the table partition it touches, from the request alone."""
    parts = urlsplit(url)
    # Path-style (Azurite: /<account>/<name>...) or host-style (<account>.<service>...).
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if segments and _is_path_style(parts.hostname or ""):
        segments = segments[1:]
    query = parse_qs(parts.query)
    method = method.upper()
    if not segments:
        return Wire(f"account {method}")
    first = segments[0]
    if first == "$batch":
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body or ""
        found = _KEYS.search(text)
        return _in_partition("table batch", found["pk"] if found else None)
    if first == "Tables" or first.startswith("Tables("):
        return Wire("table create" if method == "POST" else f"table admin {method}")
    table = _TABLE_PATH.match(first)
    name = table["table"] if table else first
    if name in _TABLES:
        return _table_request(method, table["keys"] if table else None, query)
    if len(segments) > 1 and segments[1] == "messages":
        return Wire(_queue_kind(method, len(segments) > 2, query))
    if len(segments) == 1:
        return Wire(_container_or_queue_kind(method, query))
    return Wire(_blob_kind(method, query))


def _is_path_style(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.replace(".", "").isdigit()


def _table_request(method: str, keys: str | None, query: dict[str, list[str]]) -> Wire:
    found = _KEYS.search(keys or "")
    if found is not None:
        kinds = {"GET": "table get", "PUT": "table replace/upsert", "DELETE": "table delete"}
        kind = kinds.get(method, "table merge/upsert")  # PATCH or MERGE
        return _in_partition(kind, found["pk"])
    if method == "POST":
        return Wire("table insert")  # the keys are in the body; inserts are rare here
    filtered = _FILTER_PK.search(" ".join(query.get("$filter", [])))
    return _in_partition("table query", filtered["pk"] if filtered else None)


def _queue_kind(method: str, one_message: bool, query: dict[str, list[str]]) -> str:
    if method == "POST":
        return "queue send"
    if method == "GET":
        return "queue peek" if query.get("peekonly") else "queue receive"
    if method == "PUT" and one_message:
        return "queue update"
    if method == "DELETE":
        return "queue delete" if one_message else "queue clear"
    return f"queue messages {method}"


def _container_or_queue_kind(method: str, query: dict[str, list[str]]) -> str:
    if method == "PUT":
        return "create (queue or container)"
    if query.get("comp") == ["metadata"]:
        return "queue properties"
    if query.get("comp") == ["list"]:
        return "blob list"
    return f"queue or container {method}"


def _blob_kind(method: str, query: dict[str, list[str]]) -> str:
    return {"PUT": "blob put", "GET": "blob get", "HEAD": "blob info", "DELETE": "blob delete"}.get(
        method, f"blob {method}"
    )


class HttpTally:
    """HTTP requests to the store, by :class:`Wire`, with bytes sent and received."""

    def __init__(self, window: Window) -> None:
        self._window = window
        self._lock = threading.Lock()
        self.requests: Counter[Wire] = Counter()
        self.bytes_sent = 0
        self.bytes_received = 0
        #: Request bodies' bytes by kind (a queue send's body is the message, as XML).
        self.sent_by_kind: Counter[str] = Counter()

    def record(self, method: str, url: str, body: Any, received: int, started: float) -> None:
        """Count one request, if the window holds ``started`` (``time.monotonic()``)."""
        if not self._window.holds(started):
            return
        data = body if isinstance(body, bytes | str) else None
        wire = classify(method, url, data)
        with self._lock:
            self.requests[wire] += 1
            sent = len(data) if data is not None else 0
            self.bytes_sent += sent
            self.sent_by_kind[wire.kind] += sent
            self.bytes_received += received

    def by_kind(self) -> Counter[str]:
        kinds: Counter[str] = Counter()
        for wire, count in self.requests.items():
            kinds[wire.kind] += count
        return kinds

    def by_partition(self) -> Counter[str]:
        classes: Counter[str] = Counter()
        for wire, count in self.requests.items():
            if wire.partition:
                classes[wire.partition] += count
        return classes

    def shard_keys(self) -> Counter[str]:
        return Counter(
            {w.partition_key: n for w, n in self.requests.items() if w.partition == "shard"}
        )

    @contextmanager
    def installed(self) -> Iterator[HttpTally]:
        """Every ``requests`` session of this process counts into this tally meanwhile
        (the Azure backend's transports are ``requests`` sessions)."""
        original = requests.Session.send
        tally = self

        def send(session: requests.Session, request: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            response = original(session, request, **kwargs)
            # A streamed body (a blob download) is read later by the SDK: its length is
            # the header's; any other body is in memory already.
            streamed = kwargs.get("stream", False)
            length = int(response.headers.get("Content-Length") or 0) if streamed else None
            received = length if length is not None else len(response.content or b"")
            tally.record(request.method, request.url, request.body, received, started)
            return response

        requests.Session.send = send  # type: ignore[method-assign,assignment]
        try:
            yield self
        finally:
            requests.Session.send = original  # type: ignore[method-assign]
