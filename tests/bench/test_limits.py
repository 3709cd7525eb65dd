"""The limits benchmark's arithmetic (tests/bench/limits.py): starts per second over the
steady part, and how many chunks ran at once, from the chunks' spans."""

from __future__ import annotations

import pytest

from tests.bench.limits import running_at_once, steady_rate, within


def test_the_steady_rate_leaves_out_the_first_seconds_burst():
    burst = [(0.0, 0.0)] * 100  # a second's tokens at once
    steady = [(2.0 + n / 10, 2.0 + n / 10) for n in range(51)]  # then 10 a second
    assert steady_rate(burst + steady) == pytest.approx(10)


def test_running_at_once_is_sampled_over_the_steady_part_and_the_most_is_exact():
    # Two at a time for 4 s, then a moment of three.
    spans = [(float(t), t + 1.0) for t in range(5) for _ in range(2)] + [(4.5, 4.6)]
    median, most = running_at_once(spans)
    assert (median, most) == (2, 3)
    assert within(19, 20) == "met" and within(17.9, 20) == "NOT met"
