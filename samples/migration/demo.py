"""``python -m samples.migration.demo``: the migration end to end, a worker killed mid-way.

    python -m samples.migration.demo                     # embedded store in a fresh temp folder
    python -m samples.migration.demo --rows 200000       # smaller / larger
    python -m samples.migration.demo --azurite           # a private Azurite (make demo-azure)
    python -m samples.migration.demo --storage "$CONN"   # your Azure Storage account
    python -m samples.migration.demo --cluster           # on a loopback Spark cluster

1. generate the legacy v1 orders into the blob store (container ``orders-v1``);
2. ``runner submit`` the migration, ``runner start`` two worker processes;
3. show progress from ``runner status --json``; as soon as a worker holds a chunk that
   has checkpointed a batch, SIGKILL it (with its Spark JVM) and start a replacement;
4. show the chunk resumed from its checkpoint by another worker (attempt 2);
5. once the job is done, run the same transform once over all the input with plain
   Spark and compare row counts and content checksums. Exit 0 only if they are equal.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from checkpoint.backends import open_storage
from checkpoint.records import TaskRecord
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.spark import SparkSettings, spark_session
from samples.migration.cluster import LoopbackCluster
from samples.migration.demo_cluster import SparkKill, SparkSide
from samples.migration.generate import Generated, generate
from samples.migration.job import MigrateOrders
from samples.migration.layout import MigrationParams, get_json
from samples.migration.processes import Runner, Worker, worker_pid
from samples.migration.verify import Verdict, verify

DEFAULT_ROWS = 2_000_000
DEFAULT_FILES = 24
DEFAULT_FILES_PER_CHUNK = 4
#: How often the demo asks ``runner status``.
POLL_SECONDS = 1.0
#: How often the demo looks at the store for a chunk to kill the worker of, and for how
#: long between two status lines: a `runner status` took 12 s on a loaded machine, and
#: a chunk of a few batches can pass its middle in less.
KILL_LOOK_SECONDS = 0.1
KILL_WINDOW_SECONDS = 10.0
#: A progress line at least this often, even when nothing changed.
QUIET_SECONDS = 10.0

Say = Callable[[str], None]


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


@dataclass
class Crash:
    """The worker the demo killed, and what became of its chunk."""

    worker: str
    chunk: int
    batch: int
    of: int
    resumed_by: str | None = None
    resumed_attempt: int | None = None
    #: When the killed attempt's lease ran out (its record's last ``lease_until``), and
    #: when the next attempt started: the resumed chunk's wait (UTC).
    lease_until: datetime | None = None
    resumed_on: datetime | None = None


@dataclass(frozen=True)
class DemoResult:
    """What a demo run did and found."""

    job_id: str
    generated: Generated
    summary: dict[str, Any]
    manifest: dict[str, Any]
    crash: Crash | None
    verdict: Verdict
    exit_codes: dict[str, int | None]
    spark_kill: SparkKill | None = None


class ClusterSide(Protocol):
    """The cluster demo's part (:class:`~.demo_cluster.SparkSide`)."""

    def kill_worker(self, say: Say) -> object:
        """Called right after the demo SIGKILLed a runner worker."""

    def report(self, say: Say) -> None:
        """Called once the job is done, before the verification."""


def run_demo(
    options: DemoOptions, workdir: Path, say: Say = print, cluster: ClusterSide | None = None
) -> DemoResult:
    """Run the whole demo with its files under ``workdir``; raises if the job fails."""
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
    runner = Runner(storage, workdir)
    try:
        job_id = runner.submit(params)
        say(f"2. runner submit {MigrateOrders.job_type()} -> job {job_id}")
        for _ in range(2):
            worker = runner.start_worker(*options.worker_args)
            say(f"   {_start_line(options.worker_args)} -> {worker.name} (pid {worker.pid})")
        with open_storage(storage) as watched:
            crash = _watch(runner, job_id, options, say, cluster, CheckpointStore(watched))
        exit_codes = _wait_for_exit(runner, say)
        if cluster is not None:
            cluster.report(say)
    except BaseException:
        for worker in runner.workers:
            say(f"--- {worker.name} log, last lines ---\n{worker.tail()}")
        raise
    finally:
        runner.kill_all()
    return _conclude(storage, workdir, job_id, generated, crash, exit_codes, say)


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


# --------------------------------------------------------------------------- watching


def _watch(
    runner: Runner,
    job_id: str,
    options: DemoOptions,
    say: Say,
    cluster: ClusterSide | None,
    store: CheckpointStore,
) -> Crash | None:
    """Show progress until the job is done (``runner status`` each second); kill one
    worker mid-chunk on the way, found by reading the store between two of them."""
    crash: Crash | None = None
    started = time.monotonic()
    last_line, last_said = "", 0.0
    while True:
        status = runner.status(job_id)
        elapsed = time.monotonic() - started
        if status["state"] == "failed":
            raise RuntimeError(f"job {job_id} failed: {status.get('error') or status['poisoned']}")
        if status["state"] == "done":
            say(f"   [{elapsed:5.0f} s] {_progress(runner, status)}")
            return crash
        line = _progress(runner, status)
        if line != last_line or elapsed - last_said >= QUIET_SECONDS:
            say(f"   [{elapsed:5.0f} s] {line}")
            last_line, last_said = line, elapsed
        if crash is not None and crash.resumed_by is None:
            _notice_resume(runner, status, crash, say)
        if not any(worker.alive() for worker in runner.workers):
            if runner.status(job_id)["state"] != "done":  # they may have just finished it
                raise RuntimeError(f"every worker exited, job {job_id} is not done")
        if elapsed > options.timeout_seconds:
            raise TimeoutError(f"job {job_id} not done after {elapsed:.0f} s")
        if options.kill and crash is None:
            crash = _kill_when_due(runner, store, job_id, options.worker_args, say)
            if crash is not None and cluster is not None:
                cluster.kill_worker(say)
        else:
            time.sleep(POLL_SECONDS)


def _progress(runner: Runner, status: dict[str, Any]) -> str:
    chunks = status["chunks"]
    running, waiting = [], []
    for entry in status["running"]:
        batch, of = _batch(entry["progress"])
        worker = runner.worker_with_pid(worker_pid(entry["worker"]) or -1)
        who = worker.name if worker else entry["worker"]
        at = f"batch {batch}/{of or '?'}"
        if entry["lease_expired"]:
            # Its worker stopped renewing (killed): the chunk is back on the queue, and
            # waits there while the live workers are busy with other chunks.
            waiting.append(
                f"#{entry['index']} at {at} (the lease of {who} ran out, "
                f"attempt {entry['attempt']})"
            )
        else:
            running.append(f"#{entry['index']} on {who} {at} (attempt {entry['attempt']})")
    total = chunks["total"] if status["planning_done"] else "?"
    text = f"{status['state']}: chunks {chunks['done']}/{total} done"
    if running:
        text += "; running " + ", ".join(running)
    if waiting:
        text += "; waiting for a worker " + ", ".join(waiting)
    if chunks["failed"]:
        text += f"; {chunks['failed']} retrying"
    return text


def _batch(progress: Any) -> tuple[int, int]:
    """(batch, of) from a running chunk's last checkpoint (``runner status --json`` gives
    the state itself; None before the first checkpoint)."""
    if isinstance(progress, dict) and isinstance(progress.get("batch"), int):
        return progress["batch"], int(progress.get("of") or 0)
    return 0, 0


def _kill_when_due(
    runner: Runner, store: CheckpointStore, job_id: str, worker_args: tuple[str, ...], say: Say
) -> Crash | None:
    """For up to :data:`KILL_WINDOW_SECONDS`, look at the job's running chunks in the
    store every :data:`KILL_LOOK_SECONDS`; SIGKILL the worker of the first one with a
    checkpoint and batches still to do. None if there was none meanwhile.

    The store is read here rather than through ``runner status`` (a process, a second
    or more on a loaded machine): a chunk of a few batches is past its first and not at
    its last only for a few seconds."""
    deadline = time.monotonic() + KILL_WINDOW_SECONDS
    while True:
        for seen in _killable(store, job_id):
            worker = runner.worker_with_pid(worker_pid(seen.owner) or -1)
            if worker is None or not worker.alive():
                continue
            # Read a moment ago: its last batches may have run since. Stopped first, the
            # worker writes nothing more, so a read now says for sure whether the chunk
            # is still its own and unfinished.
            worker.pause()
            try:
                task = _still_running(store, job_id, seen)
            except BaseException:
                worker.resume()
                raise
            if task is None:
                worker.resume()
                continue
            return _kill(runner, worker, store, task, worker_args, say)
        if time.monotonic() >= deadline:
            return None
        time.sleep(KILL_LOOK_SECONDS)


def _kill(
    runner: Runner,
    worker: Worker,
    store: CheckpointStore,
    task: TaskRecord,
    worker_args: tuple[str, ...],
    say: Say,
) -> Crash:
    batch, of = _batch(store.value(task.properties, "progress"))
    worker.kill()
    # A Connect client has no JVM of its own: its Spark work runs in the server's.
    jvm = "a Spark Connect client" if "--spark-remote" in worker_args else "with its Spark JVM"
    say(
        f"3. SIGKILL {worker.name} (pid {worker.pid}, {jvm}) while it runs "
        f"chunk #{task.index}: checkpoint says batch {batch} of {of} is next"
    )
    replacement = runner.start_worker(*worker_args)
    say(
        f"   {_start_line(worker_args)} -> {replacement.name} (pid "
        f"{replacement.pid}) replaces it; the chunk is back on the queue once its "
        f"lease runs out (at most {MigrateOrders.lease_seconds} s), for the next free "
        "worker"
    )
    return Crash(worker.name, task.index, batch, of, lease_until=task.lease_until)


def _killable(store: CheckpointStore, job_id: str) -> list[TaskRecord]:
    """The job's chunks running under a live lease with a checkpoint and batches to do."""
    now = store.clock.now()
    found = []
    for task in store.chunks(job_id, ("running",)):
        batch, of = _batch(store.value(task.properties, "progress"))
        live = task.lease_until is not None and task.lease_until > now
        if live and task.owner and 0 < batch < of:
            found.append(task)
    return found


def _still_running(store: CheckpointStore, job_id: str, seen: TaskRecord) -> TaskRecord | None:
    """The chunk ``seen`` as stored now, if the same attempt still holds it unfinished,
    with a checkpoint and batches to do; else None."""
    for task in _killable(store, job_id):
        if (task.index, task.owner, task.attempt) == (seen.index, seen.owner, seen.attempt):
            return task
    return None


def _time(text: str | None) -> datetime | None:
    """A time of ``runner status --json`` (UTC, ``Z``) as a datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _notice_resume(runner: Runner, status: dict[str, Any], crash: Crash, say: Say) -> None:
    for entry in status["running"]:
        if entry["index"] != crash.chunk or entry["attempt"] < 2:
            continue
        worker = runner.worker_with_pid(worker_pid(entry["worker"]) or -1)
        crash.resumed_by = worker.name if worker else entry["worker"]
        crash.resumed_attempt = entry["attempt"]
        crash.resumed_on = _time(entry["started_on"])
        kept = "batch 0 is" if crash.batch == 1 else f"batches 0-{crash.batch - 1} are"
        say(
            f"4. chunk #{crash.chunk} taken over by {crash.resumed_by}: attempt "
            f"{entry['attempt']}, resuming from its checkpoint (batch {crash.batch} of "
            f"{crash.of}); {kept} not redone"
        )
        if worker is not None:
            for line in worker.log_lines("resumes from its checkpoint"):
                say(f"   {worker.name} log: {line.split(': ', 1)[-1]}")


def _start_line(worker_args: tuple[str, ...]) -> str:
    return " ".join(["runner start --workers 1 --burst", *worker_args])


def _wait_for_exit(runner: Runner, say: Say) -> dict[str, int | None]:
    """Burst workers exit by themselves once the job is done; their exit codes."""
    codes: dict[str, int | None] = {}
    for worker in runner.workers:
        try:
            codes[worker.name] = worker.process.wait(60)
        except subprocess.TimeoutExpired:
            codes[worker.name] = None  # reported; killed by run_demo
    say("   workers exited: " + ", ".join(f"{name} {code}" for name, code in codes.items()))
    return codes


# --------------------------------------------------------------------------- the verdict


def _conclude(
    storage: str,
    workdir: Path,
    job_id: str,
    generated: Generated,
    crash: Crash | None,
    exit_codes: dict[str, int | None],
    say: Say,
) -> DemoResult:
    settings = MigrationParams.of({"output": str(workdir / "output")})
    with open_storage(storage) as opened:
        manifest = get_json(opened, settings.results_container, f"{job_id}/manifest.json")
        summary = get_json(opened, settings.results_container, f"{job_id}/summary.json")
        _report(summary, manifest, crash, say)
        if crash is not None:
            _report_wait(CheckpointStore(opened), job_id, crash, say)
        started = time.monotonic()
        spark = spark_session(SparkSettings.for_job(MigrateOrders))
        say(
            "5. one-shot plain Spark run of the same transform over all the input (a "
            f"classic driver in this process, master {spark.sparkContext.master}) ..."
        )
        verdict = verify(
            spark,
            opened,
            settings,
            list(generated.names),
            (manifest, summary),
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
    return DemoResult(job_id, generated, summary, manifest, crash, verdict, exit_codes)


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
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: temp)")
    args = parser.parse_args(argv)
    options = DemoOptions(args.storage, args.rows, args.files, args.files_per_chunk, args.kill)
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
    return 0 if result.verdict.ok else 1


def _run(args: argparse.Namespace, options: DemoOptions, workdir: Path) -> DemoResult:
    if args.cluster:
        return run_cluster_demo(options, workdir, connect=not args.classic)
    return run_demo(options, workdir)


if __name__ == "__main__":
    sys.exit(main())
