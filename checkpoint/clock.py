"""Time, injected: the real clock and a fake one tests advance instead of sleeping.

Visibility, TTL, lease renewal and backoff all read time through a :class:`Clock`, so
their logic is tested without real sleeps (tenacity's ``sleep=`` and huey's ``now=``
habit). Wall time (:meth:`Clock.now`) stamps storage records and message times;
monotonic time (:meth:`Clock.monotonic`) measures intervals, immune to clock steps.
"""

from __future__ import annotations

import functools
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What the code asks of time."""

    def now(self) -> datetime:
        """Current wall time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Block until ``event`` is set or ``seconds`` pass; True if the event is set."""
        ...


def utc_text(when: datetime) -> str:
    """``when`` as every output shows a time: ISO 8601 in UTC ending in ``Z``, to the
    microsecond (``2026-11-25T17:19:52.564877Z``)."""
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


class SystemClock:
    """The real clock.

    ``now`` and ``monotonic`` are the standard functions themselves (``now`` bound to
    UTC), not methods wrapping them: the engine reads the clock about 15 times per chunk,
    and a read enters no Python frame of ours.
    """

    now = functools.partial(datetime.now, UTC)
    monotonic = staticmethod(time.monotonic)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


EPOCH_START = datetime(2030, 1, 1, tzinfo=UTC)


class FakeClock:
    """A clock that moves only when told to: ``advance``, ``sleep`` or ``wait``.

    ``sleep`` and an unset ``wait`` advance the clock by the time asked and return at
    once, recording each interval in :attr:`sleeps`, so a loop under test runs at full
    speed while seeing time pass as it would in production.
    """

    def __init__(self, start: datetime = EPOCH_START):
        self._lock = threading.Lock()
        self._wall = start
        self._mono = 1_000.0
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (>= 0)."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        with self._lock:
            self._wall += timedelta(seconds=seconds)
            self._mono += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.sleep(seconds)
        return event.is_set()

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now().isoformat()})"
