"""Keeps the pipeline-redrive benchmark's report (tests/bench/pipeline_redrive.py) right,
on a demo result made here: its run is the demo's, which test_migration_sample.py runs."""

from __future__ import annotations

import argparse

from samples.migration.bad_rows import BadRows, Planted, RunAgain
from samples.migration.demo import DemoResult
from samples.migration.generate import Generated
from samples.migration.verify import Counts, Verdict
from tests.bench import pipeline_redrive


def result(started_verify: list[int]) -> DemoResult:
    counts = {"orders": Counts(5, "1"), "rejects": Counts(1, "2")}
    bad = BadRows(
        planted=Planted("orders-v1", {"a": b"", "b": b""}),
        differences={0: "a differs", 5: "b differs"},
        run_again=RunAgain(
            started={"stage": [], "transform": [], "verify": started_verify, "publish": []},
            total={"stage": 6, "transform": 6, "verify": 12, "publish": 0},
        ),
        failed_after_seconds=61.4,
        redrive_seconds=7.2,
    )
    return DemoResult(
        "p-transform",
        Generated("orders-v1", ("a", "b"), 10, 100, 5, 1),
        {},
        {},
        None,
        Verdict(counts, counts, counts),
        {},
        pipeline_state="done",
        bad_rows=bad,
    )


def test_the_report_counts_the_chunks_run_again_against_a_rerun():
    args = argparse.Namespace(rows=200_000, files=24, files_per_chunk=4)

    lines = pipeline_redrive.report(result([0, 5]), args, "Load: low.")

    assert "| verify | 12 | 2 (#0, #5) |" in lines
    assert "| stage | 6 | 0 |" in lines
    assert "| **all** | **24** (a rerun from scratch) | **2** |" in lines
    text = "\n".join(lines)
    assert "Chunks run again: **2 of 24** (8%): only verify's failed chunks (exactly those)" in text
    assert "to verify failed 61 s" in text and "to the pipeline done 7 s" in text


def test_the_report_says_when_more_than_the_failed_chunks_ran():
    args = argparse.Namespace(rows=200_000, files=24, files_per_chunk=4)

    text = "\n".join(pipeline_redrive.report(result([0, 1, 5]), args, "Load: low."))

    assert "(NOT only those)" in text
