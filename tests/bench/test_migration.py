"""The migration benchmark's pure parts: the report's figures and the memory sampler.

No Spark here (the benchmark itself runs for many minutes; the sample's own test runs
the job and the one-shot run): fake timings for the report, and a small Python child
with a grandchild for the sampler. Nothing asserts a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from samples.migration.generate import Generated
from tests.bench import migration, migration_report
from tests.bench.migration_report import Pair, Timed
from tests.bench.report import load_line
from tests.bench.rss import ProcessPeak, TreePeaks, TreeSampler, descendants, memory_kib

MIB = 1024


def _peaks(python_mib: int, jvm_mib: int, cpu_seconds: float = 100.0) -> TreePeaks:
    # CPU: 2 s in Python, 1 s in spark-submit's launcher JVM, the rest in the Spark JVM
    root = ProcessPeak(100, "runner", "python runner start", python_mib * MIB, 2.0)
    jvm = ProcessPeak(
        101,
        "java",
        "java -cp x org.apache.spark.deploy.SparkSubmit",
        jvm_mib * MIB,
        cpu_seconds - 3.0,
    )
    launcher = ProcessPeak(102, "java", "java org.apache.spark.launcher.Main", 30 * MIB, 1.0)
    return TreePeaks(root, {101: jvm, 102: launcher}, (python_mib + jvm_mib) * MIB)


def _pairs(chunked: list[float], plain: list[float]) -> list[Pair]:
    return [
        Pair(
            number,
            Timed(c, _peaks(40 + number, 900 + number, c * 1.5)),
            Timed(p, _peaks(35, 800, p * 1.5)),
        )
        for number, (c, p) in enumerate(zip(chunked, plain, strict=True), 1)
    ]


def test_ratio_is_of_the_medians_not_a_median_of_ratios():
    # Given three runs whose per-run ratios have a different median than the medians'
    pairs = _pairs(chunked=[100.0, 130.0, 110.0], plain=[100.0, 90.0, 80.0])

    # Then the ratio is median chunked (110) / median plain (90)
    assert migration_report.ratio_of_medians(pairs) == 110.0 / 90.0
    assert [round(pair.ratio, 3) for pair in pairs] == [1.0, 1.444, 1.375]


def test_target_line_says_met_or_not_met():
    met = migration_report.target_line(_pairs([114.0], [100.0]))
    missed = migration_report.target_line(_pairs([116.0], [100.0]))
    assert "1.14x: met." in met
    assert "1.16x: **not met**." in missed
    assert "<= 1.15x" in met and "1 run(s)" in met


def test_wall_rows_list_every_run_then_the_medians():
    # Given runs whose trees used 1.5 CPU seconds per wall second, over all their processes
    rows = migration_report.wall_rows(_pairs([120.0, 100.0, 140.0], [100.0, 90.0, 95.0]))
    # Then each row has wall and CPU time, the last the medians and their ratios
    assert rows[2] == "| 1 | 120.0 | 100.0 | 1.20x | 180.0 | 150.0 | 1.20x |"
    assert rows[4] == "| 3 | 140.0 | 95.0 | 1.47x | 210.0 | 142.5 | 1.47x |"
    assert rows[5] == "| **median** | **120.0** | **95.0** | **1.26x** | 180.0 | 142.5 | 1.26x |"


def test_memory_rows_take_the_spark_jvm_not_the_launcher():
    # Given worker trees with a Python process, the Spark JVM and spark-submit's launcher
    pairs = _pairs([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])

    # Then the JVM column is the SparkSubmit JVM's peak, median (min-max) over the runs
    rows = migration_report.memory_rows(pairs)
    assert (
        rows[2] == "| chunked: the worker (`runner start`) | 42 (41-43) | 902 (901-903) "
        "| 944 (942-946) | 944 (942-946) |"
    )
    assert rows[3].startswith("| plain: the one-shot process | 35 (35-35) | 800 (800-800) |")
    summary = migration_report.worker_memory_summary(pairs)
    assert "Python 42 MiB + Spark JVM 902 MiB = 944 MiB" in summary


def test_report_says_what_was_measured_and_how():
    pairs = _pairs([120.0], [100.0])
    args = migration.parse_args(["--quick"])
    data = migration.Input(
        store="/tmp/store",
        generated=Generated(
            "orders-v1", tuple(f"f{n}" for n in range(24)), args.rows, 17_000_000, 90_000, 400
        ),
        params={"files_per_batch": 1},
        chunks=8,
        batches=24,
    )
    lines = migration.report(pairs, data, args, load_line([0.5, 2.0, 1.5], "the runs"))
    text = "\n".join(lines)
    assert lines[0].startswith("Machine: ")
    assert "Load: 1-minute load average 0.50 at the start, 1.50 at the end" in text
    assert (
        "Command: `make bench` (`python -m tests.bench.migration --rows 100000 --runs 1`)" in text
    )
    assert "**8 chunks**" in text and "24 batches" in text
    assert "JVM and SparkSession start-up" in text
    assert "1.20x: **not met**" in text
    assert "nothing read back" in text
    assert "the target is judged at 3 files per batch" in text

    # And one batch per chunk is `make bench`'s other run, the one the target is judged on
    args = migration.parse_args(["--quick", "--files-per-batch", "3"])
    data = replace(data, params={"files_per_batch": 3}, batches=8)
    text = "\n".join(migration.report(pairs, data, args, "Load: ..."))
    assert "Command: `make bench` (`python -m tests.bench.migration --rows 100000 --runs 1 " in text
    assert "--files-per-batch 3`)" in text and "3 files per batch: 8 batches" in text
    assert "**The issue's target is judged here**" in text

    # And any other batch size is a command of its own, not `make bench`
    args = migration.parse_args(["--quick", "--files-per-batch", "2"])
    data = replace(data, params={"files_per_batch": 2}, batches=16)
    text = "\n".join(migration.report(pairs, data, args, "Load: ..."))
    assert "Command: `python -m tests.bench.migration --rows 100000 --runs 1 " in text
    assert "--files-per-batch 2`" in text and "make bench" not in text

    # And so is a worker running several chunks at once, or a larger input
    args = migration.parse_args(
        ["--rows", "8000000", "--files-per-batch", "3", "--concurrency", "2"]
    )
    data = replace(data, params={"files_per_batch": 3}, batches=8)
    text = "\n".join(migration.report(pairs, data, args, "Load: ..."))
    assert "Command: `python -m tests.bench.migration --rows 8000000 --runs 3 " in text
    assert "--files-per-batch 3 --concurrency 2`" in text and "make bench" not in text
    assert "--burst --concurrency 2` (2 chunks at once on its one SparkSession)" in text
    assert "Setting: 8,000,000 rows, chunks of about 1,000,000 rows" in text
    assert "run by hand" in text and "judged here" not in text

    # But one batch per chunk at 8M rows, one chunk at a time, is `make bench`'s too
    args = migration.parse_args(["--rows", "8000000", "--files-per-batch", "3"])
    text = "\n".join(migration.report(pairs, data, args, "Load: ..."))
    assert "Command: `make bench` (`python -m tests.bench.migration --rows 8000000 " in text
    assert "**The issue's target is judged here**" in text
    assert "chunks of about 1,000,000 rows, one batch per chunk" in text


def test_spark_conf_given_to_the_bench_makes_a_section_of_its_own(monkeypatch):
    monkeypatch.delenv("RUNNER_SPARK_CONF", raising=False)
    args = migration.parse_args(
        [
            "--rows",
            "8000000",
            "--files-per-batch",
            "3",
            "--spark-conf",
            '{"spark.driver.memory": "4g", "spark.sql.adaptive.enabled": false}',
        ]
    )
    # Then it is Spark conf strings, as the worker's own option makes them
    assert args.spark_conf == {"spark.driver.memory": "4g", "spark.sql.adaptive.enabled": "false"}
    data = migration.Input(
        store="/tmp/store",
        generated=Generated("orders-v1", ("f0",), 8_000_000, 1_000_000_000, 7_000_000, 400),
        params={"files_per_batch": 3},
        chunks=8,
        batches=8,
    )
    text = "\n".join(migration.report(_pairs([100.0], [100.0]), data, args, "Load: ..."))
    # And the report says both sides had it, by the command that gives it again: not
    # `make bench`'s, and not where the target is judged
    assert (
        "Command: `python -m tests.bench.migration --rows 8000000 --runs 3 --files-per-batch 3 "
        '--spark-conf \'{"spark.driver.memory": "4g", "spark.sql.adaptive.enabled": '
        '"false"}\'`' in text
    )
    assert "make bench" not in text and "judged here" not in text
    assert "with the job's conf plus `spark.driver.memory=4g, spark.sql.adaptive" in text
    assert "both sides with `spark.driver.memory=4g" in text and "run by hand" in text
    assert migration.title(3, 8_000_000, 1, args.spark_conf) == (
        f"{migration.TITLE}, 8,000,000 rows, 3 files per batch, spark.driver.memory=4g, "
        "spark.sql.adaptive.enabled=false"
    )


def test_spark_conf_comes_from_the_environment_and_bad_conf_is_a_usage_error(monkeypatch, capsys):
    # Given RUNNER_SPARK_CONF set where the bench starts: the report must not hide it
    monkeypatch.setenv("RUNNER_SPARK_CONF", '{"spark.driver.memory": "2g"}')
    assert migration.parse_args([]).spark_conf == {"spark.driver.memory": "2g"}
    monkeypatch.setenv("RUNNER_SPARK_CONF", " ")
    assert migration.parse_args([]).spark_conf == {}

    # And conf that is not a JSON object of scalars stops the bench before it starts
    for bad in ("{not json", '["spark.driver.memory"]', '{"spark.driver.memory": [4]}'):
        with pytest.raises(SystemExit) as stopped:
            migration.parse_args(["--spark-conf", bad])
        assert stopped.value.code == 2
        assert "--spark-conf" in capsys.readouterr().err


def test_cache_spills_are_counted_from_the_log_and_reported():
    log = (
        "24/11/24 05:50:01 INFO MemoryStore: Block rdd_4_0 stored as values in memory\n"
        "24/11/24 05:50:02 WARN MemoryStore: Not enough space to cache rdd_4_1 in memory! "
        "(computed 120.0 MiB so far)\n"
        "24/11/24 05:50:02 WARN BlockManager: Persisting block rdd_4_1 to disk instead.\n"
        "24/11/24 05:50:03 WARN MemoryStore: Not enough space to cache rdd_4_2 in memory!\n"
    )
    assert migration_report.cache_spills(log) == 2
    assert migration_report.cache_spills("") == 0

    # Given runs where nothing spilled, then the report says both sides cached in memory
    pairs = _pairs([100.0, 100.0, 100.0], [100.0, 100.0, 100.0])
    assert "fit Spark's memory store on both sides in every run" in (
        migration_report.cache_line(pairs)
    )
    # Given the plain side spilled in two runs, then the report names the side and counts
    pairs[0] = replace(pairs[0], plain=replace(pairs[0].plain, cache_spills=5))
    pairs[2] = replace(pairs[2], plain=replace(pairs[2].plain, cache_spills=3))
    line = migration_report.cache_line(pairs)
    assert "**a persisted frame did not fit Spark's memory store**" in line
    assert "plain in 2 of 3 run(s) (8 blocks in all)" in line and "chunked in" not in line


def test_quick_defaults_and_full_defaults():
    full, quick = migration.parse_args([]), migration.parse_args(["--quick"])
    assert (full.rows, full.runs) == (2_000_000, 3)
    assert (quick.rows, quick.runs) == (migration.QUICK_ROWS, 1)
    assert migration.parse_args(["--rows", "5000", "--runs", "2"]).runs == 2
    assert migration.title(1) == migration.TITLE
    assert migration.title(3) == f"{migration.TITLE}, 3 files per batch"
    assert migration.title(3, 8_000_000, 2) == (
        f"{migration.TITLE}, 8,000,000 rows, 3 files per batch, 2 chunks at once"
    )


def test_sampler_follows_a_child_and_its_grandchild(tmp_path: Path):
    # Given a Python child holding ~60 MiB that starts a grandchild holding ~30 MiB
    ready, held = tmp_path / "ready", tmp_path / "held"
    # The grandchild says when its block is in memory (on a loaded machine that took
    # longer than the 1 s the child once waited), and the child waits for that.
    grandchild = (
        "import pathlib, time; block = bytearray(30 << 20); "
        "block[::4096] = b'x' * len(block[::4096]); "
        f"pathlib.Path({str(held)!r}).touch(); time.sleep(30)"
    )
    child = (
        "import pathlib, subprocess, sys, time\n"
        "block = bytearray(60 << 20); block[::4096] = b'x' * len(block[::4096])\n"
        f"grand = subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
        "deadline = time.monotonic() + 25\n"
        f"while not pathlib.Path({str(held)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(0.6)\n"
        "grand.kill(); grand.wait()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", child])

    # When it is sampled until it exits
    with TreeSampler(process.pid, interval_seconds=0.05) as sampler:
        process.wait(30)
    peaks = sampler.peaks

    # Then the child's peak holds its block, and the grandchild was seen with its own
    assert ready.exists()
    assert peaks.root_kib >= 60 * MIB
    grandchildren = [peak for peak in peaks.descendants.values() if "bytearray(30" in peak.command]
    assert len(grandchildren) == 1 and grandchildren[0].peak_kib >= 30 * MIB
    assert peaks.max_total_kib >= 90 * MIB
    assert peaks.cpu_seconds > 0
    assert peaks.jvm is None and peaks.sum_kib == peaks.root_kib  # no Java in this tree
    assert sampler.live_pids() == []


def test_descendants_and_memory_of_this_process():
    # A sleeping child is found among this process's descendants; a missing pid has none
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])
    try:
        assert child.pid in descendants(os.getpid())
        rss, hwm = memory_kib(os.getpid()) or (0, 0)
        assert 0 < rss <= hwm
    finally:
        child.kill()
        child.wait()
    assert memory_kib(2**22 + 12345) is None
