"""What the dashboard costs the store per refresh, beside ``runner status --json`` on the
same store -> a section of BENCHMARKS.md.

``python -m tests.bench.dashboard [--chunks 100000] [--azurite-chunks 100000] [--runs 3]
[--backend NAME] [--output BENCHMARKS.md]``

On each backend a store holds a job of ``--chunks`` chunks (``--azurite-chunks`` on
Azurite, smaller for a quick look: its tables take minutes to fill at 100,000 rows on a
busy 2-core machine) as a run leaves it midway
(60 % done, 8 running with a checkpoint, 2 retrying, 1 poisoned), a job of 1,000 chunks
the same way, and 4 workers' heartbeats. Requests are counted by a counting wrapper of
the three storage protocols (:mod:`tests.bench.counting`), each protocol call one
request (a query page of the Azure SDK past 1,000 rows would be more; none is here).
Timed in this process, on the real clock, median of ``--runs``:

- ``runner status --json``: :func:`runner.cli.snapshot.read_report` and ``to_json``, what
  the command does once its store is open (its whole process, Python's start included,
  is timed too, as a subprocess);
- a dashboard refresh of each page: the page's live fragment through Starlette's
  TestClient once the shared read has aged (the store read, the template rendered),
  and the same within the refresh interval (rendered from the shared read, no request);
- a page of the big job's chunks alone: by index at its start and its middle, and by
  state (many, few, none).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock, SystemClock
from checkpoint.records import CHECKPOINT_ON, Progress, error_properties
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook
from runner.cli.dashboard.app import DashboardSettings, build_app
from runner.cli.json_form import to_json
from runner.cli.snapshot import read_report
from runner.worker.observing.heartbeat import Heartbeat, Identity, RunningTasks
from tests import azurite as azurite_process
from tests.bench.counting import Tally, counted
from tests.bench.report import LoadSampler, machine_line, spread, write_section
from tests.e2e.processes import ROOT, runner_command

BACKENDS = ("embedded", "azurite")
DONE_FRACTION = 0.6
RUNNING, RETRYING = 8, 2
#: Chunks recorded per planning page, as a planning worker writes them.
PLANNING_PAGE = 3_200
REFRESH_SECONDS = 2.0


@dataclass(frozen=True)
class Measured:
    what: str
    requests: int
    seconds: list[float]


def _job(store: CheckpointStore, queue: str, chunks: int) -> str:
    """A job of ``chunks`` midway: 60 % done, some running, retrying, one poisoned."""
    job_id = f"bench-dash-{chunks}-{uuid.uuid4().hex[:6]}"
    job, _ = store.create_job(job_id, "bench:Dashboard", queue, {"chunks": chunks})
    done = int(chunks * DONE_FRACTION)
    for first in range(0, chunks, PLANNING_PAGE):
        payloads = [
            {"first": i * 100, "rows": 100}
            for i in range(first, min(chunks, first + PLANNING_PAGE))
        ]
        planned = store.add_chunks(job_id, first, payloads)
        by_shard: dict[int, list[tuple[Any, Any]]] = {}
        for chunk in planned:
            if chunk.index >= done or chunk.etag is None or chunk.payload is None:
                continue
            task = store.planned_task(job_id, chunk.index, chunk.etag, chunk.payload)
            final = store.final_changes(task, {"state": "done", "attempt": 1}, {"result": 100})
            by_shard.setdefault(layout.shard_of(chunk.index), []).append((task, final))
        for ended in by_shard.values():
            store.count_chunks(ended, "done")
    store.update_job(job, state="running", total=chunks)
    now = store.clock.now()
    for index in range(done, done + RUNNING):
        state = {"state": "running", "owner": f"bench:{index % 4}:abcd", "attempt": 1}
        state.update({"lease_until": now + timedelta(seconds=60), CHECKPOINT_ON: now})
        store.write_task(
            store.get_task(job_id, "chunk", index),
            {**state, **Progress(0.5, 50, 100).properties()},
            {"progress": {"row": 50}},
        )
    for index in range(done + RUNNING, done + RUNNING + RETRYING):
        failure = error_properties(ValueError("row 7: bad date"), "Traceback ...")
        changes = {"state": "retrying", "attempt": 1, "retry_at": now + timedelta(minutes=5)}
        store.write_task(store.get_task(job_id, "chunk", index), {**changes, **failure})
    poisoned = store.get_task(job_id, "chunk", chunks - 1)
    failure = error_properties(RuntimeError("always fails"), "Traceback ...")
    store.count_chunk(poisoned, {"state": "poisoned", "attempt": 3, **failure}, {}, "poisoned")
    return job_id


def _workers(storage: Storage, queue: str) -> None:
    for number in range(4):
        identity = Identity(f"bench:{number}:abcd", (queue,), ("bench:Dashboard",), 2)
        Heartbeat(WorkerBook(storage.records), identity, RunningTasks(), SystemClock()).beat()


def _counted(storage: Storage) -> tuple[Storage, Tally]:
    tally = Tally()
    tally.started_at = time.monotonic()  # the window is open from now: count everything
    return counted(storage, tally), tally


def _measure(what: str, tally: Tally, action: Callable[[], Any], runs: int) -> Measured:
    """``action`` ``runs`` times: the requests of one (the same each time), the times."""
    seconds, requests = [], set()
    for _ in range(runs):
        before = sum(tally.calls.values())
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
        requests.add(sum(tally.calls.values()) - before)
    assert len(requests) == 1, f"{what}: requests differ between runs: {requests}"
    return Measured(what, requests.pop(), seconds)


def measure(storage: Storage, location: str, chunks: int, runs: int) -> list[Measured]:
    queue = f"bench-dash-{uuid.uuid4().hex[:6]}"
    setup = CheckpointStore(storage)
    setup.ensure()
    started = time.perf_counter()
    big = _job(setup, queue, chunks)
    small = _job(setup, queue, 1_000)
    _workers(storage, queue)
    print(f"  store written in {time.perf_counter() - started:.0f} s", flush=True)

    counting, tally = _counted(storage)
    store = CheckpointStore(counting)
    store.ensure()  # once per store, at the dashboard's start; not per refresh
    clock = FakeClock()
    settings = DashboardSettings(storage.description, REFRESH_SECONDS)
    client = TestClient(build_app(store, settings, clock.monotonic))

    def page(url: str) -> Callable[[], Any]:
        def get() -> None:
            clock.advance(REFRESH_SECONDS)  # the shared read has aged: read again
            answer = client.get(url)
            assert answer.status_code == 200, answer.text

        return get

    def cached(url: str) -> Callable[[], Any]:
        return lambda: client.get(url)

    found = [
        _measure(
            "`runner status --json` (all jobs)", tally, lambda: to_json(read_report(store)), runs
        ),
        _measure(
            f"`runner status {chunks:,}-chunk job --json`",
            tally,
            lambda: to_json(read_report(store, big)),
            runs,
        ),
        _measure("dashboard: jobs page refresh", tally, page("/?fragment=1"), runs),
        _measure(
            "dashboard: jobs page within the interval (shared)", tally, cached("/?fragment=1"), runs
        ),
        _measure(
            f"dashboard: {chunks:,}-chunk job page refresh (50 chunks)",
            tally,
            page(f"/jobs/{big}?fragment=1"),
            runs,
        ),
        _measure(
            "dashboard: 1,000-chunk job page refresh (50 chunks)",
            tally,
            page(f"/jobs/{small}?fragment=1"),
            runs,
        ),
        _measure(
            f"dashboard: {chunks:,}-chunk job page, chunks from #{chunks // 2:,}",
            tally,
            page(f"/jobs/{big}?chunk={chunks // 2}&fragment=1"),
            runs,
        ),
        _measure("dashboard: workers page refresh", tally, page("/workers?fragment=1"), runs),
    ]
    for label, read in [
        ("by index, chunks 0-49", lambda: store.chunk_page(big, 0, 50)),
        (
            f"by index, chunks {chunks // 2:,}-{chunks // 2 + 49:,}",
            lambda: store.chunk_page(big, chunks // 2, 50),
        ),
        ("state done (many), first 50", lambda: store.chunk_page_in_state(big, "done", 50)),
        (f"state running ({RUNNING})", lambda: store.chunk_page_in_state(big, "running", 50)),
        ("state poisoned (1)", lambda: store.chunk_page_in_state(big, "poisoned", 50)),
    ]:
        found.append(
            _measure(f"a page of the {chunks:,}-chunk job's chunks: {label}", tally, read, runs)
        )
    found.append(_cli_status(location, runs))
    return found


def _cli_status(location: str, runs: int) -> Measured:
    """``runner status --json`` as a process, Python's start included (not counted)."""
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            [*runner_command(), "status", "--json", "--storage", location],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        seconds.append(time.perf_counter() - started)
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout)
    return Measured("`runner status --json` as a process (start included)", -1, seconds)


def opened(which: list[str], scratch: Path) -> Iterator[tuple[str, str, Storage]]:
    server = azurite_process.start() if "azurite" in which else None
    try:
        for name in which:
            if name == "embedded":
                location = str(scratch / "store")
            else:
                assert server is not None
                location = server.connection_string
            with open_storage(location) as storage:
                yield name, location, storage
    finally:
        if server is not None:
            server.stop()


def run(which: list[str], chunks: dict[str, int], runs: int) -> list[str]:
    rows = [
        "| backend | what | storage requests | time, ms (median, min-max) |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as scratch:
        for name, location, storage in opened(which, Path(scratch)):
            print(f"{name}:", flush=True)
            for found in measure(storage, location, chunks[name], runs):
                ms = [1000 * s for s in found.seconds]
                requests = "not counted" if found.requests < 0 else f"{found.requests:,}"
                print(f"  {found.what}: {requests} requests, {spread(ms, 1)} ms", flush=True)
                rows.append(f"| {name} | {found.what} | {requests} | {spread(ms, 1)} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--azurite-chunks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    which = args.backend or list(BACKENDS)
    load = LoadSampler("one Python process, and Azurite's Node process on that backend")
    load.start()
    sizes = {"embedded": args.chunks, "azurite": args.azurite_chunks}
    rows = run(which, sizes, args.runs)
    other_size = (
        f" ({args.azurite_chunks:,} on Azurite)" if args.azurite_chunks != args.chunks else ""
    )
    body = [
        machine_line(),
        load.stop(),
        f"Command: `make bench` (`python -m tests.bench.dashboard --chunks {args.chunks} "
        f"--azurite-chunks {args.azurite_chunks} --runs {args.runs}`). A store holding a job "
        f"of {args.chunks:,} chunks{other_size} midway "
        f"({DONE_FRACTION:.0%} done, {RUNNING} running with a checkpoint, {RETRYING} "
        "retrying, 1 poisoned), a job of 1,000 chunks the same way, and 4 workers' "
        "heartbeats; embedded in a temp directory, Azurite "
        f"{azurite_process.installed_version()} with disk persistence on loopback. "
        "Requests counted at the storage protocols (each call one request); times in "
        f"one process on the real clock, median of {args.runs} runs. A refresh is a page's "
        "live fragment read once the shared read has aged (the dashboard reads the store "
        f"at most once per refresh interval, {REFRESH_SECONDS:g} s here, for every viewer "
        "together); within the interval every viewer's refresh only renders.",
        "",
        *rows,
    ]
    print("\n".join(body))
    if args.output:
        write_section(args.output, "Dashboard: storage requests and time per refresh", body)


if __name__ == "__main__":
    main()
