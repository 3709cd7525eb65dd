"""Reads shared between viewers (runner/cli/dashboard/shared.py): one read per key per
max age whoever asks, viewers of one key waiting for the one read in progress, the last
good value kept (and marked) when a read fails, and a bounded number of keys."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import pytest

from checkpoint.clock import FakeClock
from checkpoint.errors import JobNotFound, Unavailable
from runner.cli.dashboard.shared import SharedReads


@dataclass(frozen=True)
class Value:
    key: str
    number: int
    error: str | None = None


class Reader:
    """Reads ``Value(key, n)``, n counting the reads; fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.failing: Exception | None = None

    def __call__(self, key: str) -> Value:
        self.reads.append(key)
        if self.failing is not None:
            raise self.failing
        return Value(key, len(self.reads))


def _shared(reader: Reader, clock: FakeClock, keys: int = 64) -> SharedReads[str, Value]:
    return SharedReads(
        reader, lambda value, error: replace(value, error=error), 2.0, clock.monotonic, keys
    )


def test_many_viewers_within_the_max_age_cost_one_read():
    reader, clock = Reader(), FakeClock()
    shared = _shared(reader, clock)

    # Given 50 viewers asking twice a second, from 0 s to 2 s
    seen = set()
    for _ in range(5):
        for _ in range(50):
            seen.add(shared.get("all"))
        clock.advance(0.5)

    # Then the store was read twice: at the start, and once the first read was 2 s old
    assert reader.reads == ["all", "all"]
    assert seen == {Value("all", 1), Value("all", 2)}


def test_each_key_is_read_on_its_own():
    reader, clock = Reader(), FakeClock()
    shared = _shared(reader, clock)

    assert shared.get("a") == Value("a", 1)
    assert shared.get("b") == Value("b", 2)
    assert shared.get("a") == Value("a", 1)
    assert reader.reads == ["a", "b"]


class SlowFirstRead:
    """Reads ``Value(key, n)``; the first read waits until :attr:`release` is set."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.reads: list[str] = []

    def __call__(self, key: str) -> Value:
        self.reads.append(key)
        if len(self.reads) == 1:
            self.started.set()
            self.release.wait(10)
        return Value(key, len(self.reads))

    def shared(self) -> SharedReads[str, Value]:
        return SharedReads(self, lambda v, e: v, 2.0, FakeClock().monotonic)


def test_viewers_of_one_key_wait_for_the_read_in_progress():
    slow = SlowFirstRead()
    shared = slow.shared()
    got: list[Value] = []
    first = threading.Thread(target=lambda: got.append(shared.get("all")))
    first.start()
    assert slow.started.wait(10)
    others = [threading.Thread(target=lambda: got.append(shared.get("all"))) for _ in range(5)]
    for thread in others:
        thread.start()
    slow.release.set()
    for thread in [first, *others]:
        thread.join(10)

    assert slow.reads == ["all"]
    assert got == [Value("all", 1)] * 6


def test_a_failed_read_keeps_the_last_value_marked_and_is_not_retried_at_once():
    reader, clock = Reader(), FakeClock()
    shared = _shared(reader, clock)
    shared.get("all")

    # When the store fails once the value is old
    reader.failing = Unavailable("the store is out of reach")
    clock.advance(2)
    stale = shared.get("all")

    # Then the last value comes back, saying why it is old; no viewer reads again at once
    assert stale == Value("all", 1, error="the store is out of reach")
    assert shared.get("all") is stale and len(reader.reads) == 2

    # and once the store answers again, the next read is fresh
    reader.failing = None
    clock.advance(2)
    assert shared.get("all") == Value("all", 3)


def test_a_failed_first_read_is_raised():
    reader, clock = Reader(), FakeClock()
    reader.failing = JobNotFound("no job 'x'")
    shared = _shared(reader, clock)

    with pytest.raises(JobNotFound):
        shared.get("x")
    with pytest.raises(JobNotFound):
        shared.get("x")
    assert reader.reads == ["x", "x"]


def test_expire_reads_every_key_again_at_its_next_get():
    reader, clock = Reader(), FakeClock()
    shared = _shared(reader, clock)
    shared.get("a")
    shared.get("b")

    shared.expire()

    assert shared.get("a") == Value("a", 3) and shared.get("b") == Value("b", 4)
    assert shared.get("a") == Value("a", 3)


def test_a_read_begun_before_an_expiry_is_not_kept():
    # Given a read of the store in progress (a refresh) when an action changes the store
    slow = SlowFirstRead()
    shared = slow.shared()
    got: list[Value] = []
    refresh = threading.Thread(target=lambda: got.append(shared.get("all")))
    refresh.start()
    assert slow.started.wait(10)

    # When the action expires the reads and the refresh then ends
    shared.expire()
    slow.release.set()
    refresh.join(10)

    # Then the refresh's viewer has what it read, but the next viewer (the page after
    # the action) reads the store again instead of getting the value from before it
    assert got == [Value("all", 1)]
    assert shared.get("all") == Value("all", 2)
    assert shared.get("all") == Value("all", 2) and len(slow.reads) == 2


def test_keys_are_bounded_the_least_recently_used_read_again():
    reader, clock = Reader(), FakeClock()
    shared = _shared(reader, clock, keys=2)
    shared.get("a")
    shared.get("b")
    shared.get("c")  # "a" goes

    assert shared.get("b") == Value("b", 2)
    assert shared.get("a") == Value("a", 4)
