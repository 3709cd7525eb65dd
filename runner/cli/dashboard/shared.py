"""Reads shared between the dashboard's viewers, so N viewers cost what one does.

Each page asks for a value by key (the snapshot of every job, of one job, a page of a
job's chunks); :class:`SharedReads` reads it at most once per ``max_age_seconds`` per
key, whoever asks and however often, and hands every viewer the same value. Viewers of
one key wait for the one read in progress instead of starting their own. A read that
fails keeps the last good value, marked with the error, for the same time: a store out of
reach is not asked again by every refresh of every viewer. A read begun before an
:meth:`SharedReads.expire` (an action changed the store meanwhile) is handed to its viewer
but not kept: the page shown after the action reads again. Keys are bounded
(:class:`runner.worker.lru_map.LruMap`), so a dashboard open for weeks does not grow.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from checkpoint.errors import RunnerError
from runner.worker.lru_map import LruMap

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Keys kept at most (pages viewed recently); the least recently used is read again.
DEFAULT_KEYS = 64


@dataclass
class _Entry(Generic[V]):
    lock: threading.Lock = field(default_factory=threading.Lock)
    value: V | None = None
    read_at: float = -math.inf


class SharedReads(Generic[K, V]):
    """``read(key)`` at most once per ``max_age_seconds`` per key, the value shared.

    Args:
        read: reads the value of a key from the store.
        stale: the last good value marked with the error of a read that failed.
        max_age_seconds: how long a value is handed out before it is read again.
        monotonic: the time, in seconds that only go forward.
        keys: how many keys are kept.
    """

    def __init__(
        self,
        read: Callable[[K], V],
        stale: Callable[[V, str], V],
        max_age_seconds: float,
        monotonic: Callable[[], float],
        keys: int = DEFAULT_KEYS,
    ):
        self._read = read
        self._stale = stale
        self.max_age_seconds = max_age_seconds
        self._monotonic = monotonic
        self._entries: LruMap[K, _Entry[V]] = LruMap(keys)
        self._lock = threading.Lock()
        #: Counts expiries: a read that saw it change while it ran may predate an action.
        self._expiries = 0

    def get(self, key: K) -> V:
        """The value of ``key``, read now if the one held is older than the max age.

        Raises the read's RunnerError when there is no earlier value to fall back on."""
        entry = self._entry(key)
        with entry.lock:
            now = self._monotonic()
            if entry.value is not None and now - entry.read_at < self.max_age_seconds:
                return entry.value
            expiries = self._expiries
            try:
                value = self._read(key)
            except RunnerError as error:
                if entry.value is None:
                    raise
                value = self._stale(entry.value, str(error))
            # Kept to fall back on either way; fresh only if no action expired it meanwhile
            fresh = expiries == self._expiries
            entry.value, entry.read_at = value, now if fresh else -math.inf
            return value

    def expire(self) -> None:
        """Read every key again at its next :meth:`get` (after an action changed the
        store); values are kept, to fall back on."""
        with self._lock:
            self._expiries += 1
            for entry in self._entries.values():
                entry.read_at = -math.inf

    def _entry(self, key: K) -> _Entry[V]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = _Entry()
                self._entries.put(key, entry)
            return entry
