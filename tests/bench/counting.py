"""Counting storage round trips: proxies around a Storage's queues, records and blobs.

:func:`counted` builds a new :class:`~checkpoint.storage.Storage` (it is frozen) whose
three stores forward every call to the real ones and count it by ``service.method``.
A :class:`Tally` also marks the measured window: it opens at the worker's first
receive and closes when the job's record is set ``done``, so start-up calls (creating
tables and queues) and the burst-mode exit checks after the job ended are not counted.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from checkpoint import layout
from checkpoint.catalogue.job_index import is_index_row
from checkpoint.storage import Storage


class Flag(Protocol):
    """A threading or multiprocessing Event: one tally per process may share it."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...


class Tally:
    """Calls by ``service.method`` within one window, and when the window opened/closed.

    Times are ``time.monotonic()``, which on Linux is one clock for every process, so
    tallies of two worker processes can be compared.
    """

    def __init__(self, done: Flag | None = None):
        self._lock = threading.Lock()
        self._done = done if done is not None else threading.Event()
        self.calls: Counter[str] = Counter()
        self.started_at: float | None = None
        self.done_at: float | None = None

    def record(self, operation: str, messages: int | None = None) -> None:
        """Count one call, if the window is open; the first receive opens it.

        ``messages``: how many messages a ``*_many`` call carried, counted apart as
        ``<operation> messages`` (on Azure each is one request, sent concurrently).
        """
        with self._lock:
            if self.started_at is None:
                if operation != "queues.receive":
                    return
                self.started_at = time.monotonic()
            if not self._done.is_set():
                self.calls[operation] += 1
                if messages is not None:
                    self.calls[f"{operation} messages"] += messages

    def mark_done(self) -> None:
        """Close the window (in every process sharing the flag): the job is done."""
        with self._lock:
            if self.done_at is None:
                self.done_at = time.monotonic()
            self._done.set()

    @property
    def seconds(self) -> float:
        """From the first receive to the job being done."""
        if self.started_at is None or self.done_at is None:
            raise RuntimeError("the job did not run to done inside the window")
        return self.done_at - self.started_at


class Counting:
    """Forwards attribute access to ``target``, counting each method call in ``tally``.

    ``after(method, args, kwargs)`` runs after each call returned (used to see the job
    record being set done).
    """

    def __init__(
        self,
        target: Any,
        service: str,
        tally: Tally,
        after: Callable[[str, tuple[Any, ...], dict[str, Any]], None] | None = None,
    ):
        self._target = target
        self._service = service
        self._tally = tally
        self._after = after

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        operation, tally, after = f"{self._service}.{name}", self._tally, self._after

        def call(*args: Any, **kwargs: Any) -> Any:
            many = len(args[1]) if name.endswith("_many") and len(args) > 1 else None
            tally.record(operation, many)
            result = attribute(*args, **kwargs)
            if after is not None:
                after(name, args, kwargs)
            return result

        self.__dict__[name] = call  # later lookups find it without __getattr__
        return call


def _watch_job_done(tally: Tally) -> Callable[[str, tuple[Any, ...], dict[str, Any]], None]:
    def after(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (args[0] if args else kwargs.get("table")) != layout.JOBS_TABLE:
            return
        if method == "merge":
            changed = [args[3] if len(args) > 3 else kwargs.get("properties", {})]
        elif method == "batch":  # a job's state changes with its catalogue index rows
            operations = args[2] if len(args) > 2 else kwargs.get("operations", [])
            changed = [op.properties for op in operations if not is_index_row(op.row_key)]
        else:
            return
        if any(properties.get("state") == "done" for properties in changed):
            tally.mark_done()

    return after


def counted(storage: Storage, tally: Tally, queues: Any = None) -> Storage:
    """``storage`` with counting stores (``queues`` replaces the counting queue proxy).

    Closing the result does not close ``storage``: its owner does.
    """
    return Storage(
        queues=queues if queues is not None else Counting(storage.queues, "queues", tally),
        records=Counting(storage.records, "records", tally, _watch_job_done(tally)),
        blobs=Counting(storage.blobs, "blobs", tally),
        description=storage.description,
    )
