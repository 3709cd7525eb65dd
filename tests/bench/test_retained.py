"""Keeps the retained-jobs benchmark (tests/bench/retained.py) running: a small run on
the embedded store, whose catalogue filler is written and removed."""

from __future__ import annotations

from checkpoint import layout
from checkpoint.backends import open_storage
from tests.bench import retained


def test_a_small_run_counts_a_job_beside_few_and_many_retained_jobs(tmp_path, capsys):
    retained.main(["--backend", "embedded", "--retained", "120", "--chunks", "300"])

    text = capsys.readouterr().out
    assert "| embedded | 10 |" in text and "| embedded | 120 |" in text


def test_the_filler_is_removed_after_a_run(tmp_path):
    location = str(tmp_path / "store")
    with open_storage(location) as storage:
        rows = retained.fill(storage, 150)
        assert len(list(storage.records.query(layout.JOBS_TABLE, layout.JOBS_PARTITION))) == 150
        retained.empty(storage, rows)
        assert list(storage.records.query(layout.JOBS_TABLE, layout.JOBS_PARTITION)) == []
