"""Storage calls per chunk with one queue and with four -> the "Several queues per job
type" section of BENCHMARKS.md.

``python -m tests.bench.queues [--runs 3] [--quick] [--backend ...] [--output BENCHMARKS.md]``

The trivial job (:class:`~tests.bench.chunk_jobs.Trivial`) and the same job on four
queues (:class:`~tests.bench.chunk_jobs.TrivialSpread`), counted as the chunk-engine
benchmark counts them (:mod:`tests.bench.throughput`, one worker loop, default
settings): end to end, and processing alone after planning. Runs of the two jobs
alternate, so a change in the machine's load touches both alike; figures are medians.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from checkpoint.backends import open_storage
from jobs.job import ChunkedJob
from runner.worker.loop import WorkerSettings
from tests import azurite as azurite_process
from tests.bench import throughput
from tests.bench.chunk_jobs import Trivial, TrivialSpread
from tests.bench.chunks import BACKENDS, CHUNKS, QUICK_CHUNKS
from tests.bench.chunks_report import Results, _azure_requests, calls_rows
from tests.bench.report import LoadSampler, machine_line, write_section

TITLE = "Several queues per job type: storage calls per chunk"
JOBS: dict[str, type[ChunkedJob]] = {"1 queue": Trivial, "4 queues": TrivialSpread}


def measure(
    location: str, chunks: int, job: type[ChunkedJob], results: Results, key: tuple[str, str]
) -> None:
    """One end-to-end run and one processing-alone run of ``job`` at ``location``."""
    with open_storage(location) as storage:
        throughput.submit_trivial(storage, chunks, job)
        whole = throughput.run_in_process(storage, chunks, WorkerSettings(burst=True), job)
    with open_storage(location) as storage:
        throughput.submit_trivial(storage, chunks, job)
        throughput.plan_only(storage, chunks, job)
        alone = throughput.run_in_process(storage, chunks, WorkerSettings(burst=True), job)
    results.end_to_end.setdefault(key, []).append(whole)
    results.processing.setdefault(key, []).append(alone)
    print(
        f"{key[0]:8} {key[1]:8} end to end {whole.rate:8,.1f}/s  processing {alone.rate:8,.1f}/s",
        flush=True,
    )


def run(backends: list[str], runs: int, chunks: dict[str, int]) -> Results:
    results = Results()
    server = azurite_process.start() if "azurite" in backends else None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-queues-") as scratch:
            numbers = iter(range(10**9))
            for _ in range(runs):
                for backend in backends:
                    for label, job in JOBS.items():
                        location = (
                            server.connection_string
                            if backend == "azurite" and server is not None
                            else str(Path(scratch) / f"store-{next(numbers)}")
                        )
                        measure(location, chunks[backend], job, results, (backend, label))
    finally:
        if server is not None:
            server.stop()
    return results


def report(results: Results, args: argparse.Namespace, load: str) -> list[str]:
    command = " ".join(
        ["python -m tests.bench.queues", f"--runs {args.runs}"]
        + (["--quick"] if args.quick else [])
        + ([f"--backend {b}" for b in args.backend] if args.backend != list(BACKENDS) else [])
    )
    sizes = ", ".join(f"{args.chunks[b]:,} on {b}" for b in args.backend)
    return [
        machine_line(),
        load,
        f"Command: `{command}`. Median of {args.runs} run(s); runs of the two jobs alternate.",
        "",
        "The trivial job of the chunk-engine benchmark, on one queue and on four "
        f"(`queues = 4`), chunks per job: {sizes}; one worker loop, default settings "
        '(concurrency 1, prefetch adapting), burst mode, counted as in "Storage calls per '
        "chunk\" above (from the first receive to the job record set done). A chunk's "
        "messages are sent, received and deleted the same way on four queues, only spread; "
        "the differences: planning sends one `send_many` per queue a page of 400 reaches "
        "(4 calls a page, the same messages) and the finisher one `delete_many` per queue "
        "its batch holds messages of (more calls, the same messages: on Azure each message "
        "is a request either way); a poll that gets fewer messages than the worker has "
        "room for goes on to the next queue, so the tail of the job (queues emptying one "
        "after the other) and the polls while planning runs add a few empty receives; and "
        "where one queue's turn ends and the next one's begins, the worker's finished "
        "chunks straddle blocks of two queues, so a few more done batches, each with its "
        "completion check (a read of the job's record, `records.get`). Turns of two "
        "receives (`runner/worker/receiving/polling.py`) keep these to about 0.03 each per chunk; "
        "turns of one receive measured twice that.",
        "",
        *calls_rows(results, [(b, label) for b in args.backend for label in JOBS]),
        "",
        *difference_lines(results, args.backend),
    ]


def difference_lines(results: Results, backends: list[str]) -> list[str]:
    """Requests on Azure per chunk, four queues against one, for each measured window."""
    lines = []
    for backend in backends:
        for kind, table in (("end to end", results.end_to_end), ("processing", results.processing)):
            one, four = (
                statistics.median(_azure_requests(m.per_chunk()) for m in table[(backend, label)])
                for label in JOBS
            )
            lines.append(
                f"- {backend} {kind}: {one:.3f} requests per chunk on one queue, {four:.3f} on "
                f"four ({four - one:+.3f}, {100 * (four - one) / one:+.1f} %)"
            )
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (3; quick: 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small jobs, 1 run")
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    args.backend = args.backend or list(BACKENDS)
    args.runs = args.runs or (1 if args.quick else 3)
    args.chunks = QUICK_CHUNKS if args.quick else CHUNKS
    return args


def main(argv: list[str] | None = None) -> Results:
    args = parse_args(argv)
    sampler = LoadSampler("one worker loop in this process, and Azurite")
    sampler.start()
    results = run(args.backend, args.runs, args.chunks)
    lines = report(results, args, sampler.stop())
    print("\n".join(lines))
    if args.output is not None:
        write_section(args.output, TITLE, lines)
    return results


if __name__ == "__main__":
    main()
