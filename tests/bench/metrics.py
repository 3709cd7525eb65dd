"""What one scrape of ``runner start --metrics-port`` costs -> a section of BENCHMARKS.md.

``python -m tests.bench.metrics [--workers 4] [--chunks 400] [--scrapes 50]
[--output BENCHMARKS.md]``

Each setup runs a real ``runner start --workers N --metrics-port PORT`` on a fresh
embedded store, serving a job of ``--chunks`` chunks that return at once
(``tests.bench.chunk_jobs:Trivial``), until the endpoint shows every chunk done; then,
with the workers idle, makes ``--scrapes`` GETs of ``/metrics`` one after another, each
timed from the request to its last byte, and notes the bytes and samples served. The
setups, in one run: ``--workers 4`` (the parent reads four processes' files in
prometheus_client's multiprocess mode and sums them) and, as the reference, ``--workers
1`` (the same metrics kept in the serving process's own registry: no files).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.azurite import free_port
from tests.bench.report import LoadSampler, machine_line, write_section
from tests.e2e.processes import ROOT, runner_command, wait_until

JOB = "tests.bench.chunk_jobs:Trivial"
DONE = 'chunkrunner_chunks_done_total{job_type="tests.bench.chunk_jobs:Trivial"}'


def scrape(port: int) -> tuple[float, bytes]:
    """Seconds one GET of the endpoint took, and what it served."""
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        body = answer.read()
    return time.perf_counter() - started, body


def _done(port: int) -> float:
    try:
        _, body = scrape(port)
    except OSError:
        return 0.0  # not listening yet
    for line in body.decode().splitlines():
        if line.startswith(DONE):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def measure(workers: int, chunks: int, scrapes: int, scratch: Path) -> dict[str, float]:
    """One setup: ``workers`` processes run the job, then the endpoint is scraped."""
    store = scratch / f"store-{workers}"
    env = {**os.environ, "RUNNER_STORAGE": str(store), "PYTHONPATH": str(ROOT)}
    params = json.dumps({"chunks": chunks})
    submit = [*runner_command(), "submit", JOB, "--params", params]
    subprocess.run(submit, env=env, check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    log = (scratch / f"start-{workers}.log").open("wb")
    start = subprocess.Popen(
        [*runner_command(), "start", JOB, "--workers", str(workers), "--poll-max", "0.25"]
        + ["--metrics-port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _done(port) >= chunks, f"{chunks} chunks done", timeout=300)
        times, sizes, samples = [], set(), set()
        for _ in range(scrapes):
            seconds, body = scrape(port)
            times.append(seconds * 1000)
            sizes.add(len(body))
            samples.add(sum(not line.startswith("#") for line in body.decode().splitlines()))
        return {
            "median_ms": statistics.median(times),
            "min_ms": min(times),
            "max_ms": max(times),
            "bytes": max(sizes),
            "samples": max(samples),
        }
    finally:
        start.send_signal(signal.SIGTERM)
        start.wait(60)
        log.close()


def run(workers: int, chunks: int, scrapes: int) -> list[str]:
    rows = [
        "| setup | one scrape, ms (median, min-max) | bytes served | samples |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as scratch:
        for setup, count in ((f"--workers {workers}", workers), ("--workers 1 (reference)", 1)):
            found = measure(count, chunks, scrapes, Path(scratch))
            row = (
                f"| {setup} | {found['median_ms']:.2f} ({found['min_ms']:.2f}-"
                f"{found['max_ms']:.2f}) | {found['bytes']:,.0f} | {found['samples']:,.0f} |"
            )
            print(row, flush=True)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=400)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    load = LoadSampler("the workers of each setup running their job, then idle, polling")
    load.start()
    rows = run(args.workers, args.chunks, args.scrapes)
    body = [
        machine_line(),
        load.stop(),
        f"Command: `make bench` (`python -m tests.bench.metrics --workers {args.workers} "
        f"--chunks {args.chunks} --scrapes {args.scrapes}`). Each setup is a real `runner "
        f"start --metrics-port` on a fresh embedded store that ran {args.chunks:,} chunks "
        "returning at once (every chunk counter, storage operation and histogram of a "
        f"worker's life recorded), then {args.scrapes} scrapes of `/metrics` one after "
        "another over loopback HTTP, the workers idle, each timed from request to last "
        "byte (median, min-max). With 4 workers the parent reads and sums their "
        "multiprocess files at each scrape; the reference serves one process's own "
        "registry. The queue counts are sampled every 15 s apart from scrapes: no scrape "
        "waits on the store.",
        "",
        *rows,
    ]
    print("\n".join(body))
    if args.output:
        write_section(args.output, "Metrics: the cost of one scrape", body)


if __name__ == "__main__":
    main()
