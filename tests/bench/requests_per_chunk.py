"""Storage requests per chunk by kind, counted on both backends -> BENCHMARKS.md (SCALE.md's input).

``python -m tests.bench.requests_per_chunk [--runs 3] [--quick] [--output BENCHMARKS.md]``

Each run is one job on a fresh store and one burst-mode worker loop on storage metered
by :class:`~tests.bench.request_tally.OperationTally` (every protocol call by
operation); on Azurite every HTTP request is counted too, by kind and table partition
(:class:`~tests.bench.request_tally.HttpTally`). The window opens just before
``submit`` and closes when the worker has exited: planning, every chunk, finalize, the
heartbeats and the burst-mode exit checks are in; creating tables and queues is
counted apart (once per worker start).

Each job runs at two sizes; per chunk is the difference of the two counts over the
difference of the sizes, so what a job makes once (its record, the 16 shard counters,
finalize) drops out; it is reported apart.

- *trivial*: :class:`~tests.bench.chunk_jobs.Trivial`, one worker of default settings
  (concurrency 1, prefetch adapting).
- *long*: :class:`~tests.bench.chunk_jobs.Renewing`, chunks of 5 s under a 4 s lease
  (renewed every 2 s), ``checkpoint`` called every 0.1 s and written at most once a
  second, concurrency 4 (4 and 12 chunks: one and three rounds of the slots).
- *idle*: a worker of ``runner start`` settings serving an empty queue, counted per
  second once its polls have grown to their longest.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.metering import metered
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.loop import WorkerLoop, WorkerSettings
from tests import azurite as azurite_process
from tests.bench.chunk_jobs import Renewing, Trivial
from tests.bench.report import LoadSampler, machine_line, write_section
from tests.bench.request_tally import HttpTally, OperationTally, Window, is_start_up

BACKENDS = ("embedded", "azurite")
SECTION = "Requests per chunk"
#: The two sizes of the trivial job, per backend (Azurite slows with queue depth).
TRIVIAL_SIZES = {"embedded": (1_000, 3_000), "azurite": (500, 1_500)}
QUICK_TRIVIAL_SIZES = {"embedded": (40, 120), "azurite": (40, 120)}
#: The long job's two sizes (chunks), each chunk's seconds, and the worker's concurrency.
LONG_SIZES, LONG_SECONDS, LONG_CONCURRENCY = (4, 12), 5.0, 4
QUICK_LONG_SIZES, QUICK_LONG_SECONDS = (2, 4), 2.5
#: How long the idle worker is counted, after this long to settle (its polls grow to 1 s).
IDLE_SECONDS, QUICK_IDLE_SECONDS, IDLE_SETTLE_SECONDS = 20.0, 4.0, 3.0
#: The budget: Azure requests per trivial chunk (the trivial job's slope on Azurite, one
#: request per message of a ``*_many`` call) the engine may make with the defaults, the
#: requests made by the second left out (:func:`by_the_second`: they weigh more per chunk
#: the slower the store, so they are reported beside it). The report says PASS or OVER
#: against it and tests/bench/test_requests_per_chunk.py fails over it, so a change that
#: adds a request per chunk raises it here and says why. The floor is 3 (a chunk's
#: message sent and deleted, its claim); issue 30 asked for 3.2 in all. Measured
#: 3.168 made by the chunk (3.198 in all) on a quiet machine on 2026-11-29, 3.17-3.19 by
#: the budget test's sizes; the budget leaves the margin the earlier one had (0.17) for
#: a loaded machine (3.284 then, against 3.45).
REQUESTS_PER_CHUNK_BUDGET = 3.35
#: The two sizes the budget test counts at: past a feed window (256), so that feeding,
#: as a large job does it, is in the slope.
BUDGET_SIZES = (300, 900)


@dataclass
class Counted:
    """One job's requests, from just before its submit to its worker's exit."""

    chunks: int
    seconds: float
    operations: Counter[str]
    not_ok: Counter[str]
    http: HttpTally | None = None
    #: Size of a done chunk record (Azure's entity-size formula) and its properties.
    record_bytes: int = 0
    record_properties: tuple[str, ...] = ()
    shard_keys: Counter[str] = field(default_factory=Counter)


def run_job(
    location: str,
    job: type[ChunkedJob],
    params: dict[str, Any],
    chunks: int,
    settings: WorkerSettings,
    on_wire: bool,
) -> Counted:
    """Submit ``job`` and run one burst-mode worker on metered storage until it exits."""
    window = Window()
    tally = OperationTally(window)
    http = HttpTally(window) if on_wire else None
    with open_storage(location) as storage, http.installed() if http else nullcontext():
        measured = metered(storage, tally)
        loop = WorkerLoop(measured, [job], settings)
        window.open()
        job_id = submit(job, params, storage=measured)
        loop.run()
        window.close()
        record = storage.records.get(
            layout.TASKS_TABLE, layout.shard_partition(job_id, 0), layout.chunk_row(0)
        )
    assert window.opened_at is not None and window.closed_at is not None
    return Counted(
        chunks,
        window.closed_at - window.opened_at,
        tally.calls,
        tally.not_ok,
        http,
        entity_bytes(record.partition_key, record.row_key, record.properties),
        tuple(sorted(record.properties)),
        http.shard_keys() if http else Counter(),
    )


def entity_bytes(partition_key: str, row_key: str, properties: Any) -> int:
    """Azure's formula for an entity's stored size: 4 + 2 x the keys' characters, and
    per property 8 + 2 x its name's characters + its value's size."""
    return (
        4
        + 2 * len(partition_key + row_key)
        + sum(8 + 2 * len(name) + _value_bytes(value) for name, value in properties.items())
    )


def _value_bytes(value: Any) -> int:
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return 4 if -(2**31) <= value < 2**31 else 8
    if isinstance(value, float | datetime):
        return 8
    if isinstance(value, bytes):
        return 4 + len(value)
    return 4 + 2 * len(str(value))


# --------------------------------------------------------------------------- runs


@dataclass
class Results:
    """Every run, by (backend, ``<job>-<size>``); the sizes run, by (backend, job)."""

    runs: dict[tuple[str, str], list[Counted]] = field(default_factory=dict)
    sizes: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    long_seconds: float = LONG_SECONDS
    #: An idle worker's requests (no job), and the seconds it ran, by backend.
    idle: dict[str, list[Counted]] = field(default_factory=dict)

    def add(self, backend: str, what: str, counted: Counted) -> None:
        self.runs.setdefault((backend, what), []).append(counted)


def _job_runs(backend: str, quick: bool, long_seconds: float) -> list[tuple[str, int, Any]]:
    """(job, size, run) of one round on ``backend``: both jobs at both sizes."""
    trivial = (QUICK_TRIVIAL_SIZES if quick else TRIVIAL_SIZES)[backend]
    long = QUICK_LONG_SIZES if quick else LONG_SIZES
    settings = WorkerSettings(burst=True, concurrency=LONG_CONCURRENCY)
    return [
        *(("trivial", n, (Trivial, {"chunks": n}, WorkerSettings(burst=True))) for n in trivial),
        *(("long", n, (Renewing, {"chunks": n, "seconds": long_seconds}, settings)) for n in long),
    ]


def measure(backends: list[str], runs: int, quick: bool) -> Results:
    """Every job ``runs`` times on each backend, interleaved; Azurite started here."""
    results = Results(long_seconds=QUICK_LONG_SECONDS if quick else LONG_SECONDS)
    server = azurite_process.start() if "azurite" in backends else None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-requests-") as scratch:
            for backend in backends:
                where = _locations(Path(scratch), server if backend == "azurite" else None)
                wire = backend == "azurite"
                plan = _job_runs(backend, quick, results.long_seconds)
                for job, _, _ in plan:
                    sizes = tuple(n for j, n, _ in plan if j == job)
                    results.sizes[(backend, job)] = (sizes[0], sizes[1])
                for run in range(runs):
                    for job, size, (cls, params, settings) in plan:
                        counted = run_job(where(), cls, params, size, settings, wire)
                        results.add(backend, f"{job}-{size}", counted)
                        _say(run, backend, f"{job} {size:,}", counted)
                    idle = run_idle(where(), QUICK_IDLE_SECONDS if quick else IDLE_SECONDS, wire)
                    results.idle.setdefault(backend, []).append(idle)
                    _say(run, backend, "idle", idle)
    finally:
        if server is not None:
            server.stop()
    return results


def run_idle(location: str, seconds: float, on_wire: bool) -> Counted:
    """One worker serving an empty queue for ``seconds`` (started, then counted)."""
    window = Window()
    tally = OperationTally(window)
    http = HttpTally(window) if on_wire else None
    with open_storage(location) as storage, http.installed() if http else nullcontext():
        loop = WorkerLoop(metered(storage, tally), [Trivial], WorkerSettings())
        timer = threading.Timer(seconds + IDLE_SETTLE_SECONDS, loop.request_stop)
        # Counted once start-up and the first short polls are over: the steady state.
        opener = threading.Timer(IDLE_SETTLE_SECONDS, window.open)
        timer.start()
        opener.start()
        loop.run()
        window.close()
    assert window.opened_at is not None and window.closed_at is not None
    return Counted(0, window.closed_at - window.opened_at, tally.calls, tally.not_ok, http)


def _say(run: int, backend: str, what: str, counted: Counted) -> None:
    total = sum(n for op, n in counted.operations.items() if not is_start_up(op))
    wire = f", {sum(counted.http.requests.values()):,} HTTP" if counted.http else ""
    print(
        f"run {run + 1} {backend:8} {what:14} {counted.seconds:6.1f} s, {total:,} calls{wire}",
        flush=True,
    )


def _locations(scratch: Path, server: azurite_process.Azurite | None) -> Callable[[], str]:
    """Where each job runs: a fresh embedded directory, or the one Azurite (each job has
    its own id and runs alone, its queue empty when its worker exits)."""
    if server is not None:
        return lambda: server.connection_string
    numbers = iter(range(10**9))
    return lambda: str(scratch / f"store-{next(numbers)}")


# --------------------------------------------------------------------------- figures


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def per_chunk(
    results: Results, backend: str, job: str, count: Callable[[Counted], Counter[str]]
) -> dict[str, float]:
    """Requests per chunk of ``job`` by key: the slope between its two sizes (medians
    of the runs), so what a job makes once drops out."""
    small, big = results.sizes[(backend, job)]
    lows = results.runs.get((backend, f"{job}-{small}"), [])
    highs = results.runs.get((backend, f"{job}-{big}"), [])
    keys = {k for c in lows + highs for k in count(c)}
    return {
        k: (_median([count(c)[k] for c in highs]) - _median([count(c)[k] for c in lows]))
        / (big - small)
        for k in keys
    }


def per_second(
    results: Results, backend: str, count: Callable[[Counted], Counter[str]]
) -> dict[str, float]:
    """An idle worker's requests per second by key (median of the runs)."""
    runs = results.idle.get(backend, [])
    keys = {k for c in runs for k in count(c)}
    return {k: _median([count(c)[k] / c.seconds for c in runs]) for k in keys}


def fixed_per_job(
    results: Results, backend: str, job: str, count: Callable[[Counted], Counter[str]]
) -> dict[str, float]:
    """``job``'s requests that do not grow with its chunks (the intercept)."""
    small, _ = results.sizes[(backend, job)]
    slope = per_chunk(results, backend, job, count)
    lows = results.runs.get((backend, f"{job}-{small}"), [])
    return {k: _median([count(c)[k] for c in lows]) - small * v for k, v in slope.items()}


def by_the_second(counted: Counted) -> Counter[str]:
    """Requests made by the second, not by the chunk: heartbeats, the catalogue (job
    records read again once a second by the job cache and the stop-order checks; a feed step's
    two, one per ~128 chunks, among them) and the shared limits' reads."""
    if counted.http is None:
        return Counter()
    timed: Counter[str] = Counter()
    for wire, count in counted.http.requests.items():
        if wire.partition in ("heartbeats", "catalogue"):
            timed[wire.partition] += count
        elif wire.kind == "queue or container GET":
            timed["limits"] += count
    return timed


def by_the_chunk(counted: Counted) -> Counter[str]:
    """The wire's requests by kind, those made by the second left out."""
    kinds = wire_kinds(counted)
    kinds["by the second"] = -sum(by_the_second(counted).values())
    return kinds


def wire_per_chunk(small: Counted, big: Counted) -> float:
    """Azure requests per chunk made by the chunk (not by the second) between two runs
    of one job at two sizes: the slope, what the budget is set on."""
    total = [sum(by_the_chunk(counted).values()) for counted in (small, big)]
    return (total[1] - total[0]) / (big.chunks - small.chunks)


def budget_line(per_chunk: float) -> str:
    """``per_chunk`` (the trivial job's requests per chunk by the chunk) against the
    budget."""
    verdict = "PASS" if per_chunk <= REQUESTS_PER_CHUNK_BUDGET else "OVER"
    return (
        f"- trivial job, Azure requests per chunk made by the chunk: {per_chunk:.3f} "
        f"against a budget of {REQUESTS_PER_CHUNK_BUDGET:g}: **{verdict}**"
    )


def operations(counted: Counted) -> Counter[str]:
    return Counter({k: v for k, v in counted.operations.items() if not is_start_up(k)})


def start_up(counted: Counted) -> Counter[str]:
    return Counter({k: v for k, v in counted.operations.items() if is_start_up(k)})


def wire_kinds(counted: Counted) -> Counter[str]:
    if counted.http is None:
        return Counter()
    return Counter({k: v for k, v in counted.http.by_kind().items() if not is_start_up(k)})


def wire_partitions(counted: Counted) -> Counter[str]:
    return counted.http.by_partition() if counted.http else Counter()


def wire_bytes(counted: Counted) -> Counter[str]:
    if counted.http is None:
        return Counter()
    return Counter({"sent": counted.http.bytes_sent, "received": counted.http.bytes_received})


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:,.3f}"


def _table(header: list[str], rows: dict[str, list[float | None]], total: str | None) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in sorted(rows):
        lines.append(f"| {key} | " + " | ".join(_cell(v) for v in rows[key]) + " |")
    if total is not None and rows:
        sums = [sum(v or 0.0 for v in column) for column in zip(*rows.values(), strict=True)]
        lines.append(f"| **{total}** | " + " | ".join(f"**{s:,.3f}**" for s in sums) + " |")
    return lines


Figures = list[tuple[str, dict[str, float]]]


def _rows(figures: Figures) -> tuple[list[str], dict[str, list[float | None]]]:
    """Column names, and a row per key that is not zero in some column."""
    keys = sorted({k for _, f in figures for k, v in f.items() if round(v, 3) != 0})
    return [name for name, _ in figures], {k: [f.get(k) for _, f in figures] for k in keys}


def _columns(
    results: Results, backends: list[str], count: Callable[[Counted], Counter[str]]
) -> Figures:
    """Per chunk of each job and per second of an idle worker, each backend."""
    figures = [
        (f"{b} {job}, per chunk", per_chunk(results, b, job, count))
        for job in ("trivial", "long")
        for b in backends
    ]
    return figures + [(f"{b} idle worker, per s", per_second(results, b, count)) for b in backends]


def report(results: Results, args: argparse.Namespace, load: str) -> list[str]:
    """The section's lines: machine, command, method, then the tables."""
    backends = args.backend
    command = " ".join(
        ["python -m tests.bench.requests_per_chunk", f"--runs {args.runs}"]
        + (["--quick"] if args.quick else [])
    )
    sizes = {
        job: "; ".join(
            f"{b} {results.sizes[(b, job)][0]:,} and {results.sizes[(b, job)][1]:,}"
            for b in backends
        )
        for job in ("trivial", "long")
    }
    idle = _median([c.seconds for b in backends for c in results.idle.get(b, [])])
    names, rows = _rows(_columns(results, backends, operations))
    version = azurite_process.installed_version() if "azurite" in backends else "-"
    return [
        machine_line(),
        load,
        f"Command: `make bench` (`{command}`). Medians of {args.runs} run(s) of each job on a "
        f"fresh store (embedded: a temp directory, real clock; Azurite {version} with disk "
        "persistence on loopback), one worker loop in the benchmark's process.",
        "",
        "Each job counted from just before `submit` to its burst-mode worker's exit: "
        "planning, every chunk, finalize, heartbeats and the exit checks. *Operations* are "
        "calls of the storage protocols as `checkpoint.metering` names them (one "
        "`queue_send_many` is one operation); on Azurite every HTTP request the SDKs sent "
        "is counted too, by kind and by table partition (`tests/bench/request_tally.py`). "
        "Each job runs at two sizes; *per chunk* is the slope between them, so what a job "
        "makes once (listed below) drops out. "
        f"*Trivial*: `process` returns at once, {sizes['trivial']} chunks, one worker of "
        "default settings (concurrency 1, prefetch adapting). "
        f"*Long*: chunks of {results.long_seconds:g} s under a 4 s lease (renewed every "
        "2 s), `checkpoint` called every 0.1 s and written at most once a second "
        f"(`checkpoint_interval_seconds = 1`), {sizes['long']} chunks, concurrency "
        f"{LONG_CONCURRENCY}. *Idle worker*: `runner start` settings serving an empty "
        f"queue, counted for {idle:.1f} s after {IDLE_SETTLE_SECONDS:g} s to settle.",
        "",
        *(_budget_section(results) if "azurite" in backends else []),
        "### Operations per chunk",
        "",
        *_table(["operation", *names], rows, "all operations"),
        *(_wire_section(results) if "azurite" in backends else []),
        *_fixed_section(results, backends),
    ]


def _budget_section(results: Results) -> list[str]:
    total = sum(per_chunk(results, "azurite", "trivial", wire_kinds).values())
    timed = per_chunk(results, "azurite", "trivial", by_the_second)
    return [
        "### Budget",
        "",
        budget_line(sum(per_chunk(results, "azurite", "trivial", by_the_chunk).values())),
        "- by the second (in the total, not the budget): "
        + ", ".join(f"{k} {v:.3f}" for k, v in sorted(timed.items()))
        + f"; all requests {total:.3f} per chunk (issue 30's target 3.2: "
        + ("met" if total <= 3.2 else "not met")
        + ")",
        "",
        f"`REQUESTS_PER_CHUNK_BUDGET` in `tests/bench/requests_per_chunk.py`; "
        f"`tests/bench/test_requests_per_chunk.py` counts the same job at "
        f"{BUDGET_SIZES[0]:,} and {BUDGET_SIZES[1]:,} chunks and fails over it.",
        "",
    ]


def _wire_section(results: Results) -> list[str]:
    names, rows = _rows(_columns(results, ["azurite"], wire_kinds))
    parts, part_rows = _rows(_columns(results, ["azurite"], wire_partitions))
    bytes_names, byte_rows = _rows(_columns(results, ["azurite"], wire_bytes))
    return [
        "",
        "### Azure HTTP requests per chunk (Azurite)",
        "",
        "One request per message of a `*_many` call; a `table batch` (an entity group "
        "transaction of up to 100 operations in one partition) is one request.",
        "",
        *_table(["HTTP request", *names], rows, "all requests"),
        "",
        "By table partition (`checkpoint/layout.py`): *catalogue* the `jobs` partition of "
        f"`{layout.JOBS_TABLE}`, *shard* the job's {layout.SHARDS} chunk partitions, *control* "
        "its planning / finalize partition, *heartbeats* the workers' partition.",
        "",
        *_table(["table partition", *parts], part_rows, None),
        "",
        "Bytes of HTTP bodies (request bodies sent, response bodies received):",
        "",
        *_table(["bytes", *bytes_names], byte_rows, None),
        "",
        *_sizes_lines(results),
    ]


def _sizes_lines(results: Results) -> list[str]:
    """How evenly the shards shared the load, and what a record and a message weigh."""
    big = results.sizes[("azurite", "trivial")][1]
    shards = [c.shard_keys for c in results.runs.get(("azurite", f"trivial-{big}"), [])]
    share = [max(s.values()) / sum(s.values()) for s in shards if s]
    lines = [
        f"Busiest shard's share of the shard partitions' requests, {big:,}-chunk trivial job: "
        + (f"{_median(share):.1%} (an even spread is {1 / layout.SHARDS:.1%})." if share else "-"),
    ]
    for job in ("trivial", "long"):
        runs = [
            c
            for (b, what), cs in results.runs.items()
            if b == "azurite" and what.startswith(f"{job}-")
            for c in cs
        ]
        if not runs:
            continue
        sends = [
            c.http.sent_by_kind["queue send"] / c.http.by_kind()["queue send"]
            for c in runs
            if c.http and c.http.by_kind()["queue send"]
        ]
        lines += [
            "",
            f"{job.capitalize()} job: a done chunk record {runs[0].record_bytes:,} bytes by "
            "Azure's entity-size formula (properties "
            f"{', '.join(runs[0].record_properties)}); a queue send's request body "
            f"{_median(sends):,.0f} bytes on average (the message base64 in XML; the plan "
            "and finalize messages among them).",
        ]
    return lines


def _fixed_section(results: Results, backends: list[str]) -> list[str]:
    figures = [
        (f"{b} {job}", fixed_per_job(results, b, job, operations))
        for job in ("trivial", "long")
        for b in backends
    ]
    keys = sorted({k for _, f in figures for k, v in f.items() if round(v) != 0})
    first = {
        b: [c for (k, _), cs in results.runs.items() if k == b for c in cs][:1] for b in backends
    }
    made = {b: sum(start_up(first[b][0]).values()) if first[b] else 0 for b in backends}
    return [
        "",
        "### Fixed per job and per worker start",
        "",
        "Each job's intercept: requests that do not grow with its chunks (its record, "
        "planning's own, the shard counters read as shards complete, finalize, the exit "
        "checks); fractional or negative where runs differed in timing.",
        "",
        "| operation | " + " | ".join(name for name, _ in figures) + " |",
        "|" + "---|" * (len(figures) + 1),
        *(f"| {k} | " + " | ".join(f"{f.get(k, 0):,.1f}" for _, f in figures) + " |" for k in keys),
        "",
        "Creating tables, queues and the container, once per worker start: "
        + ", ".join(f"{b} {made[b]:,} calls" for b in backends)
        + " (each backend's first run on a fresh store; in no figure above).",
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="runs per job (3; quick: 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small jobs, 1 run")
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    args.backend = args.backend or list(BACKENDS)
    args.runs = args.runs or (1 if args.quick else 3)
    return args


def main(argv: list[str] | None = None) -> Results:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    sampler = LoadSampler("Azurite's Node process on that backend")
    sampler.start()
    results = measure(args.backend, args.runs, args.quick)
    body = report(results, args, sampler.stop())
    print("\n".join(body))
    if args.output:
        write_section(args.output, SECTION, body)
    return results


if __name__ == "__main__":
    main()
