"""The lease sizing rule (runner/worker/leases/sizing.py): the lateness histogram (its
percentiles, merging, bounds and text form) and the lease it leads to (grown at once
on a lost lease or a slower store, shrunk slowly, within bounds)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.worker.leases.lease import end_margin_seconds
from runner.worker.leases.sizing import (
    BUCKETS_SECONDS,
    DEFAULT_BOUNDS,
    MARGIN,
    MAX_SAMPLES,
    MIN_SAMPLES,
    Lateness,
    LeaseBounds,
    needed_lease_seconds,
    next_lease_seconds,
)


def _seen(*late: float, times: int = 1) -> Lateness:
    lateness = Lateness()
    for _ in range(times):
        for seconds in late:
            lateness = lateness.observe(seconds)
    return lateness


# --------------------------------------------------------------------------- lateness


def test_a_percentile_is_the_upper_bound_of_the_bucket_that_reaches_it():
    # 998 renewals of 30 ms and 2 of 4 s: the 99.9th percentile sees the slow ones
    lateness = _seen(0.03, times=998).merge(_seen(4.0, times=2))
    assert lateness.samples == 1000
    assert lateness.percentile_seconds(0.5) == 0.05
    assert lateness.percentile_seconds(0.998) == 0.05
    assert lateness.percentile_seconds(0.999) == 5.0


def test_with_few_samples_the_slowest_seen_stands_for_the_high_percentile():
    assert _seen(0.01, 0.01, 1.5).percentile_seconds(0.999) == 2.0
    assert Lateness().percentile_seconds(0.999) == 0.0
    for fraction in (0, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            Lateness().percentile_seconds(fraction)


def test_early_or_garbled_renewals_count_as_on_time_and_huge_ones_in_the_last_bucket():
    assert _seen(-3.0, math.nan).counts[0] == 2
    huge = _seen(1e9)
    assert huge.counts[-1] == 1 and huge.percentile_seconds(0.999) == BUCKETS_SECONDS[-2]


def test_merging_adds_what_each_worker_saw():
    one, other = _seen(0.01, 0.2), _seen(0.2, 7.0)
    merged = one.merge(other)
    assert merged.samples == 4
    assert merged == other.merge(one)
    assert merged.percentile_seconds(0.999) == 7.5


def test_past_its_largest_size_every_count_is_halved():
    full = Lateness((MAX_SAMPLES,) + (0,) * (len(BUCKETS_SECONDS) - 1))
    assert full.observe(5.0).counts[0] == MAX_SAMPLES // 2
    assert full.observe(5.0).samples <= MAX_SAMPLES


def test_the_text_form_round_trips_and_anything_else_says_what_is_wrong():
    lateness = _seen(0.01, 0.3, 12.0)
    assert Lateness.decode(lateness.encode()) == lateness
    for text, says in [
        ("", "another encoding"),
        ("lateness/2:1,2", "another encoding"),
        ("lateness/1:1,x", "not whole numbers"),
        ("lateness/1:1,2,3", "buckets"),
        ("lateness/1:" + ",".join(["-1"] * len(BUCKETS_SECONDS)), "negative"),
    ]:
        with pytest.raises(ValueError, match=says):
            Lateness.decode(text)


@given(st.lists(st.floats(min_value=0, max_value=1e4), max_size=200))
def test_a_percentile_is_never_below_that_fraction_of_the_samples(late: list[float]):
    lateness = _seen(*late)
    for fraction in (0.5, 0.9, 0.999):
        bound = lateness.percentile_seconds(fraction)
        below = sum(1 for seconds in late if seconds <= bound)
        assert below >= fraction * len(late) or bound == BUCKETS_SECONDS[-2]


# --------------------------------------------------------------------------- the lease


def test_a_healthy_store_gets_the_lower_bound():
    assert needed_lease_seconds(_seen(0.03, times=500)) == DEFAULT_BOUNDS.low_seconds


def test_the_need_covers_the_high_percentile_with_margin_in_the_end_margin():
    # Renewals up to 7 s late (a store answering after 4-7 s)
    lateness = _seen(0.05, times=900).merge(_seen(7.0, times=100))
    lease = needed_lease_seconds(lateness)
    # Then the lease's end margin covers 1.5 x 7.5 s, and a lease 1 % shorter would not
    assert end_margin_seconds(lease) >= MARGIN * 7.5
    assert end_margin_seconds(lease * 0.99) < MARGIN * 7.5
    assert lease == pytest.approx(MARGIN * 7.5 / 0.3, abs=0.02)


def test_a_need_past_the_upper_bound_gets_the_upper_bound():
    assert needed_lease_seconds(_seen(200.0)) == DEFAULT_BOUNDS.high_seconds


def test_a_lost_lease_doubles_the_lease_at_once():
    assert next_lease_seconds(10.0, Lateness(), lost=1) == 20.0
    assert next_lease_seconds(400.0, Lateness(), lost=3) == DEFAULT_BOUNDS.high_seconds


def test_a_slower_store_grows_the_lease_at_once():
    slow = _seen(7.0, times=5)
    assert next_lease_seconds(10.0, slow, lost=0) == needed_lease_seconds(slow)


def test_a_faster_store_shrinks_the_lease_a_tenth_a_step_down_to_the_need():
    fast = _seen(0.02, times=MIN_SAMPLES)
    steps = [60.0]
    while steps[-1] > DEFAULT_BOUNDS.low_seconds:
        steps.append(next_lease_seconds(steps[-1], fast, lost=0))
    assert steps[1] == pytest.approx(54.0)
    assert all(b >= a * 0.9 - 1e-9 for a, b in zip(steps, steps[1:], strict=False))
    assert steps[-1] == DEFAULT_BOUNDS.low_seconds and len(steps) == 19


def test_too_few_renewals_shrink_nothing():
    assert next_lease_seconds(60.0, _seen(0.02, times=MIN_SAMPLES - 1), lost=0) == 60.0


def test_a_lease_out_of_its_bounds_is_brought_back_in():
    bounds = LeaseBounds(5.0, 50.0)
    assert next_lease_seconds(1.0, Lateness(), lost=0, bounds=bounds) == 5.0
    assert next_lease_seconds(900.0, Lateness(), lost=0, bounds=bounds) == 50.0
    # and from there a fast store shrinks it as from any other lease
    assert next_lease_seconds(900.0, _seen(0.01, times=50), lost=0, bounds=bounds) == 45.0


@pytest.mark.parametrize("low, high", [(0, 10), (-1, 10), (20, 10), (10, math.inf)])
def test_bounds_that_cannot_be_are_refused(low: float, high: float):
    with pytest.raises(ValueError, match="lease bounds"):
        LeaseBounds(low, high)


@given(
    st.floats(min_value=0, max_value=1e5),
    st.lists(st.floats(min_value=0, max_value=1e3), max_size=50),
    st.integers(min_value=0, max_value=5),
)
def test_the_next_lease_is_always_within_its_bounds(current: float, late: list[float], lost: int):
    lease = next_lease_seconds(current, _seen(*late), lost)
    assert DEFAULT_BOUNDS.low_seconds <= lease <= DEFAULT_BOUNDS.high_seconds
    if lost:
        assert lease >= min(DEFAULT_BOUNDS.high_seconds, 2 * DEFAULT_BOUNDS.clamp(current))
