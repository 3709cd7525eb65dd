"""Time to the first chunk of a small job submitted behind a large one -> a section of
BENCHMARKS.md.

``python -m tests.bench.fairness [--large 10000] [--small 10] [--chunk-ms 0 5]
[--runs 3] [--baseline-ref COMMIT] [--second-type] [--azurite] [--output BENCHMARKS.md]``

Each run: a fresh embedded store in a temp directory; ``runner start
tests.bench.chunk_jobs:Paced --workers 2`` serving it (chunks of ``--chunk-ms``
milliseconds each: 0 returns at once); the large job submitted, and once its planning
is done (its total recorded), the small one, of the same type and queue. Measured from
the small job's ``created_on`` to the earliest ``started_on`` of its chunks (both
stamped by this machine's clock, read from the records once both jobs are done), and
the large job's submit to done. With ``--baseline-ref``, the same runs with the workers
on that commit's code (``git archive`` into a temp directory): the code before windowed
feeding, for comparison.

With ``--second-type`` the small job is of another type on its own queue
(``tests.bench.chunk_jobs:PacedOther``), the workers serving both types: fairness
between job types, to compare with the code before the types took turns. A large job
that would take over :data:`LONGEST_LARGE_SECONDS` is not waited for (chunks of a
second, say: the small job's start is the measure); its queues are deleted after the run,
so the next run on the same Azurite starts on empty ones.
"""

from __future__ import annotations

import argparse
import os
import random
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
from tests.bench.chunk_jobs import Paced, PacedOther
from tests.bench.report import LoadSampler, machine_line, spread, write_section
from tests.e2e.processes import ROOT

WORKERS = 2
#: Longest a run may take before it is abandoned as stuck.
RUN_TIMEOUT_SECONDS = 900.0
ENTRY = [sys.executable, "-c", "from runner.cli.entry import main; main()"]
#: A large job expected to take longer than this (chunks x ms / workers) is not waited
#: for to its end, on a store of its own (embedded): its column says so.
LONGEST_LARGE_SECONDS = 120.0
#: With ``--second-type``, the small job is submitted at a random moment within this many
#: chunk times of the large job's planning (seeded by the run's number): where each
#: worker is in its turns when it comes decides its wait, so runs must sample that.
PHASE_CHUNKS = 4


@dataclass(frozen=True)
class Timing:
    """One run: seconds from the small job's submit to its first chunk starting, and
    from the large job's submit to its end."""

    first_chunk_seconds: float
    #: None: not waited for (:data:`LONGEST_LARGE_SECONDS`).
    large_seconds: float | None
    #: From the small job's submit to its planning's start.
    planning_seconds: float


def _wait_for(read: CheckpointStore, job_id: str, ready: str) -> JobRecord:
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        job = read.get_job(job_id)
        if (ready == "planned" and job.total is not None) or job.state == ready:
            return job
        time.sleep(0.05)
    raise RuntimeError(f"job {job_id} not {ready} after {RUN_TIMEOUT_SECONDS:g} s")


def one_run(
    code: Path,
    large: int,
    small: int,
    chunk_ms: int,
    scratch: Path,
    azurite: str | None,
    second_type: bool = False,
    delay_seconds: float = 0.0,
) -> Timing:
    """A run with the workers on the code in ``code``, on a fresh embedded store or on
    the Azurite of connection string ``azurite``; the small job of the large one's type,
    or with ``second_type`` of another type the workers serve too, submitted
    ``delay_seconds`` after the large one was planned."""
    where = azurite or str(scratch / f"store-{time.monotonic_ns()}")
    small_type = PacedOther if second_type else Paced
    served = [Paced.job_type(), PacedOther.job_type()] if second_type else [Paced.job_type()]
    wait_for_large = large * chunk_ms / 1000 / WORKERS <= LONGEST_LARGE_SECONDS
    env = {**os.environ, "PYTHONPATH": str(code), "RUNNER_STORAGE": where}
    with open_storage(where) as storage:
        store = CheckpointStore(storage)
        store.ensure()
        workers = subprocess.Popen(
            [*ENTRY, "start", *served, "--workers", str(WORKERS)],
            env=env,
            cwd=code,  # `python -c` puts the working directory first on the path
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            big = submit(Paced, {"chunks": large, "ms": chunk_ms}, storage=storage)
            _wait_for(store, big, "planned")
            time.sleep(delay_seconds)
            later = submit(small_type, {"chunks": small, "ms": chunk_ms}, storage=storage)
            done_small = _wait_for(store, later, "done")
            done_big = _wait_for(store, big, "done") if wait_for_large else None
        finally:
            workers.send_signal(signal.SIGTERM)
            workers.wait(timeout=60)
            if not wait_for_large:  # the next run on this Azurite starts on empty queues
                for cls in (Paced, PacedOther):
                    for name in (*cls.chunk_queues(), *cls.poison_queues(), cls.resume_queue()):
                        storage.queues.delete_queue(name)
        starts = [c.properties["started_on"] for c in store.chunks(later)]
        started = min(start for start in starts if isinstance(start, datetime))
        planned = store.get_task(later, "plan", 0).properties["started_on"]
        assert done_small.created_on is not None and isinstance(planned, datetime)
        return Timing(
            (started - done_small.created_on).total_seconds(),
            _took(done_big),
            (planned - done_small.created_on).total_seconds(),
        )


def _took(job: JobRecord | None) -> float | None:
    if job is None:
        return None
    assert job.created_on is not None and job.updated_on is not None
    return (job.updated_on - job.created_on).total_seconds()


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
    rows = (
        [
            "| code | chunk, ms | small job's planning started after its submit, s (median, "
            "min-max) | its first chunk, s | large job, submit to done, s |",
            "|---|---|---|---|---|",
        ]
        if args.second_type
        else [
            "| code | chunk, ms | small job's first chunk after its submit, s (median, "
            "min-max) | large job, submit to done, s |",
            "|---|---|---|---|",
        ]
    )
    server = azurite_process.start() if args.azurite else None
    azurite = server.connection_string if server is not None else None
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as scratch:
        now = "this code (types in turn)" if args.second_type else "this code (windowed feeding)"
        trees = [(now, ROOT)]
        if args.baseline_ref:
            trees.insert(
                0,
                (f"{args.baseline_ref} (before)", baseline_code(args.baseline_ref, Path(scratch))),
            )
        for chunk_ms in args.chunk_ms:
            for label, code in trees:
                timings = [
                    one_run(
                        code,
                        args.large,
                        args.small,
                        chunk_ms,
                        Path(scratch),
                        azurite,
                        args.second_type,
                        _delay_seconds(args, chunk_ms, number),
                    )
                    for number in range(args.runs)
                ]
                first = spread([t.first_chunk_seconds for t in timings], 2)
                ended = [t.large_seconds for t in timings if t.large_seconds is not None]
                whole = spread(ended, 1) if ended else "not waited for"
                planning = spread([t.planning_seconds for t in timings], 2)
                print(
                    f"{label}, {chunk_ms} ms: planning {planning} s, first chunk {first} s, "
                    f"large {whole} s",
                    flush=True,
                )
                shown = [planning, first] if args.second_type else [first]
                rows.append(f"| {label} | {chunk_ms} | {' | '.join(shown)} | {whole} |")
    if server is not None:
        server.stop()
    return rows


def _delay_seconds(args: argparse.Namespace, chunk_ms: int, number: int) -> float:
    """How long after the large job's planning run ``number`` submits the small job."""
    if not args.second_type:
        return 0.0
    return random.Random(number).uniform(0, PHASE_CHUNKS * chunk_ms / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--chunk-ms", type=int, nargs="+", default=[0, 5])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline-ref", default=None)
    parser.add_argument("--azurite", action="store_true", help="on a private Azurite")
    parser.add_argument(
        "--second-type", action="store_true", help="the small job of another type, served too"
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    sampler = LoadSampler(f"{WORKERS} worker processes and this one polling the store")
    sampler.start()
    rows = run(args)
    body = [machine_line(), sampler.stop(), _command(args) + _setting(args), "", *rows]
    print("\n".join(body))
    if args.output:
        title = (
            "Fair between job types: a small job of a second type behind a large one"
            if args.second_type
            else "Fair between jobs: a small job behind a large one"
        )
        write_section(args.output, title + (" (Azurite)" if args.azurite else ""), body)


def _command(args: argparse.Namespace) -> str:
    return (
        f"Command: `make bench` (`python -m tests.bench.fairness --large {args.large} "
        f"--small {args.small} --chunk-ms {' '.join(map(str, args.chunk_ms))} --runs {args.runs}"
        + (f" --baseline-ref {args.baseline_ref}" if args.baseline_ref else "")
        + (" --second-type" if args.second_type else "")
        + (" --azurite" if args.azurite else "")
        + "`). "
    )


def _setting(args: argparse.Namespace) -> str:
    where = (
        f"Azurite {azurite_process.installed_version()}, disk persistence, on loopback "
        "(every receive scans the whole queue: a deep queue is slow, hence the smaller "
        "large job)"
        if args.azurite
        else "Embedded store in a temp directory"
    )
    served = (
        f"`runner start {Paced.job_type()} {PacedOther.job_type()} --workers 2`"
        if args.second_type
        else "`runner start --workers 2`"
    )
    common = (
        f"{where}, {served} (concurrency 1, adaptive prefetch), chunks that sleep the "
        f"given ms, feed_window {DEFAULT_FEED_WINDOW}. The small job of {args.small} chunks "
        f"is submitted once the large one of {args.large:,} has been planned; "
    )
    if args.second_type:
        return common + (
            "the small one is of a second type, on its own queue. Before, a worker's "
            "queues took turns of two receives whatever their type, and a second type's "
            "planning waited for its queue's turn; now quiet types are asked first and "
            "busy ones take turns of one receive (docs/semantics.md §22). The small job is "
            f"submitted at a random moment within {PHASE_CHUNKS} chunk times of the large "
            "one's planning (seeded by the run's number, the same for both codes): where "
            "the workers are in their turns decides the wait. A large job that would take "
            f"over {LONGEST_LARGE_SECONDS:g} s is not waited for."
        )
    return common + (
        "both are of one type, on one queue. Before windowed feeding every chunk of the "
        "large job not yet received was on the queue ahead of the small one's; now at most "
        "a window is. The large job column is the cost of feeding (a feed step per ~170 "
        "chunks): none to speak of."
    )


if __name__ == "__main__":
    main()
