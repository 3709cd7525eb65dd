"""``checkpoint.retries.Budget``: what is retried, how long it waits, and every way a
budget ends (the policy's limit, a deadline such as a lease's, a stop signal), on a
FakeClock: nothing really sleeps, and the waits are read off ``clock.sleeps``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from checkpoint import retries
from checkpoint.clock import FakeClock
from checkpoint.errors import Conflict, NotFound, StorageError, Throttled, Unavailable
from checkpoint.retries import Budget, RetryPolicy

POLICY = RetryPolicy("test call", first_wait_seconds=0.2, max_wait_seconds=2.0)


def failing(*errors: StorageError, result: str = "done") -> tuple[Callable[[], str], list[int]]:
    """An action raising ``errors`` one per try, then returning ``result``; and its tries."""
    tries: list[int] = []

    def action() -> str:
        tries.append(1)
        if len(tries) <= len(errors):
            raise errors[len(tries) - 1]
        return result

    return action, tries


def test_a_call_that_works_is_made_once_without_waiting():
    clock = FakeClock()
    action, tries = failing()

    assert Budget(POLICY, clock).call(action) == "done"

    assert len(tries) == 1 and clock.sleeps == []


@pytest.mark.parametrize("error", [Throttled("busy"), Unavailable("connection lost")])
def test_transient_trouble_is_tried_again_after_growing_capped_jittered_waits(
    error: StorageError,
):
    clock = FakeClock()
    action, tries = failing(*[error] * 6)

    assert Budget(POLICY, clock).call(action) == "done"

    assert len(tries) == 7
    waits = clock.sleeps
    # first: the first wait plus up to as much jitter; then doubling from twice that,
    # capped at the maximum, each plus up to the first wait of jitter
    assert 0.2 <= waits[0] <= 0.4
    assert 0.4 <= waits[1] <= 0.6
    assert 0.8 <= waits[2] <= 1.0
    assert all(2.0 <= wait <= 2.2 for wait in waits[4:]), waits


@pytest.mark.parametrize("error", [Conflict("changed"), NotFound("gone"), ValueError("bug")])
def test_anything_not_transient_is_raised_at_once(error: Exception):
    clock = FakeClock()
    tries: list[int] = []

    def action() -> None:
        tries.append(1)
        raise error

    with pytest.raises(type(error)):
        Budget(POLICY, clock).call(action)

    assert len(tries) == 1 and clock.sleeps == []


def test_a_non_transient_error_after_a_retry_is_raised_as_it_is():
    clock = FakeClock()
    action, tries = failing(Throttled("busy"), Throttled("busy"), Conflict("changed"))

    with pytest.raises(Conflict):
        Budget(POLICY, clock).call(action)

    assert len(tries) == 3


def test_no_try_starts_after_the_deadline():
    # Given a deadline (a lease's end) 1.5 s away and trouble that does not pass
    clock = FakeClock()
    deadline = clock.monotonic() + 1.5
    action, tries = failing(*[Throttled("busy")] * 50)

    # When the call is made under it
    with pytest.raises(Throttled):
        Budget(POLICY, clock, deadline=lambda: deadline).call(action)

    # Then every try started before the deadline, and none was due after it
    assert clock.monotonic() < deadline
    assert 2 <= len(tries) < 50


def test_a_deadline_moved_by_a_renewal_is_read_afresh_at_each_try():
    clock = FakeClock()
    ends = [clock.monotonic() + 0.1]  # as good as spent, until a renewal moves it

    def action() -> str:
        if len(clock.sleeps) == 0 and ends[0] < clock.monotonic() + 100:
            ends[0] = clock.monotonic() + 100  # the keeper renewed the lease meanwhile
            raise Throttled("busy")
        return "done"

    assert Budget(POLICY, clock, deadline=lambda: ends[0]).call(action) == "done"
    assert len(clock.sleeps) == 1


def test_the_policy_gives_up_after_its_limit():
    clock = FakeClock()
    policy = RetryPolicy("short", first_wait_seconds=0.2, give_up_after_seconds=1.0)
    start = clock.monotonic()
    action, tries = failing(*[Unavailable("down")] * 50)

    with pytest.raises(Unavailable):
        Budget(policy, clock).call(action)

    assert clock.monotonic() - start <= 1.0
    assert 2 <= len(tries) < 50


def test_once_tries_exactly_once():
    clock = FakeClock()
    action, tries = failing(Throttled("busy"))

    with pytest.raises(Throttled):
        retries.once(clock).call(action)

    assert len(tries) == 1 and clock.sleeps == []


def test_a_stopping_worker_makes_no_further_try():
    clock = FakeClock()
    stopping = threading.Event()
    stopping.set()
    action, tries = failing(Throttled("busy"))

    with pytest.raises(Throttled):
        Budget(POLICY, clock, stopping=stopping).call(action)

    assert len(tries) == 1 and clock.sleeps == []


def test_a_stop_during_the_retries_ends_them_after_the_wait_in_progress():
    # Given a worker's start-up retrying a store that does not answer
    clock = FakeClock()
    stopping = threading.Event()
    tries: list[int] = []

    def action() -> None:
        tries.append(1)
        if len(tries) == 3:
            stopping.set()  # the worker is told to stop while its third try fails
        raise Unavailable("down")

    # When it is stopped, no try follows
    with pytest.raises(Unavailable):
        Budget(retries.START_UP, clock, stopping=stopping).call(action)

    assert len(tries) == 3
    # and the waits before were made on the stop signal (clock.wait), not slept blindly
    assert len(clock.sleeps) == 2


def test_each_retry_is_logged_with_its_try_number_and_wait(caplog: pytest.LogCaptureFixture):
    clock = FakeClock()
    action, _ = failing(Throttled("busy"), Throttled("busier"))

    with caplog.at_level(logging.WARNING, logger="checkpoint.retries"):
        Budget(POLICY, clock).call(action, "write c000000000001")

    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("write c000000000001: busy; try 1 failed, next in ")
    assert lines[1].startswith("write c000000000001: busier; try 2 failed, next in ")


def test_without_a_name_the_policy_names_the_call(caplog: pytest.LogCaptureFixture):
    action, _ = failing(Throttled("busy"))

    with caplog.at_level(logging.WARNING, logger="checkpoint.retries"):
        Budget(POLICY, FakeClock()).call(action)

    assert caplog.records[0].getMessage().startswith("test call: busy; try 1 failed")
