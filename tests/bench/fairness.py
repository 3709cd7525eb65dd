"""Time to the first chunk of a small job submitted behind a large one -> a section of
BENCHMARKS.md.

``python -m tests.bench.fairness [--large 10000] [--small 10] [--chunk-ms 0 5]
[--runs 3] [--baseline-ref COMMIT] [--output BENCHMARKS.md]``

Each run: a fresh embedded store in a temp directory; ``runner start
tests.bench.chunk_jobs:Paced --workers 2`` serving it (chunks of ``--chunk-ms``
milliseconds each: 0 returns at once); the large job submitted, and once its planning
is done (its total recorded), the small one, of the same type and queue. Measured from
the small job's ``created_on`` to the earliest ``started_on`` of its chunks (both
stamped by this machine's clock, read from the records once both jobs are done), and
the large job's submit to done. With ``--baseline-ref``, the same runs with the workers
on that commit's code (``git archive`` into a temp directory): the code before windowed
feeding, for comparison.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from io import BytesIO
from pathlib import Path

from checkpoint.backends import open_storage
from checkpoint.records import JobRecord
from checkpoint.store import CheckpointStore
from jobs.job import DEFAULT_FEED_WINDOW
from jobs.submit import submit
from tests import azurite as azurite_process
from tests.bench.chunk_jobs import Paced
from tests.bench.report import LoadSampler, machine_line, spread, write_section
from tests.e2e.processes import ROOT

WORKERS = 2
#: Longest a run may take before it is abandoned as stuck.
RUN_TIMEOUT_SECONDS = 900.0
ENTRY = [sys.executable, "-c", "from runner.cli.entry import main; main()"]


@dataclass(frozen=True)
class Timing:
    """One run: seconds from the small job's submit to its first chunk starting, and
    from the large job's submit to its end."""

    first_chunk_seconds: float
    large_seconds: float


def _wait_for(read: CheckpointStore, job_id: str, ready: str) -> JobRecord:
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        job = read.get_job(job_id)
        if (ready == "planned" and job.total is not None) or job.state == ready:
            return job
        time.sleep(0.05)
    raise RuntimeError(f"job {job_id} not {ready} after {RUN_TIMEOUT_SECONDS:g} s")


def one_run(
    code: Path, large: int, small: int, chunk_ms: int, scratch: Path, azurite: str | None
) -> Timing:
    """A run with the workers on the code in ``code``, on a fresh embedded store or on
    the Azurite of connection string ``azurite``."""
    where = azurite or str(scratch / f"store-{time.monotonic_ns()}")
    env = {**os.environ, "PYTHONPATH": str(code), "RUNNER_STORAGE": where}
    with open_storage(where) as storage:
        store = CheckpointStore(storage)
        store.ensure()
        workers = subprocess.Popen(
            [*ENTRY, "start", Paced.job_type(), "--workers", str(WORKERS)],
            env=env,
            cwd=code,  # `python -c` puts the working directory first on the path
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            big = submit(Paced, {"chunks": large, "ms": chunk_ms}, storage=storage)
            _wait_for(store, big, "planned")
            later = submit(Paced, {"chunks": small, "ms": chunk_ms}, storage=storage)
            done_small = _wait_for(store, later, "done")
            done_big = _wait_for(store, big, "done")
        finally:
            workers.send_signal(signal.SIGTERM)
            workers.wait(timeout=60)
        starts = [c.properties["started_on"] for c in store.chunks(later)]
        started = min(start for start in starts if isinstance(start, datetime))
        assert done_small.created_on is not None and done_big.created_on is not None
        assert done_big.updated_on is not None
        return Timing(
            (started - done_small.created_on).total_seconds(),
            (done_big.updated_on - done_big.created_on).total_seconds(),
        )


def baseline_code(ref: str, scratch: Path) -> Path:
    """The repository's code at ``ref``, unpacked into ``scratch``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True
    ).stdout
    target = scratch / f"code-{ref[:12]}"
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    # The benchmark's job, as this code defines it (that commit may not have it).
    jobs_module = Path("tests", "bench", "chunk_jobs.py")
    shutil.copyfile(ROOT / jobs_module, target / jobs_module)
    return target


def run(args: argparse.Namespace) -> list[str]:
    rows = [
        "| code | chunk, ms | small job's first chunk after its submit, s (median, "
        "min-max) | large job, submit to done, s |",
        "|---|---|---|---|",
    ]
    server = azurite_process.start() if args.azurite else None
    azurite = server.connection_string if server is not None else None
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as scratch:
        trees = [("this code (windowed feeding)", ROOT)]
        if args.baseline_ref:
            trees.insert(
                0,
                (f"{args.baseline_ref} (before)", baseline_code(args.baseline_ref, Path(scratch))),
            )
        for chunk_ms in args.chunk_ms:
            for label, code in trees:
                timings = [
                    one_run(code, args.large, args.small, chunk_ms, Path(scratch), azurite)
                    for _ in range(args.runs)
                ]
                first = [t.first_chunk_seconds for t in timings]
                whole = [t.large_seconds for t in timings]
                print(
                    f"{label}, {chunk_ms} ms: first chunk {spread(first, 2)} s, large "
                    f"{spread(whole, 1)} s",
                    flush=True,
                )
                rows.append(f"| {label} | {chunk_ms} | {spread(first, 2)} | {spread(whole, 1)} |")
    if server is not None:
        server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--chunk-ms", type=int, nargs="+", default=[0, 5])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-ref", default=None)
    parser.add_argument("--azurite", action="store_true", help="on a private Azurite")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    sampler = LoadSampler(f"{WORKERS} worker processes and this one polling the store")
    sampler.start()
    rows = run(args)
    body = [
        machine_line(),
        sampler.stop(),
        f"Command: `make bench` (`python -m tests.bench.fairness --large {args.large} "
        f"--small {args.small} --chunk-ms {' '.join(map(str, args.chunk_ms))} --runs {args.runs}"
        + (f" --baseline-ref {args.baseline_ref}" if args.baseline_ref else "")
        + (" --azurite" if args.azurite else "")
        + "`). "
        + (
            f"Azurite {azurite_process.installed_version()}, disk persistence, on loopback "
            "(every receive scans the whole queue: a deep queue is slow, hence the smaller "
            "large job)"
            if args.azurite
            else "Embedded store in a temp directory"
        )
        + ", `runner start --workers 2` (concurrency "
        f"1, adaptive prefetch), chunks that sleep the given ms, feed_window "
        f"{DEFAULT_FEED_WINDOW}. The small job of {args.small} chunks is submitted once the "
        f"large one of {args.large:,} has been planned; both are of one type, on one "
        "queue. Before windowed feeding every chunk of the large job not yet received was "
        "on the queue ahead of the small one's; now at most a window is. The large job "
        "column is the cost of feeding (a feed step per ~170 chunks): none to speak of.",
        "",
        *rows,
    ]
    print("\n".join(body))
    if args.output:
        title = "Fair between jobs: a small job behind a large one"
        write_section(args.output, title + (" (Azurite)" if args.azurite else ""), body)


if __name__ == "__main__":
    main()
