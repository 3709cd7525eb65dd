"""The injected clock: the fake one moves only when told, and never backwards."""

from __future__ import annotations

import sys
import threading
from datetime import timedelta

import pytest

from checkpoint.clock import FakeClock, SystemClock


def test_fake_clock_advances_wall_and_monotonic_together():
    clock = FakeClock()
    wall, mono = clock.now(), clock.monotonic()
    clock.advance(2.5)
    assert clock.now() - wall == timedelta(seconds=2.5)
    assert clock.monotonic() - mono == 2.5


def test_fake_clock_refuses_to_go_back():
    with pytest.raises(ValueError, match="cannot go back"):
        FakeClock().advance(-1)


def test_fake_sleep_records_and_advances():
    clock = FakeClock()
    start = clock.monotonic()
    clock.sleep(3)
    clock.sleep(0.5)
    assert clock.sleeps == [3, 0.5]
    assert clock.monotonic() - start == 3.5


def test_fake_wait_returns_at_once_when_event_is_set():
    clock, event = FakeClock(), threading.Event()
    event.set()
    start = clock.monotonic()
    assert clock.wait(event, 10) is True
    assert clock.monotonic() == start


def test_fake_wait_times_out_by_advancing():
    clock, event = FakeClock(), threading.Event()
    start = clock.monotonic()
    assert clock.wait(event, 10) is False
    assert clock.monotonic() - start == 10


def test_system_clock_is_utc_aware_and_monotonic():
    clock = SystemClock()
    assert clock.now().utcoffset() == timedelta(0)
    first = clock.monotonic()
    assert clock.monotonic() >= first


def test_clocks_say_what_they_are():
    assert repr(SystemClock()) == "SystemClock()"
    assert repr(FakeClock()) == "FakeClock(now=2030-01-01T00:00:00+00:00)"


def test_system_clock_reads_run_no_python_code_of_ours():
    # Given the real clock and a profile hook that notes every Python function called
    clock, called = SystemClock(), []

    def note(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_filename)

    # When the time is read both ways
    sys.setprofile(note)
    try:
        clock.now()
        clock.monotonic()
    finally:
        sys.setprofile(None)
    # Then no function of the clock's module ran: a read is the standard function's
    assert not [name for name in called if name.endswith("clock.py")]
