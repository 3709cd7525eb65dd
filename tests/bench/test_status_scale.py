"""Keeps the status views' benchmark (tests/bench/status_scale.py) running: a small
store on the embedded backend, one run of each view at two sizes."""

from __future__ import annotations

from pathlib import Path

from checkpoint.backends import open_storage
from tests.bench.status_scale import measure, rows_of, verdict


def test_the_default_views_make_the_same_requests_whatever_the_jobs_ended(tmp_path: Path):
    location = str(tmp_path / "store")
    with open_storage(location) as storage:
        found, notes = measure(storage, location, [10, 260], runs=1)

    by_size = {(m.what, m.size): m for m in found}
    for view in ("`runner status`", "`runner status --json`", "dashboard: jobs page refresh"):
        small, large = by_size[(view, 10)], by_size[(view, 260)]
        assert small.requests == large.requests > 0, view
    every = by_size[("`runner status --all --json`", 10)]
    assert every.requests > by_size[("`runner status --json`", 10)].requests
    assert by_size[("`runner status` as a process (start included)", 260)].requests == -1
    assert len(rows_of("embedded", found)) == len(found) and "250 ended jobs" in notes[-1]
    said = verdict("embedded", found)
    per_job = every.requests / 10
    assert f"~{per_job:.0f} requests a job here: ~{per_job * 260:,.0f} at 260 jobs" in said
