"""A bounded map of the most recently used entries, for a long-running worker's caches.

A worker serves jobs for weeks; anything it keeps per job must not grow with the number
of jobs it has ever seen. Entries here are facts that never change once known (a job's
params and type, a planned job's chunk total), so an evicted one is only read again; only
a job deleted and submitted again under its id changes them, and then the caller forgets
the old entry.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LruMap(Generic[K, V]):
    """At most ``size`` entries; the least recently used goes first. Thread-safe."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"size must be >= 1, not {size}")
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def values(self) -> list[V]:
        """The values held, least recently used first (a copy: the map may change)."""
        with self._lock:
            return list(self._entries.values())

    def forget(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
