"""The migration on a loopback Spark cluster through Spark Connect -> BENCHMARKS.md.

``python -m tests.bench.cluster [--rows N] [--runs N] [--workers N] [--no-local]
[--no-streaming] [--no-crash] [--isolate-sessions] [--connect-conf JSON] [--quick]
[--output BENCHMARKS.md]``

The input of :mod:`tests.bench.migration` (same generator, 24 files, 8 chunks of 3,
3 files per batch). One :class:`samples.migration.cluster.LoopbackCluster`: a master,
2 workers of 1 core and 1 GiB, a Spark Connect server attached to the master (its
sessions sharing compiled code unless ``--isolate-sessions``: see the cluster module).
Rounds, each side once per round so all see the same load on this shared machine:

1. *streaming* (``--no-streaming`` leaves it out): the Connect server holds every core
   of the cluster (a standalone master gives an application all free cores), so it is
   stopped, the Structured Streaming driver (:mod:`tests.bench.streaming`) runs as a
   classic application on the master, and the Connect server is started again;
2. *warm-up*, untimed as a comparison but reported: the one-shot run through the
   fresh Connect server, so the server is warm (its executors' JIT too) for:
3. *chunked*: ``runner submit`` + ``runner start --workers N --burst`` (2 worker
   processes unless ``--workers``) with ``RUNNER_SPARK_REMOTE`` (Connect clients:
   Python only);
4. *plain*: the one-shot run (``verify.write_one_shot``) through the same Connect server,
   in a fresh process: same executors, same warmth, only the cutting differs;
5. *local* (``--no-local`` leaves it out): the chunked run with a ``local[*]`` worker
   (its own JVM) as ``tests.bench.migration`` runs it, for the worker's memory and its
   cold first batch.

Then, once (``--no-crash`` leaves it out), each side SIGKILLed mid-run and restarted
(:mod:`tests.bench.crash`). After every run, untimed, its output is compared with the
round's one-shot output (rows and content checksums).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from samples.migration.cluster import LoopbackCluster
from tests.bench import cluster_report
from tests.bench.cluster_report import Round
from tests.bench.crash import Crashed, KillPoint, batch_seconds, run_chunked_crash
from tests.bench.migration import (
    DEFAULT_ROWS,
    FILES_PER_CHUNK,
    QUICK_ROWS,
    Input,
    check,
    child_env,
    prepare,
    run_chunked,
    run_plain,
)
from tests.bench.report import LoadSampler, load_line, machine_line, write_section
from tests.bench.spark_target import LOCAL, classic, connect, spark_target
from tests.bench.streaming import (
    check_streaming,
    run_streaming,
    run_streaming_crash,
    stage_whole,
)

#: The crash comes after this many of the 8 batches, half a batch later.
KILL_AFTER_BATCHES = 4
#: The cluster: 2 workers x 1 core, 1 GiB each (the 2 cores of the machine).
WORKERS, CORES_PER_WORKER, WORKER_MEMORY = 2, 1, "1g"
#: Runner worker processes of a chunked run, as the issue's targets are set.
DEFAULT_WORKERS = 2


@contextmanager
def connect_stopped(cluster: LoopbackCluster) -> Iterator[None]:
    """The Connect server down (its cores free for a classic driver), then up again."""
    server = cluster.connect_server
    if server is not None:
        server.stop()
        cluster.connect_server = None
    try:
        yield
    finally:
        # The launcher's own start and wait for the port (no public restart there yet).
        cluster._start_connect()


@dataclass
class Setup:
    """What every round shares: the input, the cluster, the options."""

    data: Input
    cluster: LoopbackCluster
    stream_input: Path
    streaming: bool
    local: bool
    #: Runner worker processes of every chunked run (``runner start --workers N``).
    workers: int


def one_round(setup: Setup, rundir: Path) -> Round:
    """Every side once (module docstring); each output checked against the one-shot's."""
    rundir.mkdir(parents=True)
    found = Round(number=int(rundir.name.rsplit("-", 1)[1]))
    data, cluster = setup.data, setup.cluster
    if setup.streaming:
        with connect_stopped(cluster), spark_target(**classic(cluster)):
            found.streamed = run_streaming(data, setup.stream_input, rundir, child_env(data))
    with spark_target(**connect(cluster)):
        found.warm_up = run_plain(data, _fresh(rundir / "warm-up"))
        found.chunked, job_id = run_chunked(data, rundir, workers=setup.workers)
        found.first_batch_seconds, found.first_checkpoint_seconds = first_batch(rundir)
        found.plain = run_plain(data, rundir)
    one_shot = rundir / "one-shot"
    with spark_target(**LOCAL):
        check(data, job_id, rundir, one_shot)
        if setup.streaming:
            check_streaming(data, rundir, one_shot, setup.stream_input)
        if setup.local:
            local_dir = _fresh(rundir / "local")
            found.local, local_job = run_chunked(data, local_dir, workers=setup.workers)
            found.local_first_batch_seconds, found.local_first_checkpoint_seconds = first_batch(
                local_dir
            )
            check(data, local_job, local_dir, one_shot)
    print(cluster_report.round_line(found), flush=True)
    for output in ("output", "stream", "warm-up", "local/output"):
        shutil.rmtree(rundir / output, ignore_errors=True)
    return found


def _fresh(folder: Path) -> Path:
    folder.mkdir(parents=True)
    return folder


def first_batch(rundir: Path) -> tuple[float, float]:
    """The first batch's own time in the worker's log, and the worker's start to that
    checkpoint (log time stamps: its first line to the batch's line)."""
    log = rundir / "worker-1.log"
    first = batch_seconds(log)[0]
    stamps = [
        _stamp(line)
        for line in log.read_text(errors="replace").splitlines()
        if _stamp(line) is not None
    ]
    done = next(
        _stamp(line)
        for line in log.read_text(errors="replace").splitlines()
        if " rows in, " in line
    )
    return first, float((done or 0.0) - (stamps[0] or 0.0))


def _stamp(line: str) -> float | None:
    """Seconds of a log line's ``2026-11-25 19:24:26,912`` time stamp, if it has one."""
    try:
        clock = time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
        return time.mktime(clock) + int(line[20:23]) / 1000
    except ValueError:
        return None


def crashes(setup: Setup, workdir: Path, rounds: list[Round]) -> dict[str, Crashed]:
    """Each side SIGKILLed once at the same point (after half a median batch of its own)."""
    data, cluster = setup.data, setup.cluster
    found = {}
    rundir = _fresh(workdir / "crash")
    one_shot = workdir / f"run-{rounds[-1].number}" / "one-shot"
    chunked_batch = statistics.median(
        seconds for r in rounds for seconds in batch_seconds(_worker_log(workdir, r))
    )
    with spark_target(**connect(cluster)):
        found["chunked"], job_id = run_chunked_crash(
            data, _fresh(rundir / "chunked"), KillPoint(KILL_AFTER_BATCHES, chunked_batch / 2)
        )
    with spark_target(**LOCAL):
        check(data, job_id, rundir / "chunked", one_shot)
    print(f"crash, chunked: {found['chunked'].total.seconds:.1f} s", flush=True)
    if setup.streaming:
        streamed = [r.streamed for r in rounds if r.streamed]
        batch = statistics.median(line["seconds"] for s in streamed for line in s.batches)
        with connect_stopped(cluster), spark_target(**classic(cluster)):
            found["streaming"] = run_streaming_crash(
                data,
                setup.stream_input,
                _fresh(rundir / "stream"),
                child_env(data),
                KillPoint(KILL_AFTER_BATCHES, batch / 2),
            )
        with spark_target(**LOCAL):
            check_streaming(data, rundir / "stream", one_shot, setup.stream_input)
        print(f"crash, streaming: {found['streaming'].total.seconds:.1f} s", flush=True)
    return found


def _worker_log(workdir: Path, found: Round) -> Path:
    return workdir / f"run-{found.number}" / "worker-1.log"


# --------------------------------------------------------------------------- the run


TITLE = "Migration on a loopback cluster: chunked through Spark Connect vs one plain Spark job"
LARGE_ROWS = 8_000_000


def title(rows: int) -> str:
    return TITLE if rows == DEFAULT_ROWS else f"{TITLE}, {rows:,} rows"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        help=f"input rows ({DEFAULT_ROWS:,}; quick: {QUICK_ROWS:,})",
    )
    parser.add_argument("--runs", type=int, default=None, help="rounds (3; quick: 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small input, 1 round")
    parser.add_argument(
        "--no-streaming",
        dest="streaming",
        action="store_false",
        help="leave out Structured Streaming (and its crash)",
    )
    parser.add_argument(
        "--no-local", dest="local", action="store_false", help="leave out the local-mode worker"
    )
    parser.add_argument(
        "--no-crash", dest="crash", action="store_false", help="leave out the SIGKILL runs"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"runner worker processes of each chunked run ({DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--connect-conf",
        type=json.loads,
        default={},
        help="extra Spark conf of the Connect server, a JSON object",
    )
    parser.add_argument(
        "--isolate-sessions",
        action="store_true",
        help="start the Connect server with Spark's own launcher",
    )
    parser.add_argument("--output", type=Path, default=None, help="write the section here")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep the store, logs and outputs here (default: a temp folder)",
    )
    args = parser.parse_args(argv)
    args.rows = args.rows or (QUICK_ROWS if args.quick else DEFAULT_ROWS)
    args.runs = args.runs or (1 if args.quick else 3)
    return args


#: The options of the runs ``make bench`` makes (the report says so for those only).
MAKE_BENCH_OPTIONS = frozenset(
    {
        f"--rows {DEFAULT_ROWS} --runs 3",
        f"--rows {LARGE_ROWS} --runs 2 --no-streaming --no-local --no-crash",
    }
)


def command_line(args: argparse.Namespace) -> str:
    """The command that makes this run again, as the report shows it."""
    options = [f"--rows {args.rows}", f"--runs {args.runs}"]
    options += [
        flag
        for flag, on in (
            ("--no-streaming", args.streaming),
            ("--no-local", args.local),
            ("--no-crash", args.crash),
            ("--isolate-sessions", not args.isolate_sessions),
        )
        if not on
    ]
    if args.workers != DEFAULT_WORKERS:
        options.append(f"--workers {args.workers}")
    if args.connect_conf:
        options.append(f"--connect-conf '{json.dumps(args.connect_conf)}'")
    command = " ".join(["python -m tests.bench.cluster", *options])
    if " ".join(options) in MAKE_BENCH_OPTIONS:
        return f"`make bench` (`{command}`)"
    return f"`{command}`"


Publish = Callable[[Setup, list[Round], dict[str, Crashed]], None]


def measure(args: argparse.Namespace, workdir: Path, publish: Publish) -> None:
    """Generate, start the cluster, run round 1, the crashes, then the other rounds;
    ``publish`` what there is after each (a run stopped for time keeps its figures)."""
    data = prepare(workdir, args.rows, FILES_PER_CHUNK)
    # Staged files are read by the cluster's executors: on loopback they share this disk.
    data.params["scratch_shared"] = True
    stream_input = workdir / "stream-input"
    staged = stage_whole(data, stream_input) if args.streaming else 0.0
    print(
        f"generated {data.generated.rows:,} rows; {data.chunks} chunks, {data.batches} "
        f"batches; staged for streaming in {staged:.1f} s",
        flush=True,
    )
    with LoopbackCluster(
        workdir / "cluster",
        workers=WORKERS,
        cores_per_worker=CORES_PER_WORKER,
        worker_memory=WORKER_MEMORY,
        connect=True,
        connect_conf=args.connect_conf,
        isolate_sessions=args.isolate_sessions,
    ) as cluster:
        setup = Setup(data, cluster, stream_input, args.streaming, args.local, args.workers)
        rounds = [one_round(setup, workdir / "run-1")]
        publish(setup, rounds, {})
        crashed = crashes(setup, workdir, rounds) if args.crash else {}
        publish(setup, rounds, crashed)
        for number in range(2, args.runs + 1):
            rounds.append(one_round(setup, workdir / f"run-{number}"))
            publish(setup, rounds, crashed)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sampler = LoadSampler(
        "one Spark application or worker at a time, the cluster's "
        "idle daemons and the bench's Python"
    )
    sampler.start()

    def publish(setup: Setup, rounds: list[Round], crashed: dict[str, Crashed]) -> None:
        load = load_line([*sampler.samples, os.getloadavg()[0]], sampler.own_load)
        body = cluster_report.report(
            setup.data,
            rounds,
            crashed,
            load,
            command_line(args),
            machine_line(),
            args.runs,
            workers=args.workers,
            isolated_sessions=args.isolate_sessions,
        )
        print("\n".join(body), flush=True)
        if args.output:
            write_section(args.output, title(args.rows), body)

    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-cluster-", dir=args.workdir))
    try:
        measure(args, workdir, publish)
    finally:
        sampler.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
