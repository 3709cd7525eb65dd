"""The adaptive lease against a fixed one, side by side in one run -> sections of
BENCHMARKS.md.

``python -m tests.bench.adaptive_lease [--scenario crash|slowing|stalled ...]
[--runs 5] [--warmup 120] [--backend embedded|azurite] [--output BENCHMARKS.md]``

Every run uses real ``runner start`` processes (one worker each, concurrency 1 unless
said) on both backends at once (a fresh embedded store in a temp directory; a private
Azurite on loopback), the adaptive class and its fixed reference at once too, each on
a queue and a learned-lease row of its own (:mod:`tests.bench.lease_jobs`). Figures
come from the chunk records (:mod:`tests.bench.lease_rig`), not from log lines.

- **crash**: chunks of ``--chunk-seconds`` (60) checkpointing every second, two workers;
  once the job has run ``--warmup`` seconds (120), the worker holding a chunk is
  SIGKILLed ``offset`` seconds into it (the other idle); from the kill to the chunk's
  next attempt's start. The offsets are spread evenly over 5-35 s, the same for both
  classes. Target ≤ 12 s, median of ``--runs`` (5), against the fixed 30 s lease.
  Beside it, the renewals (UpdateMessage) per chunk-minute up to the kill.
- **slowing**: ``--faults`` (``delayed=0.5,delay=4-7``: half the calls of each worker
  answered after 4-7 s) in the workers' ``RUNNER_FAULTS``; three workers run 12
  chunks of 40 s; the leases lost by each worker and the attempts of each chunk,
  against a fixed 8 s lease. Target: at most one lease lost per worker.
- **stalled**: the adaptive lease from its floor (the row removed first), two workers
  of concurrency 2, three chunks; the busier worker SIGSTOPped for 8 s three times,
  40 s apart; the learned lease after each stall, and the attempts each stall cost.
  Target: past 8 s after the first stall, nothing lost to the later two.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from checkpoint.backends import open_storage
from checkpoint.store import CheckpointStore
from jobs.job import ChunkedJob
from runner.worker.leases.lease import end_margin_seconds
from tests import azurite as azurite_process
from tests.bench.lease_jobs import FixedCrash, FixedSlowing, Slowing, Stalled, Ticking
from tests.bench.lease_rig import Rig
from tests.bench.lease_scenarios import (
    SETTLE_SECONDS,
    Recovery,
    Slowed,
    Stalls,
    crash_once,
    slowing,
    stalled,
)
from tests.bench.report import LoadSampler, machine_line, spread, write_section

BACKENDS = ("embedded", "azurite")
SCENARIOS = ("crash", "slowing", "stalled")
TARGET_SECONDS = 12.0
DEFAULT_FAULTS = "delayed=0.5,delay=4-7"
T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    runs: int = 5
    warmup_seconds: float = 120.0
    chunk_seconds: int = 60
    slow_workers: int = 3
    slow_chunks: int = 12
    slow_chunk_seconds: int = 40
    faults: str = DEFAULT_FAULTS
    stalls: int = 3
    stall_seconds: float = 8.0
    stall_every_seconds: float = 40.0

    @property
    def crash_chunks(self) -> int:
        """Two workers run rounds of two chunks; one more starts the round of the kill,
        alone (the other worker idle, its slot free for the killed chunk)."""
        rounds = int(self.warmup_seconds // self.chunk_seconds)
        return 2 * rounds + 1

    def offsets(self) -> list[float]:
        """Seconds into the chunk of each run's kill: spread over 5-35 s."""
        return [5 + 30 * (n + 0.5) / self.runs for n in range(self.runs)]


def _parallel(calls: Mapping[str, Callable[[], T]]) -> dict[str, T | BaseException]:
    """Each call on a thread of its own; its result or what it raised, by name."""
    results: dict[str, T | BaseException] = {}

    def one(name: str, call: Callable[[], T]) -> None:
        try:
            results[name] = call()
        except BaseException as error:  # noqa: BLE001 - reported in its row
            results[name] = error

    threads = [threading.Thread(target=one, args=item, name=item[0]) for item in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


class Stores:
    """Each backend's location for one run, and a rig maker on it."""

    def __init__(self, which: list[str], scratch: Path):
        self.scratch = scratch
        self.server = azurite_process.start() if "azurite" in which else None
        self.which = which
        self._opened: list[Any] = []

    def location(self, backend: str) -> str:
        if backend == "azurite":
            assert self.server is not None
            return self.server.connection_string
        return str(self.scratch / "store")

    def rig(self, backend: str, name: str, job: type[ChunkedJob], **more: Any) -> Rig:
        opened = open_storage(self.location(backend))
        storage = opened.__enter__()
        self._opened.append(opened)
        CheckpointStore(storage).ensure()
        return Rig(f"{backend}-{name}", self.location(backend), storage, job, self.scratch, **more)

    def close(self) -> None:
        for opened in self._opened:
            opened.__exit__(None, None, None)
        if self.server is not None:
            self.server.stop()


def run_crash(
    stores: Stores, settings: Settings, classes: dict[str, type[ChunkedJob]]
) -> dict[str, list[Recovery] | BaseException]:
    """Per backend and class, ``settings.runs`` crashes; all four series at once."""

    def series(backend: str, name: str, job: type[ChunkedJob]) -> Callable[[], list[Recovery]]:
        def runs() -> list[Recovery]:
            found = []
            for n, offset in enumerate(settings.offsets()):
                rig = stores.rig(backend, f"{name.replace(' ', '')}-{n}", job)
                found.append(
                    crash_once(
                        rig,
                        settings.crash_chunks,
                        settings.chunk_seconds,
                        settings.warmup_seconds,
                        offset,
                    )
                )
                print(f"crash {backend} {name} run {n + 1}: {found[-1]}", flush=True)
            return found

        return runs

    calls = {
        f"{backend}/{name}": series(backend, name, job)
        for backend in stores.which
        for name, job in classes.items()
    }
    return _parallel(calls)


def crash_rows(results: dict[str, Any]) -> list[str]:
    rows = [
        "| backend | lease | lease at the kill, s | kill to the chunk's next attempt, s "
        "(median, min-max) | renewals per chunk-minute up to the kill (median) "
        f"| target ≤ {TARGET_SECONDS:g} s |",
        "|---|---|---|---|---|---|",
    ]
    for key, found in results.items():
        backend, name = key.split("/")
        if isinstance(found, BaseException):
            rows.append(f"| {backend} | {name} | | failed: {found} | | **not met** |")
            continue
        took = [r.seconds for r in found]
        leases = sorted({r.lease_seconds for r in found}, key=lambda v: v or 0)
        per_minute = statistics.median(r.renewals_per_chunk_minute for r in found)
        met = "met" if statistics.median(took) <= TARGET_SECONDS else "**not met**"
        if name != "adaptive":
            met = "(reference)"
        rows.append(
            f"| {backend} | {name} | {', '.join(map(str, leases))} | {spread(took, 1)} "
            f"| {per_minute:.2f} | {met} |"
        )
    return rows


def run_slowing(
    stores: Stores, settings: Settings, classes: dict[str, type[ChunkedJob]]
) -> dict[str, Slowed | BaseException]:
    env = {"RUNNER_FAULTS": settings.faults}
    calls = {
        f"{backend}/{name}": functools.partial(
            slowing,
            stores.rig(backend, f"slow-{name.replace(' ', '')}", job, env=env),
            settings.slow_workers,
            settings.slow_chunks,
            settings.slow_chunk_seconds,
        )
        for backend in stores.which
        for name, job in classes.items()
    }
    return _parallel(calls)


def slowing_rows(results: dict[str, Any]) -> list[str]:
    rows = [
        "| backend | lease | job | its time, s | leases lost per worker (records) "
        "| the workers' leases_lost counters | attempts per chunk | losses past each "
        "worker's first | lease at the end, s | target: ≤ 1 lost per worker |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, found in results.items():
        backend, name = key.split("/")
        if isinstance(found, BaseException):
            rows.append(f"| {backend} | {name} | failed: {found} | | | | | | | **not met** |")
            continue
        slowed: Slowed = found
        counted = ", ".join("?" if c is None else f"{c:g}" for c in slowed.counted_per_worker)
        met = "met" if slowed.met else "**not met**"
        rows.append(
            f"| {backend} | {name} | {slowed.state} | {slowed.seconds:.0f} "
            f"| {', '.join(map(str, slowed.lost_per_worker))} | {counted} "
            f"| {' '.join(map(str, slowed.attempts_per_chunk))} | {slowed.after_lessons} "
            f"| {slowed.lease_seconds} | {met if name == 'adaptive' else '(reference)'} |"
        )
    return rows


def run_stalled(
    stores: Stores, settings: Settings, job: type[ChunkedJob], chunks: int = 3
) -> dict[str, Stalls | BaseException]:
    calls = {
        backend: functools.partial(
            stalled,
            stores.rig(backend, "stalled", job, concurrency=2),
            chunks,
            settings.stalls,
            settings.stall_seconds,
            settings.stall_every_seconds,
        )
        for backend in stores.which
    }
    return _parallel(calls)


def stalled_rows(results: dict[str, Any], stall_seconds: float) -> list[str]:
    rows = [
        "| backend | learned lease before, and after each stall, s | its end margin after "
        "the first, s | attempts lost to each stall | attempts per chunk "
        f"| target: > {stall_seconds:g} s after the first, nothing lost after |",
        "|---|---|---|---|---|---|",
    ]
    for backend, found in results.items():
        if isinstance(found, BaseException):
            rows.append(f"| {backend} | failed: {found} | | | | **not met** |")
            continue
        stalls: Stalls = found
        after = stalls.leases[1] if len(stalls.leases) > 1 else None
        margin = f"{end_margin_seconds(after):.1f}" if after else "-"
        leases = " → ".join("none" if v is None else str(v) for v in stalls.leases)
        rows.append(
            f"| {backend} | {leases} | {margin} | {', '.join(map(str, stalls.lost))} "
            f"| {' '.join(map(str, stalls.attempts_per_chunk))} "
            f"| {'met' if stalls.met else '**not met**'} |"
        )
    return rows


def _command(args: argparse.Namespace) -> str:
    parts = [f"--runs {args.runs}", f"--warmup {args.warmup:g}"]
    if args.scenario:
        parts += [f"--scenario {s}" for s in args.scenario]
    return f"`python -m tests.bench.adaptive_lease {' '.join(parts)}`"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--runs", type=int, default=Settings.runs)
    parser.add_argument("--warmup", type=float, default=Settings.warmup_seconds)
    parser.add_argument("--faults", default=DEFAULT_FAULTS)
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    settings = Settings(runs=args.runs, warmup_seconds=args.warmup, faults=args.faults)
    which = args.backend or list(BACKENDS)
    head = [
        machine_line(),
        "",
        f"Command: `make bench` ({_command(args)}). Both backends at once: embedded in a "
        f"temp directory, Azurite {azurite_process.installed_version()} with disk "
        "persistence on loopback; real `runner start` processes, one worker each. "
        "Figures from the chunk records (each attempt's number, owner and `started_on`, "
        "read 4 times a second), not from log lines.",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-lease-") as scratch:
        for scenario in args.scenario or list(SCENARIOS):
            sampler = LoadSampler("the workers of both backends and classes at once")
            sampler.start()
            stores = Stores(which, Path(scratch) / scenario)
            (Path(scratch) / scenario).mkdir()
            try:
                title, body = _scenario(scenario, stores, settings)
            finally:
                stores.close()
            lines = [*head, sampler.stop(), "", *body]
            print("\n".join(lines), flush=True)
            if args.output:
                write_section(args.output, title, lines)


def _scenario(name: str, stores: Stores, settings: Settings) -> tuple[str, list[str]]:
    if name == "crash":
        crashed = run_crash(stores, settings, {"adaptive": Ticking, "fixed 30 s": FixedCrash})
        return "Adaptive lease: crash recovery on a healthy store", [
            f"{settings.runs} runs per backend and lease: two workers, chunks of "
            f"{settings.chunk_seconds} s checkpointing every second "
            f"({settings.crash_chunks} of them); once the job has run "
            f"{settings.warmup_seconds:g} s, the worker holding a chunk is SIGKILLed "
            f"{', '.join(f'{o:g}' for o in settings.offsets())} s into it (the other idle); "
            "from the kill to the chunk's next attempt's `started_on`. The adaptive class "
            "sets no `lease_seconds` (bounds 10-600 s); the reference, in the same run, "
            "`lease_seconds = 30` (the old default). Renewals: both workers' "
            "`chunkrunner_lease_renewals_total` just before the kill over the chunk-minutes "
            "their records show up to it.",
            "",
            *crash_rows(crashed),
        ]
    if name == "slowing":
        slowed = run_slowing(stores, settings, {"adaptive": Slowing, "fixed 8 s": FixedSlowing})
        return "Adaptive lease: a slowing store", [
            f'`RUNNER_FAULTS="{settings.faults}"` in each worker (half its storage calls '
            f"answered after 4-7 s); {settings.slow_workers} workers per lease, "
            f"{settings.slow_chunks} chunks of {settings.slow_chunk_seconds} s "
            "checkpointing every second, the adaptive lease (from its floor: the row "
            "removed first) and a fixed `lease_seconds = 8` in the same run. A lease lost "
            "is an attempt superseded by a later one (the records); the counters are the "
            "workers' own, for comparison. A job not done within 4 times its length "
            "without faults plus 300 s is stopped there and its state shown (`running`). "
            "A checkpoint is written on the chunk's thread, so half of the writes delayed "
            "4-7 s make a chunk of 40 one-second ticks take about 160 s.",
            "",
            *slowing_rows(slowed),
        ]
    stalls = run_stalled(stores, settings, Stalled)
    return "Adaptive lease: a stalled worker", [
        f"Two workers of concurrency 2, three chunks; the adaptive lease from its floor "
        f"(10 s; the row removed first). The worker holding two chunks is SIGSTOPped for "
        f"{settings.stall_seconds:g} s {settings.stalls} times, "
        f"{settings.stall_every_seconds:g} s apart; the learned lease is read from the "
        f"type's `runnerleases` row before and {SETTLE_SECONDS:g} s after each stall.",
        "",
        *stalled_rows(stalls, settings.stall_seconds),
    ]


if __name__ == "__main__":
    main()
