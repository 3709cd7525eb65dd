"""The migration pipeline's failed verify, redriven: chunks run again against a rerun.

    python -m tests.bench.pipeline_redrive [--rows 200000] [--files 24] --output BENCHMARKS.md

Runs the demo's ``--bad-rows`` path (``samples.migration.demo``, embedded store, a
worker SIGKILLed in the transform as always): two source blobs spoiled once staged,
verify fails and blocks publish; the blobs put right, ``runner poison redrive`` on the
verify step, two new workers. Counted from the chunk records: the chunks whose last
attempt started after the redrive, against every chunk of every step (what a rerun of
the pipeline from scratch would run). Also the wall time of the first run (workers'
start to verify failed) and of the redrive (to the pipeline done), and the demo's
one-shot check of what was published.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from samples.migration.demo import DemoOptions, DemoResult, run_demo
from tests.bench.report import LoadSampler, machine_line, write_section

SECTION = "Migration pipeline: a failed verify redriven"


def measure(rows: int, files: int, files_per_chunk: int) -> DemoResult:
    """One run of the demo's ``--bad-rows`` path in a temporary folder."""
    workdir = Path(tempfile.mkdtemp(prefix="pipeline-redrive-"))
    try:
        options = DemoOptions(None, rows, files, files_per_chunk, bad_rows=True)
        return run_demo(options, workdir, say=lambda line: print(line, flush=True))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def report(result: DemoResult, args: argparse.Namespace, load: str) -> list[str]:
    """The section's lines."""
    bad = result.bad_rows
    if bad is None or bad.run_again is None or bad.planted is None:
        raise ValueError("the run did not take the --bad-rows path to its end")
    again = bad.run_again
    lines = [
        machine_line(),
        load,
        f"Command: `python -m tests.bench.pipeline_redrive --rows {args.rows} --files "
        f"{args.files} --files-per-chunk {args.files_per_chunk}` (`make bench`): the "
        "demo's `--bad-rows` path on the embedded store, two `runner start --burst` "
        "workers serving the four steps, one SIGKILLed in the transform. Once the stage "
        f"step is done, {len(bad.planted.before)} source blobs get 3 broken lines each; "
        "verify fails on their chunks and publish is blocked; the blobs are put back as "
        "staged, `runner poison redrive <pipeline>-verify` runs, two new workers finish "
        "the pipeline. Chunks counted from their records (last attempt started after the "
        "redrive); a rerun from scratch runs every chunk of every step.",
        "",
        "| step | chunks | run again after the redrive |",
        "|---|---|---|",
    ]
    for step, total in again.total.items():
        ran = again.started.get(step, [])
        which = f"{len(ran)} ({', '.join(f'#{i}' for i in ran)})" if ran else "0"
        lines.append(f"| {step} | {total} | {which} |")
    lines += [
        f"| **all** | **{again.from_scratch}** (a rerun from scratch) | **{again.count}** |",
        "",
        f"- Chunks run again: **{again.count} of {again.from_scratch}** "
        f"({again.count / again.from_scratch:.0%}): only verify's failed chunks "
        f"({'exactly those' if bad.only_what_differed_ran else 'NOT only those'}); "
        "publish has no chunks, its finalize writes the manifest.",
        f"- Wall time: from the workers' start to verify failed "
        f"{bad.failed_after_seconds:.0f} s (their Spark JVMs' start, the kill and the "
        f"resume included); from the redrive to the pipeline done "
        f"{bad.redrive_seconds:.0f} s (two workers started, no Spark).",
        f"- Pipeline `{result.pipeline_state}`; what was published equals the one-shot "
        f"Spark run: {'yes' if result.verdict.ok else 'NO'}.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--files-per-chunk", type=int, default=4)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    sampler = LoadSampler("the demo's workers, one Spark JVM each, and the one-shot check")
    sampler.start()
    try:
        result = measure(args.rows, args.files, args.files_per_chunk)
    finally:
        load = sampler.stop()
    body = report(result, args, load)
    print("\n".join(body))
    if args.output:
        write_section(args.output, SECTION, body)
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
