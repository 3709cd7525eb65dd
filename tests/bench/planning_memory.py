"""Planning a million chunks: time, and the memory planning takes whatever the job's size.

Each run is a fresh spawned process on a fresh embedded store: it submits a
:class:`~tests.bench.chunk_jobs.Padded` job (a generator ``split``, 100 bytes of padding
a payload), resets its resident-memory high-water mark (``/proc/self/clear_refs``), runs
one worker loop that plans the job and is stopped as it asks for more work, and reports
the planning time and how far the high-water mark rose above the memory it had before.
A small job next to the million shows that the rise does not grow with the chunks.
Embedded only: Azurite slows to a crawl with a queue a million deep.
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from checkpoint.backends import open_storage
from jobs.submit import submit
from tests.bench.chunk_jobs import Padded
from tests.bench.report import spread
from tests.bench.throughput import plan_only_loop

#: Job sizes measured, smallest first.
PLANNING_SIZES = (10_000, 1_000_000)
QUICK_PLANNING_SIZES = (1_000, 10_000)
#: Bound on one child's run.
CHILD_TIMEOUT_SECONDS = 900.0


@dataclass(frozen=True)
class PlanningRun:
    """One planning run: chunks, seconds, and resident memory in MiB."""

    chunks: int
    seconds: float
    rss_before_mib: float
    rss_peak_mib: float

    @property
    def rate(self) -> float:
        return self.chunks / self.seconds

    @property
    def rise_mib(self) -> float:
        return self.rss_peak_mib - self.rss_before_mib


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _child(location: str, chunks: int, results: object) -> None:
    with open_storage(location) as storage:
        submit(Padded, {"chunks": chunks}, storage=storage)
        loop, queues = plan_only_loop(storage, Padded)
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS, now
        before = _status_mib("VmRSS")
        started = time.monotonic()
        loop.run()
        if queues.stopped_at is None:
            raise RuntimeError("planning did not run to its end")
        run = PlanningRun(chunks, queues.stopped_at - started, before, _status_mib("VmHWM"))
    results.put(run)  # type: ignore[attr-defined]


def measure_planning(scratch: Path, chunks: int) -> PlanningRun:
    """Plan a job of ``chunks`` in a fresh process on a fresh store under ``scratch``."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    with tempfile.TemporaryDirectory(dir=scratch, prefix="planning-") as location:
        child = context.Process(target=_child, args=(location, chunks, results))
        child.start()
        try:
            run: PlanningRun = results.get(timeout=CHILD_TIMEOUT_SECONDS)
        finally:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join()
    return run


def planning_rows(runs: dict[int, list[PlanningRun]]) -> list[str]:
    """The table: per job size, median (min-max) of time, rate and memory."""
    rows = [
        "| chunks in the job | planning, s | chunks/s | RSS before, MiB | peak RSS while "
        "planning, MiB | rise, MiB |",
        "|---|---|---|---|---|---|",
    ]
    for chunks, measured in sorted(runs.items()):
        cells = [
            spread([m.seconds for m in measured], 1),
            spread([m.rate for m in measured]),
            spread([m.rss_before_mib for m in measured], 1),
            spread([m.rss_peak_mib for m in measured], 1),
            spread([m.rise_mib for m in measured], 1),
        ]
        rows.append(f"| {chunks:,} | " + " | ".join(cells) + " |")
    return rows


def bounded_line(runs: dict[int, list[PlanningRun]]) -> str | None:
    """Whether the memory rise of the largest job stayed within 16 MiB of the smallest's."""
    if len(runs) < 2:
        return None
    small, large = min(runs), max(runs)
    rise_small = statistics.median(m.rise_mib for m in runs[small])
    rise_large = statistics.median(m.rise_mib for m in runs[large])
    ok = rise_large <= rise_small + 16
    verdict = "met" if ok else "**not met**"
    return (
        f"- planning memory bounded ({large:,} chunks rise within 16 MiB of {small:,} "
        f"chunks'): {rise_large:.1f} vs {rise_small:.1f} MiB: {verdict}."
    )
