"""What the default views cost as the store fills with ended jobs: ``runner status``,
``status --json`` and the dashboard's jobs page at 10 and at 10,000 retained jobs ->
a section of BENCHMARKS.md.

``python -m tests.bench.status_scale [--sizes 10,10000] [--runs 5] [--backend NAME]
[--output BENCHMARKS.md]``

On each backend one store holds two running jobs of 100 chunks (60 done, 2 running
with a checkpoint) and ended jobs (done; one in 100 failed, one in 500 cancelled) up to
each size in turn. The ended jobs' records are written straight into the job
catalogue in atomic batches of 100 (job records only: the default views never read an
ended job's chunks), as a submit would take ~40 minutes for 10,000 jobs on Azurite.
Requests are counted at the storage protocols (each call one; a query of the
catalogue is one call, and one request per 1,000 rows at Azure's wire). Timed in this
process on the real clock, median of ``--runs``:

- ``runner status``: :func:`runner.cli.snapshot.read_snapshot` and the text rendered;
- ``runner status --json``: the same read, as JSON;
- the dashboard's jobs page: its live fragment through Starlette's TestClient once
  the shared read has aged;
- ``runner status`` as a process, Python's start included (not counted);
- at the smallest size only, ``runner status --all --json`` for reference: every job
  read in full, what status did by default before.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.catalogue.job_index import COUNTS_ROW, counts_of
from checkpoint.clock import FakeClock
from checkpoint.records import CHECKPOINT_ON, Progress
from checkpoint.storage import BatchOp, PropertyValue, Storage
from checkpoint.store import CheckpointStore
from runner.cli.dashboard.app import DashboardSettings, build_app
from runner.cli.json_form import to_json
from runner.cli.render import render_status
from runner.cli.selection import Listing
from runner.cli.snapshot import read_snapshot
from tests import azurite as azurite_process
from tests.bench.counting import Tally, counted
from tests.bench.report import LoadSampler, machine_line, spread, write_section
from tests.e2e.processes import ROOT, runner_command

BACKENDS = ("embedded", "azurite")
ACTIVE_JOBS, ACTIVE_CHUNKS, ACTIVE_DONE, ACTIVE_RUNNING = 2, 100, 60, 2
#: Rows of one atomic batch (Azure's most).
BATCH = 100
REFRESH_SECONDS = 2.0
#: The default views should cost at most this many times their cost at the smallest size.
TARGET_RATIO = 1.5


@dataclass(frozen=True)
class Measured:
    what: str
    size: int
    requests: int
    seconds: list[float]


def _active_job(store: CheckpointStore, queue: str, number: int) -> None:
    """A running job: 60 of its 100 chunks done, 2 running with a checkpoint."""
    job_id = f"bench-scale-run-{number}-{uuid.uuid4().hex[:6]}"
    job, _ = store.create_job(job_id, "bench:Scale", queue, {"chunks": ACTIVE_CHUNKS})
    planned = store.add_chunks(job_id, 0, [{"first": i} for i in range(ACTIVE_CHUNKS)])
    by_shard: dict[int, list[tuple[Any, Any]]] = {}
    for chunk in planned[:ACTIVE_DONE]:
        assert chunk.etag is not None and chunk.payload is not None
        task = store.planned_task(job_id, chunk.index, chunk.etag, chunk.payload)
        final = store.final_changes(task, {"state": "done", "attempt": 1}, {"result": 1})
        by_shard.setdefault(layout.shard_of(chunk.index), []).append((task, final))
    for ended in by_shard.values():
        store.count_chunks(ended, "done")
    store.update_job(job, state="running", total=ACTIVE_CHUNKS)
    now = store.clock.now()
    for index in range(ACTIVE_DONE, ACTIVE_DONE + ACTIVE_RUNNING):
        state = {"state": "running", "owner": f"bench:{index}:abcd", "attempt": 1}
        state.update({"lease_until": now + timedelta(seconds=60), CHECKPOINT_ON: now})
        store.write_task(
            store.get_task(job_id, "chunk", index),
            {**state, **Progress(0.5, 5, 10).properties()},
            {"progress": {"row": 5}},
        )


def _ended_state(number: int) -> str:
    if number % 500 == 3:
        return "cancelled"
    return "failed" if number % 100 == 7 else "done"


def add_ended_jobs(storage: Storage, first: int, count: int) -> None:
    """``count`` ended job records numbered from ``first``, in batches of 100."""
    now = CheckpointStore(storage).clock.now()
    rows: list[BatchOp] = []
    for number in range(first, first + count):
        when = now - timedelta(days=1, seconds=number)
        properties: dict[str, PropertyValue] = {
            "job_type": "bench:Ended",
            "queue": "bench-ended",
            "state": _ended_state(number),
            "total": 10,
            "created_on": when,
            "updated_on": when + timedelta(minutes=5),
            "incarnation": secrets.token_hex(8),
            "priority": 0,
        }
        rows.append(BatchOp("insert", f"bench-ended-{number:06d}", properties))
        if len(rows) == BATCH:
            storage.records.batch(layout.JOBS_TABLE, layout.JOBS_PARTITION, rows)
            rows = []
    if rows:
        storage.records.batch(layout.JOBS_TABLE, layout.JOBS_PARTITION, rows)
    _count_ended(storage, [_ended_state(number) for number in range(first, first + count)])


def _count_ended(storage: Storage, states: list[str]) -> None:
    """Count jobs written straight into the catalogue in its index's counts row, as
    their ends would have (:mod:`checkpoint.catalogue.job_index`)."""
    counts = storage.records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW)
    added = Counter(states)
    had = counts_of(counts)
    changes: dict[str, PropertyValue] = {state: had[state] + added[state] for state in added}
    storage.records.merge(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, changes, etag=counts.etag
    )


@contextmanager
def without_index(storage: Storage) -> Iterator[None]:
    """The store as an earlier version made it: no counts row, so the views scan."""
    records = storage.records
    counts = records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW)
    records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, etag="*")
    try:
        yield
    finally:
        records.upsert(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, counts.properties)


def _submitted_ended_jobs(store: CheckpointStore, count: int) -> None:
    """``count`` jobs submitted, then ended without chunks (numbered from 0)."""
    for number in range(count):
        job, _ = store.create_job(f"bench-ended-{number:06d}", "bench:Ended", "bench-ended", {})
        store.update_job(job, state=_ended_state(number), total=0)


def _measure(what: str, size: int, tally: Tally, action: Callable[[], Any], runs: int) -> Measured:
    """``action`` ``runs`` times: the requests of one (the same each time), the times."""
    seconds, requests = [], set()
    for _ in range(runs):
        before = sum(tally.calls.values())
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
        requests.add(sum(tally.calls.values()) - before)
    assert len(requests) == 1, f"{what}: requests differ between runs: {requests}"
    return Measured(what, size, requests.pop(), seconds)


def measure_size(
    store: CheckpointStore, tally: Tally, location: str | None, size: int, runs: int
) -> list[Measured]:
    """The views of the store as it is (``size`` jobs); ``location`` given: the command
    as a process too."""
    clock = FakeClock()
    settings = DashboardSettings(store.storage.description, REFRESH_SECONDS)
    client = TestClient(build_app(store, settings, clock.monotonic))

    def text() -> None:
        snapshot = read_snapshot(store)
        render_status(snapshot.jobs, False, snapshot.counts)

    def as_json() -> None:
        json.dumps(to_json(list(read_snapshot(store).jobs)))

    def page() -> None:
        clock.advance(REFRESH_SECONDS)  # the shared read has aged: read again
        answer = client.get("/?fragment=1")
        assert answer.status_code == 200, answer.text

    found = [
        _measure("`runner status`", size, tally, text, runs),
        _measure("`runner status --json`", size, tally, as_json, runs),
        _measure("dashboard: jobs page refresh", size, tally, page, runs),
    ]
    with without_index(store.storage):
        found.append(_measure(SCANNED, size, tally, text, runs))
    if location is not None:
        found.append(_cli_status(location, size, runs))
    return found


EVERY_JOB = "`runner status --all --json`"
#: ``runner status`` on a store without the index: the catalogue scanned, as before it.
SCANNED = "`runner status`, no index (the scan, as before)"


def _every_job(store: CheckpointStore) -> None:
    """``runner status --all --json``: every job read in full."""
    json.dumps(to_json(list(read_snapshot(store, None, Listing(every=True)).jobs)))


def _cli_status(location: str, size: int, runs: int) -> Measured:
    """``runner status`` as a process, Python's start included (not counted)."""
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            [*runner_command(), "status", "--storage", location],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's code
            capture_output=True,
            text=True,
            timeout=300,
        )
        seconds.append(time.perf_counter() - started)
        assert done.returncode == 0, done.stderr
        assert "ended jobs:" in done.stdout, done.stdout[-300:]
    return Measured("`runner status` as a process (start included)", size, -1, seconds)


def measure(
    storage: Storage, location: str | None, sizes: list[int], runs: int
) -> tuple[list[Measured], list[str]]:
    """Every view at each of ``sizes`` (ascending), and what the filling took."""
    setup = CheckpointStore(storage)
    setup.ensure()
    queue = f"bench-scale-{uuid.uuid4().hex[:6]}"
    for number in range(ACTIVE_JOBS):
        _active_job(setup, queue, number)
    tally = Tally()
    tally.started_at = time.monotonic()  # the window is open from now: count everything
    store = CheckpointStore(counted(storage, tally))
    store.ensure()
    found: list[Measured] = []
    notes, have = [], ACTIVE_JOBS
    for size in sizes:
        started = time.perf_counter()
        if size == sizes[0]:  # submitted and ended, counters and all: --all reads them
            _submitted_ended_jobs(setup, size - have)
        else:
            add_ended_jobs(storage, have - ACTIVE_JOBS, size - have)
        notes.append(f"{size - have:,} ended jobs written in {time.perf_counter() - started:.1f} s")
        have = size
        found += measure_size(store, tally, location, size, runs)
        if size == sizes[0]:
            found.append(_measure(EVERY_JOB, size, tally, lambda: _every_job(store), runs))
    return found, notes


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


def rows_of(name: str, found: list[Measured]) -> list[str]:
    """Table rows, each view's median at the largest size beside its smallest."""
    smallest = {m.what: m for m in found if m.size == min(f.size for f in found)}
    rows = []
    for m in found:
        ms = [1000 * s for s in m.seconds]
        requests = "not counted" if m.requests < 0 else f"{m.requests:,}"
        base = smallest.get(m.what)
        ratio = ""
        if base is not None and base is not m:
            ratio = f"{statistics.median(m.seconds) / statistics.median(base.seconds):.2f}×"
        rows.append(f"| {name} | {m.what} | {m.size:,} | {requests} | {spread(ms, 1)} | {ratio} |")
    return rows


#: The views whose time the target bounds.
DEFAULT_VIEWS = ("`runner status`", "`runner status --json`", "dashboard: jobs page refresh")


def verdict(name: str, found: list[Measured]) -> str:
    """Which default views kept within :data:`TARGET_RATIO` of their time at the
    smallest size, and what the old default (every job read) would cost at the largest."""
    low, high = min(m.size for m in found), max(m.size for m in found)
    median = {(m.what, m.size): statistics.median(m.seconds) for m in found}
    ratios = {view: median[(view, high)] / median[(view, low)] for view in DEFAULT_VIEWS}
    missed = [f"{view} {ratio:.1f}×" for view, ratio in ratios.items() if ratio > TARGET_RATIO]
    every = next(m for m in found if m.what == EVERY_JOB)
    per_job = every.requests / low
    said = "all within" if not missed else f"missed by {', '.join(missed)}; target"
    return (
        f"{name}: default views at {high:,} jobs {said} {TARGET_RATIO:g}× of {low:,}; "
        f"requests the same at both sizes. Every job read (the old default) is "
        f"~{per_job:.0f} requests a job here: ~{per_job * high:,.0f} at {high:,} jobs."
    )


def run(which: list[str], sizes: list[int], runs: int) -> list[str]:
    rows = [
        "| backend | view | jobs in the store | storage requests | time, ms (median, min-max) "
        f"| time / time at {sizes[0]:,} jobs |",
        "|---|---|---|---|---|---|",
    ]
    notes, verdicts = [], []
    with tempfile.TemporaryDirectory(prefix="bench-status-scale-") as scratch:
        for name, location, storage in opened(which, Path(scratch)):
            print(f"{name}:", flush=True)
            found, filled = measure(storage, location, sizes, runs)
            shown = rows_of(name, found)
            print("\n".join(shown), flush=True)
            rows += shown
            notes.append(f"{name}: " + "; ".join(filled))
            verdicts.append(verdict(name, found))
    return [
        *rows,
        "",
        "Filling the store: " + ". ".join(notes) + ".",
        "",
        *(f"- {line}" for line in verdicts),
        "- The default views read the catalogue's index (a row per active job and the "
        "ended jobs' counts) in one range query, whatever the number of ended jobs. "
        f"{SCANNED} is the same view on the same store without its counts row: the "
        "catalogue read by projection, a row per job (10 pages at Azure's wire at 10,000 "
        "jobs), what the default views did before the index (and still do on a store "
        "made by an earlier version).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--sizes", default="10,10000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    which = args.backend or list(BACKENDS)
    load = LoadSampler("one Python process, and Azurite's Node process on that backend")
    load.start()
    rows = run(which, sizes, args.runs)
    body = [
        machine_line(),
        load.stop(),
        f"Command: `make bench` (`python -m tests.bench.status_scale --sizes {args.sizes} "
        f"--runs {args.runs}`). One store per backend (embedded in a temp directory, Azurite "
        f"{azurite_process.installed_version()} with disk persistence on loopback) holds "
        f"{ACTIVE_JOBS} running jobs of {ACTIVE_CHUNKS} chunks ({ACTIVE_DONE} done, "
        f"{ACTIVE_RUNNING} running with a checkpoint) and ended jobs up to each size (done; "
        "one in 100 failed, one in 500 cancelled). The ended jobs' records are written "
        f"straight into the job catalogue in atomic batches of {BATCH}, not submitted: "
        "job records only, no chunks (the default views read none of an ended job). "
        "Their index's counts row is moved by as many, as their ends would have. "
        "The default views list the active jobs and count the ended ones from the "
        "catalogue's index, read in one range query; requests are counted at "
        "the storage protocols, each call one (the catalogue's query is one call, and "
        "one request per 1,000 rows at Azure's wire). Times in one process on the real "
        f"clock, median of {args.runs} runs; the target is each default view within "
        f"{TARGET_RATIO:g}× its time at {sizes[0]:,} jobs. `--all --json` at "
        f"{sizes[0]:,} jobs is what every view cost before, per job, for reference.",
        "",
        *rows,
    ]
    print("\n".join(body))
    if args.output:
        write_section(args.output, "Status views: cost by jobs retained", body)


if __name__ == "__main__":
    main()
