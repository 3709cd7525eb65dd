"""Retry backoff: exponential, capped, jittered, whole seconds; one pure function."""

from __future__ import annotations

import random

import pytest

from jobs.backoff import Backoff, compute_backoff


def _waits(policy: Backoff, failures: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return [compute_backoff(policy, n, rng) for n in range(1, failures + 1)]


def test_without_jitter_the_wait_doubles_up_to_the_cap():
    policy = Backoff(first_seconds=5, multiplier=2, max_seconds=60, jitter=0)
    assert _waits(policy, 7) == [5, 10, 20, 40, 60, 60, 60]


def test_default_policy_starts_at_about_five_seconds_and_caps_at_five_minutes():
    policy = Backoff(jitter=0)
    assert compute_backoff(policy, 1) == 5
    assert compute_backoff(policy, 30) == 300


def test_waits_are_whole_seconds():
    policy = Backoff(first_seconds=0.3, multiplier=1.7, max_seconds=100, jitter=0.5)
    for wait in _waits(policy, 20):
        assert type(wait) is int


def test_jitter_spreads_each_wait_below_the_full_value():
    policy = Backoff(first_seconds=100, multiplier=2, max_seconds=1000, jitter=0.5)
    rng = random.Random(3)
    seen = {compute_backoff(policy, 1, rng) for _ in range(500)}
    assert min(seen) >= 50 and max(seen) <= 100
    assert len(seen) > 20  # really spread, not one value


def test_full_jitter_may_wait_nothing_but_never_less():
    policy = Backoff(first_seconds=10, multiplier=2, max_seconds=10, jitter=1)
    rng = random.Random(5)
    assert all(0 <= compute_backoff(policy, 3, rng) <= 10 for _ in range(500))


def test_same_random_source_gives_same_waits():
    policy = Backoff()
    assert _waits(policy, 10, seed=42) == _waits(policy, 10, seed=42)


def test_zero_first_wait_retries_at_once():
    assert _waits(Backoff(first_seconds=0, max_seconds=0), 5) == [0, 0, 0, 0, 0]


def test_many_failures_do_not_overflow():
    assert compute_backoff(Backoff(jitter=0), 10_000) == 300
    assert compute_backoff(Backoff(jitter=0), 10**9) == 300


def test_a_steep_multiplier_does_not_overflow_either():
    policy = Backoff(first_seconds=1, multiplier=1e6, max_seconds=3600, jitter=0)
    assert _waits(policy, 4) == [1, 3600, 3600, 3600]
    assert compute_backoff(policy, 10_000) == 3600


def test_failures_count_from_one():
    with pytest.raises(ValueError, match="from 1"):
        compute_backoff(Backoff(), 0)


@pytest.mark.parametrize(
    "settings",
    [
        {"first_seconds": -1},
        {"first_seconds": 10, "max_seconds": 5},
        {"multiplier": 0.5},
        {"jitter": -0.1},
        {"jitter": 1.5},
    ],
)
def test_invalid_policies_are_refused(settings):
    with pytest.raises(ValueError, match="Backoff needs"):
        Backoff(**settings)


def test_policy_is_frozen_data():
    policy = Backoff()
    with pytest.raises(AttributeError):
        policy.first_seconds = 1  # type: ignore[misc]
    assert policy == Backoff()
