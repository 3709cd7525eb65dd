"""Storage requests metered: each call of the three protocols timed, and what became of it.

:func:`metered` wraps a :class:`~checkpoint.storage.Storage` so that every call of a
queue, record or blob method tells a :class:`RequestMeter` its operation
(``queue_receive``, ``record_merge``, ``blob_put``, ...), how it ended and how long it
took:

- ``ok``: answered;
- ``refused``: answered no (not found, already there, precondition failed, a stale pop
  receipt, a request over a service target): the store working as it should;
- ``failed``: the store's trouble (busy, unreachable, timed out) or an error of its own.

What the caller then made of a failed request is told afterwards, as a further outcome
of the same operation (so these count *among* the failed and refused requests, never
beside them): ``retried`` when :mod:`checkpoint.retries` tries it again in place, and
``ambiguous_settled`` when :mod:`checkpoint.settle` (or the shard counters) settled a write
whose answer was lost by reading what is there. Those modules know nothing of meters: the
wrapper attaches the request's follow-up to the error it raises, and :func:`report`
calls it, once, if the error carries one. Errors of storage that is not metered carry
none, and reporting them costs an attribute lookup.

Metering only observes: every call's result and error pass through unchanged. Labels
are operation names from this module's own list; nothing of a call's arguments (keys,
bodies, a connection string) ever reaches the meter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol

from checkpoint.errors import (
    AlreadyExists,
    BatchFailed,
    Conflict,
    InvalidRequest,
    LeaseLost,
    NotFound,
    StorageError,
    TooLarge,
)
from checkpoint.storage import BlobStore, QueueStore, RecordStore, Storage

Outcome = Literal["ok", "refused", "failed", "retried", "ambiguous_settled"]
FollowUp = Literal["retried", "ambiguous_settled"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "refused", "failed", "retried", "ambiguous_settled")

#: Answers that say no: the request reached a store that works.
REFUSALS: tuple[type[StorageError], ...] = (
    NotFound,
    AlreadyExists,
    Conflict,
    LeaseLost,
    InvalidRequest,
    TooLarge,
)

#: The attribute of an error holding its request's follow-up (see :func:`report`).
_FOLLOW_UP = "_metering_follow_up"


class RequestMeter(Protocol):
    """Told of every storage request (thread-safe: workers call from many threads)."""

    def request(self, operation: str, outcome: Outcome, seconds: float | None) -> None:
        """One outcome of one ``operation``: ``seconds`` is the request's time for
        ``ok``, ``refused`` and ``failed``; None for a follow-up."""
        ...


def _methods(protocol: type) -> tuple[str, ...]:
    return tuple(name for name in vars(protocol) if not name.startswith("_"))


#: Each service's name in an operation, and its methods (read off the protocols, so a
#: method added there is metered too).
SERVICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "queues": ("queue", _methods(QueueStore)),
    "records": ("record", _methods(RecordStore)),
    "blobs": ("blob", _methods(BlobStore)),
}
#: Calls that return an iterator: timed until it is used up (or dropped).
_ITERATORS = frozenset({"record_query", "blob_list"})


def operations() -> list[str]:
    """Every operation a meter can be told of, ``queue_send`` ..., sorted."""
    return sorted(
        f"{prefix}_{method}" for prefix, methods in SERVICES.values() for method in methods
    )


def outcome_of(error: BaseException) -> Outcome:
    """``refused`` for an answer that says no, else ``failed``."""
    reason = error.reason if isinstance(error, BatchFailed) else error
    return "refused" if isinstance(reason, REFUSALS) else "failed"


def report(error: BaseException, outcome: FollowUp) -> None:
    """Tell the meter of the request that raised ``error`` what became of it (once; a
    no-op for an error of storage that is not metered)."""
    follow_up = vars(error).pop(_FOLLOW_UP, None)
    if follow_up is not None:
        follow_up(outcome)


class _Metered:
    """One service of the metered storage: every protocol method timed and told."""

    def __init__(
        self, service: str, inner: Any, meter: RequestMeter, now: Callable[[], float]
    ) -> None:
        self._prefix, methods = SERVICES[service]
        self._methods = frozenset(methods)
        self._inner, self._meter, self._now = inner, meter, now

    def __getattr__(self, method: str) -> Any:
        target = getattr(self._inner, method)
        if method not in self._methods:
            return target
        operation = f"{self._prefix}_{method}"

        def call(*args: Any, **kwargs: Any) -> Any:
            started = self._now()
            try:
                result = target(*args, **kwargs)
            except Exception as error:
                self._ended(operation, started, error)
                raise
            if operation in _ITERATORS:
                return self._iterate(operation, started, result)
            self._ended(operation, started, None)
            return result

        self.__dict__[method] = call  # found directly from now on: no lookup per request
        return call

    def _iterate(self, operation: str, started: float, rows: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from rows
        except GeneratorExit:  # the caller stopped early: what it read was answered
            self._ended(operation, started, None)
            raise
        except Exception as error:
            self._ended(operation, started, error)
            raise
        self._ended(operation, started, None)

    def _ended(self, operation: str, started: float, error: Exception | None) -> None:
        seconds = max(0.0, self._now() - started)
        if error is None:
            self._meter.request(operation, "ok", seconds)
            return
        self._meter.request(operation, outcome_of(error), seconds)
        if isinstance(error, StorageError):
            meter = self._meter
            setattr(error, _FOLLOW_UP, lambda then: meter.request(operation, then, None))


def metered(
    storage: Storage, meter: RequestMeter, now: Callable[[], float] = time.monotonic
) -> Storage:
    """``storage`` with every request told to ``meter`` (``now``: seconds, for the
    requests' times)."""
    return Storage(
        queues=_Metered("queues", storage.queues, meter, now),
        records=_Metered("records", storage.records, meter, now),
        blobs=_Metered("blobs", storage.blobs, meter, now),
        description=storage.description,
        closer=storage.close,
    )
