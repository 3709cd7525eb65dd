"""Keeps the dashboard's benchmark (tests/bench/dashboard.py) running: a small store on
the embedded backend, one run of each measurement."""

from __future__ import annotations

from pathlib import Path

from checkpoint.backends import open_storage
from tests.bench.dashboard import measure


def test_the_benchmark_counts_each_page_and_the_same_per_page_whatever_the_size(tmp_path: Path):
    location = str(tmp_path / "store")
    with open_storage(location) as storage:
        found = {m.what: m for m in measure(storage, location, 2_000, runs=1)}

    big, small = "2,000-chunk job page refresh", "1,000-chunk job page refresh"
    (big_page,) = [m for what, m in found.items() if big in what]
    (small_page,) = [m for what, m in found.items() if small in what]
    assert big_page.requests == small_page.requests > 0
    assert found["dashboard: jobs page within the interval (shared)"].requests == 0
    status = found["`runner status --json` (all jobs)"]
    assert found["dashboard: jobs page refresh"].requests == status.requests
