"""A chunk's storage requests with few and with many jobs retained -> BENCHMARKS.md.

``python -m tests.bench.retained [--retained 10000] [--chunks 1500] [--runs 1] [--output ...]``

Each run: a fresh store (embedded: a temp directory; Azurite: the one server, its jobs
partition emptied of the filler between runs) holding ``retained`` ended jobs of another
type (records written straight into the jobs partition by batches of 100), then the
trivial job of ``chunks`` chunks (past its feed window, so its feed steps run) and one
burst-mode worker, counted as :mod:`tests.bench.requests_per_chunk` counts (protocol
calls; on Azurite every HTTP request, by kind and table partition). Per chunk here is the
job's whole count over its chunks (submit to exit), at 10 and at ``retained`` jobs: no
worker step may read the catalogue on the hot path, so the two must match.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from collections import Counter
from pathlib import Path

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.storage import BatchOp, PropertyValue, Storage
from runner.worker.loop import WorkerSettings
from tests import azurite as azurite_process
from tests.bench.chunk_jobs import Trivial
from tests.bench.report import machine_line, write_section
from tests.bench.request_tally import is_start_up
from tests.bench.requests_per_chunk import Counted, run_job

SECTION = "Requests per chunk with jobs retained"
BACKENDS = ("embedded", "azurite")
FEW = 10
FILLER: dict[str, PropertyValue] = {
    "job_type": "bench:Old",
    "queue": "bench-old",
    "state": "done",
    "priority": 0,
}


def fill(storage: Storage, count: int) -> list[str]:
    """``count`` ended jobs of another type in the catalogue; their row keys."""
    storage.records.create_table(layout.JOBS_TABLE)
    rows = [f"retained-{i:06d}" for i in range(count)]
    _apply(storage, [BatchOp("upsert_replace", row, FILLER) for row in rows])
    return rows


def empty(storage: Storage, rows: list[str]) -> None:
    _apply(storage, [BatchOp("delete", row) for row in rows])


def _apply(storage: Storage, operations: list[BatchOp]) -> None:
    for first in range(0, len(operations), 100):
        part = operations[first : first + 100]
        storage.records.batch(layout.JOBS_TABLE, layout.JOBS_PARTITION, part)


def one_run(location: str, retained: int, chunks: int, wire: bool) -> Counted:
    with open_storage(location) as storage:
        rows = fill(storage, retained)
    try:
        return run_job(
            location, Trivial, {"chunks": chunks}, chunks, WorkerSettings(burst=True), wire
        )
    finally:
        with open_storage(location) as storage:
            empty(storage, rows)


def requests(counted: Counted) -> Counter[str]:
    """Azure requests on the wire (Azurite), else protocol calls, start-up left out."""
    if counted.http is not None:
        kinds = counted.http.by_kind()
        catalogue = counted.http.by_partition()["catalogue"]
        return Counter(
            {"all": sum(n for k, n in kinds.items() if not is_start_up(k)), "catalogue": catalogue}
        )
    calls = sum(n for k, n in counted.operations.items() if not is_start_up(k))
    return Counter({"all": calls})


def measure(
    backends: list[str], retained: int, chunks: int, runs: int
) -> dict[tuple[str, int], list[Counted]]:
    found: dict[tuple[str, int], list[Counted]] = {}
    server = azurite_process.start() if "azurite" in backends else None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-retained-") as scratch:
            number = 0
            for _ in range(runs):
                for backend in backends:
                    for count in (FEW, retained):
                        number += 1
                        location = (
                            server.connection_string
                            if backend == "azurite" and server
                            else str(Path(scratch) / f"store-{number}")
                        )
                        counted = one_run(location, count, chunks, backend == "azurite")
                        found.setdefault((backend, count), []).append(counted)
                        figures = requests(counted)
                        print(
                            f"{backend:8} {count:>6,} jobs retained: "
                            f"{figures['all'] / chunks:.3f} per chunk "
                            f"(catalogue {figures['catalogue'] / chunks:.3f}), "
                            f"{counted.seconds:.1f} s",
                            flush=True,
                        )
    finally:
        if server is not None:
            server.stop()
    return found


def report(found: dict[tuple[str, int], list[Counted]], args: argparse.Namespace) -> list[str]:
    lines = [
        machine_line(),
        f"Command: `python -m tests.bench.retained --retained {args.retained} --chunks "
        f"{args.chunks} --runs {args.runs}`. The trivial job of {args.chunks:,} chunks "
        f"(feed window 256, so its feed steps run) and one burst-mode worker of default "
        f"settings, on a store holding {FEW} or {args.retained:,} ended jobs of another type; "
        "counted from submit to the worker's exit, over the job's chunks (median of the "
        "runs). Embedded: protocol calls; Azurite 3.35.0 on loopback: HTTP requests "
        "(one per message of a `*_many`), and those to the catalogue (the `jobs` "
        "partition) apart.",
        "",
        "| backend | jobs retained | requests per chunk | of them to the catalogue | seconds |",
        "|---|---|---|---|---|",
    ]
    for (backend, count), runs in sorted(found.items()):
        per = [requests(c) for c in runs]
        all_ = statistics.median(p["all"] for p in per) / args.chunks
        cat = statistics.median(p["catalogue"] for p in per) / args.chunks
        seconds = statistics.median(c.seconds for c in runs)
        catalogue = f"{cat:.3f}" if backend == "azurite" else "-"
        lines.append(f"| {backend} | {count:,} | {all_:.3f} | {catalogue} | {seconds:.1f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retained", type=int, default=10_000)
    parser.add_argument("--chunks", type=int, default=1_500)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    found = measure(args.backend or list(BACKENDS), args.retained, args.chunks, args.runs)
    body = report(found, args)
    print("\n".join(body))
    if args.output:
        write_section(args.output, SECTION, body)


if __name__ == "__main__":
    main()
