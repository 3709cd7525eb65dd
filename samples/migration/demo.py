"""``python -m samples.migration.demo``: the migration pipeline end to end, a worker killed.

    python -m samples.migration.demo                     # embedded store in a fresh temp folder
    python -m samples.migration.demo --rows 200000       # smaller / larger
    python -m samples.migration.demo --azurite           # a private Azurite (make demo-azure)
    python -m samples.migration.demo --storage "$CONN"   # your Azure Storage account
    python -m samples.migration.demo --cluster           # on a loopback Spark cluster
    python -m samples.migration.demo --bad-rows          # verify fails, the source is fixed

1. generate the legacy v1 orders into the blob store (container ``orders-v1``);
2. submit the pipeline (:mod:`.pipeline`: stage -> transform -> verify -> publish) and
   start two ``runner start`` worker processes serving its four job types;
3. show each step's progress from ``runner status --pipeline ID --json``; as soon as a
   worker holds a transform chunk that has checkpointed a batch, SIGKILL it (with its
   Spark JVM) and start a replacement;
4. show the chunk resumed from its checkpoint by another worker (attempt 2);
5. once the pipeline is done, show the verify step's verdict and the published manifest,
   run the same transform once over all the input with plain Spark and compare row
   counts and content checksums. Exit 0 only if all agree.

With ``--bad-rows`` (:mod:`.bad_rows`), broken lines are appended to two source blobs
once the stage step has copied them: verify fails and publish is shown blocked; then the
source is fixed, ``runner poison redrive`` runs the failed verify chunks again, two new
workers finish the pipeline, and the demo counts the chunks that ran again.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkpoint.backends import open_storage
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.spark import SparkSettings, spark_session
from samples.migration.bad_rows import BadRows, fix_and_redrive, plant_when_staged
from samples.migration.cluster import LoopbackCluster
from samples.migration.demo_cluster import SparkKill, SparkSide
from samples.migration.demo_watch import (
    ClusterSide,
    Crash,
    PipelineWatch,
    Say,
    Steps,
    start_workers,
    wait_for_exit,
)
from samples.migration.generate import Generated, generate
from samples.migration.job import MigrateOrders
from samples.migration.layout import MigrationParams, get_json
from samples.migration.pipeline import STEPS, migration_pipeline
from samples.migration.processes import Runner
from samples.migration.verify import Verdict, verify

DEFAULT_ROWS = 2_000_000
DEFAULT_FILES = 24
DEFAULT_FILES_PER_CHUNK = 4
#: Transform batches per chunk of the verify step: the demo's 8 files make 4 chunks.
VERIFY_BATCHES_PER_CHUNK = 2


@dataclass(frozen=True)
class DemoOptions:
    """What the demo runs; see ``--help``."""

    storage: str | None = None
    rows: int = DEFAULT_ROWS
    files: int = DEFAULT_FILES
    files_per_chunk: int = DEFAULT_FILES_PER_CHUNK
    kill: bool = True
    timeout_seconds: float = 1800.0
    #: Extra ``runner start`` options for every worker (``--spark-master ...``).
    worker_args: tuple[str, ...] = ()
    #: Say in the params that the staging scratch is readable by every executor.
    scratch_shared: bool = False
    #: Spoil two source blobs once staged, and fix them after verify failed.
    bad_rows: bool = False


@dataclass(frozen=True)
class DemoResult:
    """What a demo run did and found. ``job_id`` is the transform step's: its output
    folder's name."""

    job_id: str
    generated: Generated
    summary: dict[str, Any]
    manifest: dict[str, Any]
    crash: Crash | None
    verdict: Verdict
    exit_codes: dict[str, int | None]
    spark_kill: SparkKill | None = None
    steps: Steps | None = None
    pipeline_state: str = ""
    #: The verify step's ``verdict.json`` and the publish step's manifest.
    checked: dict[str, Any] | None = None
    published: dict[str, Any] | None = None
    bad_rows: BadRows | None = None

    @property
    def ok(self) -> bool:
        """The pipeline done, its output equal to the one-shot run's, and with
        ``--bad-rows``, only the failed verify chunks run again."""
        redriven = self.bad_rows is None or self.bad_rows.only_what_differed_ran
        return self.pipeline_state == "done" and self.verdict.ok and redriven


def run_demo(
    options: DemoOptions, workdir: Path, say: Say = print, cluster: ClusterSide | None = None
) -> DemoResult:
    """Run the whole demo with its files under ``workdir``; raises if the pipeline fails
    (but for the verify step with ``--bad-rows``, which it then fixes)."""
    storage = options.storage or str(workdir / "store")
    with open_storage(storage) as opened:
        say(f"storage: {opened.description}")
        started = time.monotonic()
        generated = generate(opened, options.rows, options.files)
        say(
            f"1. generated {generated.rows:,} legacy v1 rows ({generated.bytes / 1e6:.0f} MB) in "
            f"{len(generated.names)} blobs of container {generated.container!r} "
            f"({time.monotonic() - started:.0f} s)"
        )
        params = job_params(opened, generated, options.files_per_chunk, workdir)
        if options.scratch_shared:
            params["scratch_shared"] = True
        steps = _submit(opened, params, say)
    runner = Runner(storage, workdir)
    bad = BadRows() if options.bad_rows else None
    try:
        start_workers(runner, options.worker_args, say)
        with open_storage(storage) as watched:
            watch = PipelineWatch(
                runner,
                steps,
                say,
                CheckpointStore(watched),
                worker_args=options.worker_args,
                timeout_seconds=options.timeout_seconds,
                cluster=cluster,
                expect_verify_failure=bad is not None,
            )
            if bad is not None:
                watch.on_staged = lambda: plant_when_staged(watch, watched, generated, bad)
            state, crash = watch.run(kill=options.kill)
            if bad is not None:
                state = fix_and_redrive(watch, watched, bad)
        exit_codes = wait_for_exit(runner, say)
        if cluster is not None:
            cluster.report(say)
    except BaseException:
        for worker in runner.workers:
            say(f"--- {worker.name} log, last lines ---\n{worker.tail()}")
        raise
    finally:
        runner.kill_all()
    result = _conclude(storage, workdir, steps, generated, crash, exit_codes, say)
    if bad is not None and bad.run_again is not None:
        again = bad.run_again
        say(
            f"REDRIVE: {again.count} chunks ran again of the {again.from_scratch} a rerun "
            "from scratch would run: "
            + (
                "only the verify chunks that differed"
                if bad.only_what_differed_ran
                else "MORE than the verify chunks that differed"
            )
        )
    return replace(result, pipeline_state=state, bad_rows=bad)


def _submit(opened: Storage, params: dict[str, Any], say: Say) -> Steps:
    """Submit the pipeline (:func:`~.pipeline.migration_pipeline`); its steps."""
    pipeline_id = f"orders-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    run = migration_pipeline(
        pipeline_id,
        params,
        stage_chunk_bytes=params["chunk_bytes"],
        batches_per_chunk=VERIFY_BATCHES_PER_CHUNK,
    )
    steps = Steps(pipeline_id, *run.submit(opened))
    say(
        f"2. submitted pipeline {pipeline_id}: {' -> '.join(STEPS)} (jobs "
        f"{pipeline_id}-<step>; the worker that ends a step starts the next)"
    )
    return steps


def run_cluster_demo(
    options: DemoOptions,
    workdir: Path,
    say: Say = print,
    *,
    connect: bool = True,
    cluster: LoopbackCluster | None = None,
) -> DemoResult:
    """:func:`run_demo` against a :class:`LoopbackCluster` started (and stopped) for it:
    the runner workers are Spark Connect clients of its server (``connect``) or else
    classic drivers on its master; a Spark worker is SIGKILLed with the runner worker.

    ``cluster``: one already started (the tests' shared one) to run on instead, left
    running, one Spark worker short; ``connect`` is then what it was started with."""
    if cluster is not None:
        return _on_cluster(options, workdir, say, cluster)
    with LoopbackCluster(workdir / "cluster", connect=connect) as started:
        return _on_cluster(options, workdir, say, started)


def _on_cluster(
    options: DemoOptions, workdir: Path, say: Say, cluster: LoopbackCluster
) -> DemoResult:
    side = SparkSide(cluster, runner_logs=workdir)
    say(side.describe())
    # Staging scratch is a local folder; every executor reads it: all on this machine.
    options = replace(options, worker_args=side.worker_args(), scratch_shared=True)
    result = run_demo(options, workdir, say, cluster=side)
    return replace(result, spark_kill=side.kill)


def job_params(
    opened: Storage, generated: Generated, files_per_chunk: int, workdir: Path
) -> dict[str, Any]:
    """The job's params for ``generated``: chunks of ``files_per_chunk`` files, one file
    per batch, output and staging scratch under ``workdir``."""
    # Files are of nearly equal size: room for `files_per_chunk` of the largest packs
    # exactly that many into each chunk.
    largest = max(opened.blobs.info(generated.container, n).size for n in generated.names)
    return {
        "output": str(workdir / "output"),
        "scratch": str(workdir / "scratch"),
        "input_container": generated.container,
        "chunk_bytes": largest * files_per_chunk,
        "files_per_batch": 1,
    }


# --------------------------------------------------------------------------- the verdict


def _conclude(
    storage: str,
    workdir: Path,
    steps: Steps,
    generated: Generated,
    crash: Crash | None,
    exit_codes: dict[str, int | None],
    say: Say,
) -> DemoResult:
    settings = MigrationParams.of({"output": str(workdir / "output")})
    results = settings.results_container
    job_id = steps.transform
    with open_storage(storage) as opened:
        manifest = get_json(opened, results, f"{job_id}/manifest.json")
        summary = get_json(opened, results, f"{job_id}/summary.json")
        _report(summary, manifest, crash, say)
        if crash is not None:
            _report_wait(CheckpointStore(opened), job_id, crash, say)
        checked = get_json(opened, results, f"{steps.verify}/verdict.json")
        published = get_json(opened, results, f"{steps.pipeline}/manifest.json")
        say(
            f"   verify: {checked['files']} source blobs in {checked['chunks']} chunks, "
            f"{checked['source_lines']:,} lines now = {checked['rows_in']:,} rows the transform "
            f"read; {checked['outputs_checked']} outputs' commit markers as the manifest says; "
            f"{checked['differences']} differences"
        )
        say(
            f"   publish: {results}/{steps.pipeline}/manifest.json, "
            f"{len(published['outputs'])} outputs, {published['rows_out']:,} orders"
        )
        started = time.monotonic()
        spark = spark_session(SparkSettings.for_job(MigrateOrders))
        say(
            "5. one-shot plain Spark run of the same transform over all the input (a "
            f"classic driver in this process, master {spark.sparkContext.master}), compared "
            "with what was published ..."
        )
        verdict = verify(
            spark,
            opened,
            settings,
            list(generated.names),
            (published, published),  # its outputs, and the totals: as the summary's
            workdir / "one-shot",
        )
    say(f"   ({time.monotonic() - started:.0f} s)")
    for line in verdict.lines():
        say("   " + line)
    say(
        "VERDICT: "
        + (
            "the chunked, crash-resumed migration equals the one-shot run"
            if verdict.ok
            else "MISMATCH between the chunked and the one-shot run"
        )
    )
    return DemoResult(
        job_id,
        generated,
        summary,
        manifest,
        crash,
        verdict,
        exit_codes,
        steps=steps,
        checked=checked,
        published=published,
    )


def _report(
    summary: dict[str, Any], manifest: dict[str, Any], crash: Crash | None, say: Say
) -> None:
    say(
        f"   job done: {summary['chunks']} chunks, {len(manifest['outputs'])} published outputs; "
        f"rows in {summary['rows_in']:,} -> out {summary['rows_out']:,}, rejected "
        f"{summary['rows_rejected']:,}, duplicates dropped {summary['duplicates_dropped']:,}"
    )
    say(
        "   rejected by reason: "
        + ", ".join(f"{reason} {count}" for reason, count in summary["rejected_by_reason"].items())
    )
    for chunk in summary["per_chunk"]:
        if chunk["attempt"] > 1:
            say(
                f"   chunk #{chunk['index']}: attempt {chunk['attempt']} resumed at batch "
                f"{chunk['resumed_at_batch']} of {chunk['of']}"
            )
    if crash is not None and crash.resumed_by is None:
        say(f"   (chunk #{crash.chunk} was resumed between two status polls)")


def _report_wait(store: CheckpointStore, job_id: str, crash: Crash, say: Say) -> None:
    """How long the killed chunk waited once its lease ran out, and how many fresh chunks
    started meanwhile (resumed work first: docs/semantics.md §20)."""
    starts = {c.index: c.properties.get("started_on") for c in store.chunks(job_id)}
    started = starts.get(crash.chunk)
    resumed_on = started if isinstance(started, datetime) else crash.resumed_on
    lease_until = crash.lease_until
    if lease_until is None or resumed_on is None:
        return
    ahead = [
        index
        for index, at in starts.items()
        if index != crash.chunk and isinstance(at, datetime) and lease_until < at < resumed_on
    ]
    wait = (resumed_on - lease_until).total_seconds()
    say(
        f"   chunk #{crash.chunk} started again {wait:.1f} s after its lease ran out; "
        f"fresh chunks started before it meanwhile: {len(ahead)}"
        + (f" ({', '.join(f'#{i}' for i in ahead)})" if ahead else "")
    )


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--storage", help="as runner --storage (default: a fresh embedded store)")
    where.add_argument("--azurite", action="store_true", help="start a private Azurite for it")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--files", type=int, default=DEFAULT_FILES)
    parser.add_argument("--files-per-chunk", type=int, default=DEFAULT_FILES_PER_CHUNK)
    parser.add_argument("--no-kill", dest="kill", action="store_false", help="no crash")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="on a loopback Spark cluster, workers as Spark Connect clients",
    )
    parser.add_argument(
        "--classic",
        action="store_true",
        help="with --cluster: workers as classic drivers, no Connect server",
    )
    parser.add_argument(
        "--bad-rows",
        action="store_true",
        help="spoil two source blobs once staged: verify fails; then fix and redrive",
    )
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: temp)")
    args = parser.parse_args(argv)
    options = DemoOptions(
        args.storage, args.rows, args.files, args.files_per_chunk, args.kill, bad_rows=args.bad_rows
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="migration-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        if args.azurite:
            from tests import azurite  # the test suite's helper: free ports, disk mode

            with azurite.start(workdir / "azurite") as server:
                options = replace(options, storage=server.connection_string)
                result = _run(args, options, workdir)
        else:
            result = _run(args, options, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"demo took {time.monotonic() - started:.0f} s")
    return 0 if result.ok else 1


def _run(args: argparse.Namespace, options: DemoOptions, workdir: Path) -> DemoResult:
    if args.cluster:
        return run_cluster_demo(options, workdir, connect=not args.classic)
    return run_demo(options, workdir)


if __name__ == "__main__":
    sys.exit(main())
