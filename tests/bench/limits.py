"""Shared limits measured with real worker processes -> "Shared limits" in BENCHMARKS.md.

``python -m tests.bench.limits [--runs 3] [--quick] [--backend ...] [--output BENCHMARKS.md]``

For each backend, ``runner start --workers 4 --burst`` (four worker processes, the real
command line) serves a job of each type of :mod:`tests.bench.limit_jobs`, runs
interleaved:

- *unlimited*: trivial chunks, no limit: how fast this backend starts chunks here at
  all (the reference measured in the same run);
- *rate*: trivial chunks under the class's ``rate_limit = "100/s"``, set by hand with
  ``runner limit`` as a user would: to 100/s, or, when this backend's unlimited
  reference (first run) is under 110 chunks/s, to the highest of 50, 20 and 10/s it
  exceeds by 10 % (the report says so): a limit above what the backend can reach
  measures nothing;
- *running*: chunks of 1 s (2 s on Azurite, whose unlimited rate here is lower) under
  ``max_running = 20``, with 4 x 8 = 32 chunk slots, so the limit, not the slots,
  holds them back.

Each chunk logs its start and end; the achieved rate is the starts per second over the
steady part (from 2 s after the first start, past the first second's burst, to the last
start); the number running at once is sampled every 10 ms over the same part from those
spans (a chunk holds its slot a little longer than its ``process`` runs: claim before,
done mark after). Figures are medians of the runs, min-max in brackets.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from checkpoint.backends import open_storage
from jobs.job import ChunkedJob
from jobs.submit import submit
from tests import azurite as azurite_process
from tests.bench.limit_jobs import RateBench, RunningBench, Spanned
from tests.bench.report import LoadSampler, machine_line, spread, write_section

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("embedded", "azurite")
WORKERS = 4
CONCURRENCY = 8
#: Chunks per job: about 12 s at 100/s, and 15 s at 20 running of 1 s.
RATE_CHUNKS = {"embedded": 1_200, "azurite": 600}
RUNNING_CHUNKS = {"embedded": 300, "azurite": 150}
QUICK = {"rate": 500, "running": 60}
#: Seconds a chunk of the running job takes: 20 running then need 20 (embedded) or
#: 10 (Azurite) chunks started a second, well within what each backend reaches here.
RUNNING_SECONDS = {"embedded": 1.0, "azurite": 2.0}
STEADY_AFTER_SECONDS = 2.0
SAMPLE_SECONDS = 0.01
#: The rate limit measured, and lower ones for a backend that cannot start 10 % more
#: than it unlimited: a limit above what the backend reaches measures nothing.
RATES_PER_SECOND = (100, 50, 20, 10)
CHILD_TIMEOUT_SECONDS = 600


@dataclass
class Figures:
    unlimited: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    running_median: list[float] = field(default_factory=list)
    running_max: list[int] = field(default_factory=list)
    limit_per_second: float = 100.0


def runner(location: str, *args: str) -> None:
    """The ``runner`` command line, as a user runs it (loopback storage only)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RUNNER_STORAGE", None)
    command = [sys.executable, "-c", "from runner.cli.entry import main; main()", *args]
    done = subprocess.run(
        [*command, "--storage", location],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        raise RuntimeError(f"runner {' '.join(args)} exited {done.returncode}: {done.stderr}")


def run_job(
    location: str, cls: type[ChunkedJob], chunks: int, seconds: float
) -> list[tuple[float, float]]:
    """Submit a job of ``cls`` and serve it with 4 burst workers; each chunk's span."""
    with tempfile.TemporaryDirectory(prefix="bench-spans-") as spans:
        with open_storage(location) as storage:
            params = {"chunks": chunks, "seconds": seconds, "spans": spans}
            submit(cls, params, storage=storage)
        runner(
            location,
            "start",
            cls.job_type(),
            "--workers",
            str(WORKERS),
            "--concurrency",
            str(CONCURRENCY),
            "--burst",
        )
        found = [
            tuple(float(value) for value in line.split())
            for path in Path(spans).glob("*.txt")
            for line in path.read_text().splitlines()
        ]
    if len(found) != chunks:
        raise RuntimeError(f"{cls.__name__}: {len(found)} of {chunks} chunks logged")
    return sorted((start, end) for start, end in found)


def steady_rate(spans: list[tuple[float, float]], after: float = STEADY_AFTER_SECONDS) -> float:
    """Starts per second from ``after`` s past the first start to the last start."""
    starts = [start for start, _ in spans]
    steady = [start for start in starts if start >= starts[0] + after]
    if len(steady) < 2:
        return (len(starts) - 1) / max(starts[-1] - starts[0], 1e-9)
    return (len(steady) - 1) / (steady[-1] - steady[0])


def running_at_once(spans: list[tuple[float, float]]) -> tuple[float, int]:
    """Median running over the steady part (sampled), and the most ever at once."""
    starts = [start for start, _ in spans]
    begin, end = starts[0] + STEADY_AFTER_SECONDS, starts[-1]
    samples = []
    moment = begin
    while moment <= end:
        samples.append(sum(1 for start, stop in spans if start <= moment < stop))
        moment += SAMPLE_SECONDS
    events = sorted([(start, 1) for start, _ in spans] + [(stop, -1) for _, stop in spans])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return statistics.median(samples) if samples else 0.0, most


def measure(backend: str, location: str, runs: int, quick: bool, figures: Figures) -> None:
    rate_chunks = QUICK["rate"] if quick else RATE_CHUNKS[backend]
    running_chunks = QUICK["running"] if quick else RUNNING_CHUNKS[backend]
    for number in range(runs):
        unlimited = steady_rate(run_job(location, Spanned, rate_chunks, 0), after=0.5)
        figures.unlimited.append(unlimited)
        if number == 0:
            figures.limit_per_second = next(
                (rate for rate in RATES_PER_SECOND if rate * 1.1 <= unlimited),
                RATES_PER_SECOND[-1],
            )
            # Set by hand, as a user would while the job runs (the class says 100/s).
            runner(location, "limit", RateBench.queue, f"{figures.limit_per_second:g}/s")
        rate = steady_rate(run_job(location, RateBench, rate_chunks, 0))
        figures.rate.append(rate)
        spans = run_job(location, RunningBench, running_chunks, RUNNING_SECONDS[backend])
        median, most = running_at_once(spans)
        figures.running_median.append(median)
        figures.running_max.append(most)
        print(
            f"{backend} run {number + 1}: unlimited {unlimited:.1f}/s, rate {rate:.1f}/s "
            f"(limit {figures.limit_per_second:g}/s), running median {median:g} max {most}",
            flush=True,
        )


def run(backends: list[str], runs: int, quick: bool) -> dict[str, Figures]:
    results: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as scratch:
        for backend in backends:
            if backend == "azurite":
                with azurite_process.start() as server:
                    results[backend] = Figures()
                    measure(backend, server.connection_string, runs, quick, results[backend])
            else:
                results[backend] = Figures()
                location = str(Path(scratch) / "store")
                measure(backend, location, runs, quick, results[backend])
    return results


def within(value: float, target: float) -> str:
    return "met" if abs(value - target) <= 0.1 * target else "NOT met"


def report(results: dict[str, Figures], runs: int, load: str, command: str) -> list[str]:
    lines = [
        machine_line(),
        load,
        f"Command: {command}. Median of {runs} run(s), min-max in brackets.",
        "",
        f"`runner start --workers {WORKERS} --concurrency {CONCURRENCY} --burst` (four worker "
        "processes) serves each job; each chunk logs its start and end. Rate: starts per "
        f"second from {STEADY_AFTER_SECONDS:g} s after the first start (past the first second's "
        "burst) to the last start. Running at once: sampled every 10 ms over the same part "
        "from the chunks' `process` spans (1 s each on embedded, 2 s on Azurite; "
        f"{WORKERS} x "
        f"{CONCURRENCY} = {WORKERS * CONCURRENCY} slots against a limit of 20). Embedded: one "
        f"store directory on local disk. Azurite {azurite_process.installed_version()}, disk "
        "persistence, on loopback, sharing the 2 cores; queues at most "
        f"{RATE_CHUNKS['azurite']:,} messages deep (Azurite slows with depth).",
        "",
        "### Targets (each within ±10 %)",
        "",
    ]
    for backend, figures in results.items():
        limit = figures.limit_per_second
        rate = statistics.median(figures.rate)
        running = statistics.median(figures.running_median)
        note = (
            ""
            if limit == 100
            else f" (measured at {limit:g}/s: unlimited, this backend started only "
            f"{figures.unlimited[0]:.0f} chunks/s in the first run here, under the "
            "110/s a 100/s limit needs to show)"
        )
        lines.append(
            f"- {backend}: rate {rate:.1f}/s against {limit:g}/s: {within(rate, limit)}{note}."
        )
        lines.append(
            f"- {backend}: running at once {running:g} against 20: {within(running, 20)}; "
            f"most ever at once {max(figures.running_max)}."
        )
    lines += [
        "",
        "### Figures",
        "",
        "| backend | unlimited chunks started/s | rate limit | achieved starts/s | running limit "
        "| running at once (median of samples) | most at once |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend, figures in results.items():
        lines.append(
            f"| {backend} | {spread(figures.unlimited, 1)} | {figures.limit_per_second:g}/s "
            f"| {spread(figures.rate, 1)} | 20 | {spread(figures.running_median, 1)} "
            f"| {max(figures.running_max)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (3; quick: 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small jobs, 1 run")
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    backends = args.backend or list(BACKENDS)
    sampler = LoadSampler("its 4 worker processes and Azurite")
    sampler.start()
    began = time.monotonic()
    results = run(backends, runs, args.quick)
    command = f"`make bench` (`python -m tests.bench.limits --runs {runs}`)"
    body = report(results, runs, sampler.stop(), command)
    body.append("")
    body.append(f"The whole benchmark took {time.monotonic() - began:.0f} s.")
    print("\n".join(body))
    if args.output:
        write_section(args.output, "Shared limits", body)


if __name__ == "__main__":
    main()
