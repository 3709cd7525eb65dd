"""The metrics-scrape benchmark still runs: both setups on a tiny job, embedded.

Real ``runner start`` processes (as the benchmark runs them), two workers in place of
four and a few scrapes. Nothing here asserts a time: only that each setup served every
chunk's metrics and that the report's rows say what was measured.
"""

from __future__ import annotations

from tests.bench.metrics import run


def test_both_setups_are_run_scraped_and_reported():
    rows = run(workers=2, chunks=6, scrapes=3)

    assert rows[0].startswith("| setup | one scrape, ms")
    setups = [row.split("|")[1].strip() for row in rows[2:]]
    assert setups == ["--workers 2", "--workers 1 (reference)"]
    for row in rows[2:]:
        _, _, times, served, samples, _ = row.split("|")
        median = float(times.split()[0])
        assert median > 0 and int(served.replace(",", "")) > 1000
        assert int(samples.replace(",", "")) > 50
