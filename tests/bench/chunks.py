"""Chunk-engine figures on both backends -> the "Chunk engine" section of BENCHMARKS.md.

``python -m tests.bench.chunks [--runs 3] [--quick] [--backend ...] [--output BENCHMARKS.md]``

1. Trivial-chunk throughput (:mod:`tests.bench.throughput`): end to end (planning and
   processing) and, on a job planned beforehand, planning and processing alone; for
   several worker settings, one process and (embedded) two.
2. Storage calls per chunk by operation, counted by proxies around the Storage.
3. On the same Azurite, the hand-rolled raw-SDK loop (:mod:`tests.bench.raw_loop`) next
   to the engine, with the ratio.
4. Time from SIGKILL to resume next to the lease (:mod:`tests.bench.resume`).
5. Planning a million chunks on embedded: time, and resident memory that does not grow
   with the job (:mod:`tests.bench.planning_memory`).

Runs of all settings are interleaved (run 1 of each, then run 2 of each, ...) so a
change in the machine's load touches every setting alike; figures are medians.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from checkpoint.backends import open_storage
from runner.worker.loop import WorkerSettings
from tests import azurite as azurite_process
from tests.bench import throughput
from tests.bench.chunks_report import (
    RATIO_LABEL,
    Results,
    calls_rows,
    ratio_rows,
    resume_rows,
    target_lines,
    throughput_rows,
)
from tests.bench.planning_memory import (
    PLANNING_SIZES,
    QUICK_PLANNING_SIZES,
    measure_planning,
    planning_rows,
)
from tests.bench.raw_loop import run_raw_loop
from tests.bench.report import LoadSampler, machine_line, write_section
from tests.bench.resume import measure_resume
from tests.bench.throughput import Measured

BACKENDS = ("embedded", "azurite")
#: Chunks per job (and messages of the raw loop); Azurite slows with queue depth.
CHUNKS = {"embedded": 5_000, "azurite": 600}
QUICK_CHUNKS = {"embedded": 200, "azurite": 60}


@dataclass(frozen=True)
class Setting:
    """Worker processes and the settings of each."""

    label: str
    settings: WorkerSettings
    processes: int = 1


def _setting(label: str, processes: int = 1, **options: int) -> Setting:
    return Setting(label, WorkerSettings(burst=True, **options), processes)  # type: ignore[arg-type]


SETTINGS = {
    "embedded": [
        _setting("concurrency 1 (defaults)"),
        _setting("concurrency 1, prefetch 32", prefetch=32),
        _setting("concurrency 4", concurrency=4),
        _setting("2 processes x concurrency 1", processes=2),
        _setting("2 processes x concurrency 1, prefetch 32", processes=2, prefetch=32),
    ],
    "azurite": [
        _setting("concurrency 1 (defaults)"),
        _setting("concurrency 4", concurrency=4),
        _setting(RATIO_LABEL, concurrency=8),
    ],
}
QUICK_SETTINGS = {
    "embedded": [SETTINGS["embedded"][0], SETTINGS["embedded"][3]],
    "azurite": [SETTINGS["azurite"][0], SETTINGS["azurite"][2]],
}


# --------------------------------------------------------------------------- running


def run_setting(
    location: str, chunks: int, setting: Setting, planned: bool
) -> tuple[Measured, Measured | None]:
    """One job of ``chunks`` trivial chunks under ``setting``: the processing (or end
    to end) window, and the planning window if ``planned``."""
    if setting.processes > 1:
        return throughput.run_processes(
            location, chunks, setting.settings, setting.processes, planned
        )
    with open_storage(location) as storage:
        throughput.submit_trivial(storage, chunks)
        planning = throughput.plan_only(storage, chunks) if planned else None
        return throughput.run_in_process(storage, chunks, setting.settings), planning


def measure_backend(
    backend: str,
    location: Callable[[], str],
    settings: list[Setting],
    chunks: int,
    runs: int,
    results: Results,
    raw_location: str | None,
) -> None:
    """Every setting ``runs`` times, interleaved; on Azurite a raw loop before each round."""
    for run in range(runs):
        if raw_location is not None:
            raw = run_raw_loop(raw_location, chunks)
            results.raw.append(raw)
            print(f"run {run + 1} {backend:8} raw SDK loop: {raw.rate:,.1f} msg/s", flush=True)
        for setting in settings:
            key = (backend, setting.label)
            whole, _ = run_setting(location(), chunks, setting, planned=False)
            alone, planning = run_setting(location(), chunks, setting, planned=True)
            assert planning is not None
            results.end_to_end.setdefault(key, []).append(whole)
            results.processing.setdefault(key, []).append(alone)
            results.planning.setdefault(key, []).append(planning)
            print(
                f"run {run + 1} {backend:8} {setting.label:42} end to end {whole.rate:8,.1f}/s"
                f"  planning {planning.rate:8,.1f}/s  processing {alone.rate:8,.1f}/s",
                flush=True,
            )


def measure_resumes(
    backend: str, location: Callable[[], str], runs: int, results: Results, workdir: Path
) -> None:
    for _ in range(runs):
        times = measure_resume(location(), workdir)
        results.resume.setdefault(backend, []).append(times)
        print(
            f"{backend:8} SIGKILL to resume {times.kill_to_resume:.2f} s "
            f"(lease left at the kill {times.lease_left_at_kill:.2f} s)",
            flush=True,
        )


def measure_planning_memory(sizes: tuple[int, ...], runs: int, results: Results, scratch: str):
    """Planning jobs of ``sizes`` chunks in fresh processes, sizes interleaved."""
    for _ in range(runs):
        for chunks in sizes:
            planned = measure_planning(Path(scratch), chunks)
            results.planning_memory.setdefault(chunks, []).append(planned)
            print(
                f"embedded planning {chunks:>9,} chunks: {planned.seconds:6.1f} s, "
                f"peak RSS {planned.rss_peak_mib:.1f} MiB (+{planned.rise_mib:.1f})",
                flush=True,
            )


def _locations(scratch: Path, server: azurite_process.Azurite | None) -> Callable[[], str]:
    """Where each job runs: the Azurite, or a fresh embedded store directory per job (so
    each run starts from an empty database)."""
    if server is not None:
        return lambda: server.connection_string
    numbers = iter(range(10**9))
    return lambda: str(scratch / f"store-{next(numbers)}")


def run(backends: list[str], runs: int, quick: bool, chunks: dict[str, int]) -> Results:
    """Measure everything on the backends asked for; Azurite is started here."""
    results = Results()
    settings = QUICK_SETTINGS if quick else SETTINGS
    server = azurite_process.start() if "azurite" in backends else None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-chunks-") as scratch:
            for backend in backends:
                location = _locations(Path(scratch), server if backend == "azurite" else None)
                raw_location = server.connection_string if backend == "azurite" and server else None
                measure_backend(
                    backend,
                    location,
                    settings[backend],
                    chunks[backend],
                    runs,
                    results,
                    raw_location,
                )
                measure_resumes(backend, location, runs, results, Path(scratch))
            if "embedded" in backends:
                measure_planning_memory(
                    QUICK_PLANNING_SIZES if quick else PLANNING_SIZES, runs, results, scratch
                )
    finally:
        if server is not None:
            server.stop()
    return results


# --------------------------------------------------------------------------- report


def report(results: Results, args: argparse.Namespace, load: str) -> list[str]:
    """The section's lines: machine, load, command, method, then the four tables."""
    backends, chunks = args.backend, args.chunks
    command = " ".join(
        ["python -m tests.bench.chunks", f"--runs {args.runs}"]
        + (["--quick"] if args.quick else [])
        + ([f"--backend {b}" for b in backends] if backends != list(BACKENDS) else [])
    )
    sizes = ", ".join(f"{chunks[b]:,} on {b}" for b in backends)
    azurite = (
        f" Azurite {azurite_process.installed_version()}, disk persistence, on loopback: its "
        f"figures are for **shallow queues** (at most {chunks['azurite']:,} messages; Azurite "
        "slows sharply with queue depth) and it shares the 2 cores with the worker."
        if "azurite" in backends
        else ""
    )
    return [
        machine_line(),
        load,
        f"Command: `make bench` (`{command}`). Median of {args.runs} run(s), min-max in "
        "brackets; runs of all settings interleaved.",
        "",
        f"Trivial job (`process` returns at once), chunks per job: {sizes}; worker loops in "
        "burst mode. **The fixed start-up cost is left out**: the clock starts at the "
        "worker's first receive and stops when the job record is set done, so interpreter "
        "start, imports, opening storage and creating tables and queues are not in the "
        "figures (1-process runs are a `WorkerLoop` in the benchmark process; 2-process runs "
        "are 2 spawned processes, each one `WorkerLoop`, released together once started). "
        "*End to end* includes planning (`split`, chunk records, one message per chunk). "
        "*Planning alone*: a loop of one slot and no prefetch, stopped as it asks for more "
        "work; *processing alone*: a fresh loop then runs the planned chunks. Prefetch "
        "adapts to the time chunks take unless a setting names it "
        "(`runner/worker/receiving/prefetch.py`: up to 64 for trivial chunks, growing 0, 1, "
        "3, 7 ... from the first chunk). "
        "Embedded: a fresh store directory per job, real clock." + azurite,
        "",
        "### Targets",
        "",
        *target_lines(results),
        "",
        "### Trivial-chunk throughput",
        "",
        *throughput_rows(results),
        "",
        "### Storage calls per chunk",
        "",
        "Calls through the Storage's queues, records and blobs (counting proxies) inside "
        "the timed window, divided by the chunks. Fixed per-job calls (job record, 16 shard "
        "counters read whenever a shard completes) are spread over the job's chunks, so "
        "they weigh more on the smaller Azurite job. Blob calls would be listed as "
        "`blobs.*` (the trivial job makes none).",
        "",
        *calls_rows(
            results,
            [(b, s.label) for b in backends for s in _settings(args)[b][:1]]
            + [(b, s.label) for b in backends for s in _settings(args)[b] if s.processes > 1][:1],
        ),
        "",
        "### Engine vs a raw-SDK loop on the same Azurite",
        "",
        "Raw loop (`tests/bench/raw_loop.py`): one thread on the SDK clients directly "
        "(`QueueClient` with `BinaryBase64EncodePolicy`, `TableClient`); send every message, "
        "then receive by 32 and per message insert an entity, replace it (If-Match) and "
        "delete the message. Engine: the trivial job of as many chunks, end to end, one "
        f"worker process with `runner start --concurrency 8` settings ({RATIO_LABEL}, "
        "prefetch adapting). Runs alternate with the raw loop's on the same Azurite.",
        "",
        *(ratio_rows(results) or ["(Azurite not measured.)"]),
        "",
        "### SIGKILL to resume",
        "",
        "A chunk checkpointing every 0.2 s under a 3 s lease runs in `runner start --burst`; "
        "once its record shows a checkpoint the process is SIGKILLed and a second `runner "
        "start --burst` (default poll max 1 s) is started at once; measured from the kill to "
        "the record showing attempt 2 running (read every 0.05 s). The second worker's "
        "start-up (~1 s) overlaps the lease running out. Lease left at the kill: the "
        "record's `lease_until` as the killed worker last wrote it.",
        "",
        *resume_rows(results),
        *(_planning_section(results) if results.planning_memory else []),
    ]


def _planning_section(results: Results) -> list[str]:
    return [
        "",
        "### Planning a million chunks",
        "",
        "Embedded only (Azurite slows to a crawl with a queue a million deep). Each run a "
        "fresh spawned process and store: submit a job whose generator `split` yields "
        "payloads of ~120 bytes, reset the process's resident-memory high-water mark "
        "(`/proc/self/clear_refs`), then one worker loop plans the job (chunk records and "
        "one message per chunk, a page of 400 at a time) and is stopped as it asks for "
        "more work. *Rise*: peak RSS while planning minus RSS before. A page at a time "
        "means the rise does not grow with the job.",
        "",
        *planning_rows(results.planning_memory),
    ]


def _settings(args: argparse.Namespace) -> dict[str, list[Setting]]:
    return QUICK_SETTINGS if args.quick else SETTINGS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (3; quick: 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small jobs, 1 run")
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--embedded-chunks", type=int, default=None)
    parser.add_argument("--azurite-chunks", type=int, default=None)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    args.backend = args.backend or list(BACKENDS)
    args.runs = args.runs or (1 if args.quick else 3)
    sizes = QUICK_CHUNKS if args.quick else CHUNKS
    args.chunks = {
        "embedded": args.embedded_chunks or sizes["embedded"],
        "azurite": args.azurite_chunks or sizes["azurite"],
    }
    return args


def main(argv: list[str] | None = None) -> Results:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    sampler = LoadSampler("its worker process(es) and Azurite")
    sampler.start()
    results = run(args.backend, args.runs, args.quick, args.chunks)
    body = report(results, args, sampler.stop())
    print("\n".join(body))
    if args.output:
        write_section(args.output, "Chunk engine", body)
    return results


if __name__ == "__main__":
    main()
