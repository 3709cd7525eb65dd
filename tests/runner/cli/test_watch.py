"""``runner status --watch``: the view drawn from a snapshot (runner/cli/watch_view.py, a pure
function rendered to a recording console, no terminal), rates and ETAs
(runner/cli/watch.py), and the command itself in a subprocess: refreshing without a terminal,
redrawn on a pseudo-terminal, ending cleanly on Ctrl-C."""

from __future__ import annotations

import io
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import Throttled
from checkpoint.records import CHECKPOINT_ON, Progress
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook
from runner.cli import commands
from runner.cli.json_form import utc
from runner.cli.pace import duration
from runner.cli.selection import SHOWN_BY_DEFAULT, Listing
from runner.cli.snapshot import read_snapshot
from runner.cli.status_types import (
    AnyJob,
    ChunkCounts,
    FailedTask,
    JobCounts,
    JobStatus,
    Rate,
    RunningChunk,
    Snapshot,
    UnreadableJob,
    WatchFrame,
    WorkerStatus,
)
from runner.cli.watch import Rates, watch
from runner.cli.watch_lines import plain_lines
from runner.cli.watch_view import MAX_ENDED_JOBS, render_watch
from runner.worker.observing.heartbeat import Heartbeat, Identity, RunningTasks
from runner.worker.observing.logs import TaskIds
from tests.azurite import Azurite
from tests.backends import Backend
from tests.e2e.processes import ROOT, runner_command


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``): a watched list counts
    the store's ended jobs and shows the newest, two reads that other tests' jobs ending
    on the session's Azurite between them could make disagree."""
    return own_azurite


NOW = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def _text(renderable: Any, width: int = 120) -> str:
    console = Console(record=True, width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def _job(job_id: str = "copy-rows-1", **changes: Any) -> JobStatus:
    job = JobStatus(
        job_id=job_id,
        job_type="example:CopyRows",
        queue="copy-rows",
        queues=("copy-rows",),
        state="running",
        error=None,
        paused=False,
        paused_on=None,
        drain=False,
        cancelled_on=None,
        cancel_reason=None,
        created_on=None,
        updated_on=_at(-5),
        last_progress_at=None,
        planning_done=True,
        chunks=ChunkCounts(
            total=8, done=4, running=2, waiting=1, failed=1, poisoned=0, cancelled=0
        ),
        progress_fraction=0.5625,
        chunks_per_second=None,
        eta_seconds=None,
        running=(
            RunningChunk(
                index=4,
                worker="vm:29466:9ff4",
                attempt=1,
                lease_until=_at(21),
                lease_expired=False,
                progress=430,
                progress_omitted=False,
                progress_text="430",
                progress_fraction=0.43,
                progress_done=430,
                progress_total=1000,
                checkpoint_on=_at(-3),
                started_on=None,
            ),
            RunningChunk(
                index=5,
                worker="vm:29467:73fa",
                attempt=2,
                lease_until=_at(-1),
                lease_expired=True,
                progress=None,
                progress_omitted=False,
                progress_text="None",
                progress_fraction=None,
                progress_done=None,
                progress_total=None,
                checkpoint_on=None,
                started_on=None,
            ),
        ),
        failed=(
            _failed_task(
                kind="chunk",
                index=6,
                attempt=1,
                max_attempts=5,
                retry_at=_at(40),
                error_type="ValueError",
                error_message="row 100",
            ),
            _failed_task(kind="final", index=0, attempt=2, error_type="OSError", error_message="x"),
        ),
        poisoned=(),
        finalize=None,
        unreadable=(),
    )
    return replace(job, **changes)


def _failed_task(**given: Any) -> FailedTask:
    shown: dict[str, Any] = {
        "state": "retrying",
        "max_attempts": None,
        "retryable": None,
        "retry_at": None,
        "retry_due": False,
        "traceback": None,
    }
    return FailedTask(**{**shown, **given})


def _worker(worker_id: str, **changes: Any) -> WorkerStatus:
    worker = WorkerStatus(
        worker_id=worker_id,
        host="vm",
        pid=1,
        queues=("copy-rows",),
        job_types=("example:CopyRows",),
        concurrency=2,
        running=1,
        tasks=(),
        state="serving",
        gone=False,
        started_on=_at(-3725),
        seen_on=_at(-2),
        seen_ago_seconds=2.0,
        beat_seconds=5.0,
    )
    return replace(worker, **changes)


def _snapshot(
    jobs: list[AnyJob] | None = None,
    workers: list[WorkerStatus] | None = None,
    rates: dict[str, Rate] | None = None,
    error: str | None = None,
) -> WatchFrame:
    if workers is None:
        workers = [
            _worker("vm:29466:9ff4"),
            _worker("vm:29467:73fa", running=0),
            _worker("vm:29468:0abc", gone=True, seen_on=_at(-45)),
            _worker("vm:29469:1def", gone=True, state="stopped", seen_on=_at(-600)),
        ]
    return WatchFrame(
        snapshot=Snapshot(
            taken_on=NOW,
            jobs=tuple([_job()] if jobs is None else jobs),
            workers=tuple(workers),
        ),
        rates={"copy-rows-1": Rate(chunks_per_second=0.25, eta_seconds=14.0)}
        if rates is None
        else rates,
        storage="embedded:/data/.runner",
        interval_seconds=2.0,
        error=error,
    )


# --------------------------------------------------------------------------- the view


def test_the_view_shows_each_job_its_running_chunks_and_the_workers():
    text = _text(render_watch(_snapshot()))
    lines = [line.rstrip() for line in text.splitlines()]

    assert lines[0].startswith("chunkrunner  embedded:/data/.runner  2030-01-01T12:00:00.000000Z")
    assert "every 2 s, Ctrl-C to quit" in lines[0]
    assert lines[1] == "copy-rows-1  example:CopyRows  running"
    assert re.search(r"  56%  4/8 done  0\.25 chunks/s  ETA 14s$", lines[2])
    assert lines[3] == "running 2  waiting 1  failed 1  poisoned 0"
    assert re.split(r"\s{2,}", lines[4].strip()) == [
        "chunk", "worker", "attempt", "progress", "lease left", "checkpoint"
    ]  # fmt: skip
    assert re.split(r"\s{2,}", lines[5].strip()) == [
        "#4", "vm:29466:9ff4", "1", "43% (430/1,000)", "21s", "3s"
    ]  # fmt: skip
    assert re.split(r"\s{2,}", lines[6].strip()) == [
        "#5", "vm:29467:73fa", "2", "-", "expired", "none yet"
    ]  # fmt: skip
    assert lines[7] == "failed #6 attempt 1 of 5, next try in 40s: ValueError: row 100"
    assert lines[8] == "failed final attempt 2: OSError: x"
    workers = lines[lines.index("workers") + 2 :]
    assert [re.split(r"\s{2,}", line.strip()) for line in workers if line] == [
        ["vm:29466:9ff4", "copy-rows", "1/2", "serving", "2s ago", "1h02m"],
        ["vm:29467:73fa", "copy-rows", "idle", "serving", "2s ago", "1h02m"],
        ["1 stopped and 1 gone in the last hour"],
    ]


def test_only_live_workers_get_a_row_the_others_are_counted():
    # Given a fleet restarted twice within the hour: 2 live, 6 stopped, 1 killed
    stopped = [
        _worker(f"vm:{n}:dead", gone=True, state="stopped", seen_on=_at(-60 * n)) for n in range(6)
    ]
    live = [_worker("vm:100:aaaa"), _worker("vm:101:bbbb", running=0)]
    workers = [*stopped, _worker("vm:7:gone", gone=True, seen_on=_at(-45)), *live]

    lines = [line.rstrip() for line in _text(render_watch(_snapshot(workers=workers))).splitlines()]

    rows = lines[lines.index("workers") + 2 :]
    # pid 100 is shown as itself, not as the emoji :100:
    assert [line.split()[0] for line in rows if line.strip()] == ["vm:100:aaaa", "vm:101:bbbb", "6"]
    assert rows[-1].strip() == "6 stopped and 1 gone in the last hour"
    nobody = _text(render_watch(_snapshot(workers=stopped[:2])))
    assert "workers: none live; 2 stopped in the last hour" in nobody


def test_a_retry_that_is_due_says_how_long_it_has_waited_for_a_worker():
    failed = (replace(_job().failed[0], retry_at=_at(-65), retry_due=True),)
    text = _text(render_watch(_snapshot(jobs=[_job(failed=failed)])))
    assert "failed #6 attempt 1 of 5, next try due 1m05s ago, waiting for a worker: " in text
    assert "next try in" not in text


def test_a_paused_job_says_paused_where_its_rate_and_eta_were():
    snapshot = _snapshot(jobs=[_job(paused=True)])  # rates as a running job would have
    lines = [line.rstrip() for line in _text(render_watch(snapshot)).splitlines()]
    assert lines[1] == "copy-rows-1  example:CopyRows  running  paused"
    assert re.search(r"  56%  4/8 done  paused$", lines[2])


def test_the_same_snapshot_draws_the_same_view():
    assert _text(render_watch(_snapshot())) == _text(render_watch(_snapshot()))


def test_paused_and_cancelled_jobs_say_so_and_ended_jobs_take_a_line_each():
    jobs = [
        _job("paused-1", paused=True),
        _job("cancelled-1", state="cancelled", updated_on=_at(-60)),
        _job("done-1", state="done", updated_on=_at(-30)),
    ]
    lines = _text(render_watch(_snapshot(jobs=jobs, rates={}))).splitlines()

    assert lines[1].rstrip() == "paused-1  example:CopyRows  running  paused"
    ended = [line.split() for line in lines if line.startswith(("cancelled-1", "done-1"))]
    assert ended == [
        ["cancelled-1", "cancelled", "4/8", "done"],
        ["done-1", "done", "4/8", "done"],
    ]
    assert "ETA" not in "\n".join(lines)


def test_a_failed_refresh_keeps_the_last_view_and_says_why():
    text = _text(render_watch(_snapshot(error="storage unreachable: ServerBusy")))
    assert text.rstrip().endswith("last refresh failed: storage unreachable: ServerBusy")


def test_no_jobs_and_no_workers():
    text = _text(render_watch(_snapshot(jobs=[], workers=[], rates={})))
    assert "no jobs" in text and "workers: none seen" in text


def test_long_lists_are_cut_short():
    running = tuple(replace(_job().running[0], index=n) for n in range(30))
    workers = [_worker(f"vm:{n}:aaaa") for n in range(25)]
    text = _text(render_watch(_snapshot(jobs=[_job(running=running)], workers=workers)))
    assert "... 18 more" in text and "... 5 more" in text


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0, "0s"), (44.6, "45s"), (125, "2m05s"), (3725, "1h02m"), (3 * 86400 + 4 * 3600, "3d04h")],
)
def test_durations_are_two_units_at_most(seconds, said):
    assert duration(seconds) == said


def test_a_real_snapshot_renders(backend: Backend):
    # Given a job whose chunk 0 runs at 40 % on a worker whose heartbeat is written
    clock = FakeClock()
    store = CheckpointStore(backend.storage, clock)
    job_id = f"watch-{uuid.uuid4().hex[:8]}"
    queue = f"wq-{uuid.uuid4().hex[:8]}"
    job, _ = store.create_job(job_id, "tests:Job", queue, {})
    store.add_chunks(job_id, 0, [0, 1])
    store.update_job(job, state="running", total=2)
    task = store.get_task(job_id, "chunk", 0)
    changes = {
        "state": "running",
        "owner": "test-host:1:abcd",
        "attempt": 1,
        "lease_until": clock.now() + timedelta(seconds=30),
        CHECKPOINT_ON: clock.now(),
        **Progress(0.4, 4, 10).properties(),
    }
    store.write_task(task, changes, {"progress": 4})
    running = RunningTasks()
    identity = Identity("test-host:1:abcd", (queue,), ("tests:Job",), 2)
    heartbeat = Heartbeat(WorkerBook(backend.storage.records), identity, running, clock)
    with running.running(TaskIds(job_id, "chunk", 0, 1)):
        heartbeat.beat()
    clock.advance(3)

    # When a snapshot of the job is read and drawn
    text = _text(render_watch(WatchFrame(read_snapshot(store, job_id))))

    # Then it shows the job at 20 %, the chunk at 40 %, and the worker
    assert f"{job_id}  tests:Job  running" in text
    assert " 20%  0/2 done" in text
    assert re.search(r"#0\s+test-host:1:abcd\s+1\s+40% \(4/10\)\s+27s\s+3s", text)
    assert re.search(r"test-host:1:abcd\s+" + queue + r"\s+1/2\s+serving\s+3s ago", text)
    backend.storage.records.delete("runnerworkers", "workers", "test-host:1:abcd", etag="*")


# --------------------------------------------------------------------------- rates


def _progress_job(done: float, total: int = 100, **changes: Any) -> JobStatus:
    chunks = ChunkCounts(
        total=total, done=int(done), running=0, waiting=0, failed=0, poisoned=0, cancelled=0
    )
    return _job("j", chunks=chunks, progress_fraction=done / total, **changes)


def test_the_rate_is_measured_over_the_last_minute_and_gives_an_eta():
    rates = Rates(window_seconds=60)
    assert rates.observe(0, [_progress_job(0)])["j"] == Rate(
        chunks_per_second=None,
        eta_seconds=None,
    )
    # 1 chunk/s for the first 60 s, then 2 chunks/s
    for second in range(1, 61):
        rates.observe(second, [_progress_job(second)])
    assert rates.observe(61, [_progress_job(61)])["j"].chunks_per_second == pytest.approx(1.0)
    for second in range(62, 150):
        said = rates.observe(second, [_progress_job(61 + 2 * (second - 61), total=1000)])["j"]
    assert said.chunks_per_second == pytest.approx(2.0, rel=0.05)
    assert said.eta_seconds == pytest.approx((1000 - 237) / said.chunks_per_second)


def test_no_eta_while_nothing_moves_or_planning_goes_on_or_the_job_ended():
    rates = Rates()
    rates.observe(0, [_progress_job(10)])
    assert rates.observe(5, [_progress_job(10)])["j"] == Rate(
        chunks_per_second=0.0,
        eta_seconds=None,
    )
    rates.observe(10, [_progress_job(20, planning_done=False)])
    assert rates.observe(15, [_progress_job(30, planning_done=False)])["j"].eta_seconds is None
    assert rates.observe(20, [_progress_job(40, state="failed")])["j"].eta_seconds is None


def test_the_first_refreshes_show_the_rate_the_store_gives_then_their_own():
    # Given a job the store says moves at 0.5 chunks/s, 20 chunks from its end
    rates = Rates()

    def job(done: float, total: int = 100) -> JobStatus:
        return _progress_job(done, total, chunks_per_second=0.5, eta_seconds=40.0)

    # Then the first refresh has that rate and ETA, and so do those of its first 30 s
    assert rates.observe(0, [job(80)])["j"] == Rate(0.5, 40.0)
    assert rates.observe(2, [job(80)])["j"] == Rate(0.5, 40.0)
    # and once the refreshes span 30 s, the rate is theirs (2 chunks/s)
    said = rates.observe(30, [job(140, total=1000)])["j"]
    assert said.chunks_per_second == pytest.approx(2.0)


def test_a_job_no_longer_shown_is_forgotten():
    rates = Rates()
    rates.observe(0, [_progress_job(0)])
    rates.observe(1, [])
    assert rates.observe(2, [_progress_job(50)])["j"].chunks_per_second is None


def test_a_paused_job_has_no_rate_and_its_pause_does_not_count_after_the_resume():
    rates = Rates()
    for second in range(31):  # 1 chunk/s
        rates.observe(second, [_progress_job(second)])
    for second in range(31, 91):  # paused a minute: nothing moves
        said = rates.observe(second, [_progress_job(30, paused=True)])["j"]
        assert said == Rate(chunks_per_second=None, eta_seconds=None)
    rates.observe(91, [_progress_job(31)])  # resumed at 1 chunk/s
    said = rates.observe(93, [_progress_job(33)])["j"]
    assert said.chunks_per_second == pytest.approx(1.0)
    assert said.eta_seconds == pytest.approx(67.0)


# --------------------------------------------------------------------------- no terminal

LINE_START = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z  ")


def test_without_a_terminal_each_refresh_is_a_plain_line_per_job(backend: Backend):
    # Given a job of 4 chunks, one of which is done at each refresh, 2 s apart
    clock = backend.clock or FakeClock()
    store = CheckpointStore(backend.storage, clock)
    job_id = f"a-rather-long-job-name-for-a-log-{uuid.uuid4().hex[:8]}"
    job, _ = store.create_job(job_id, "tests:Job", f"wq-{uuid.uuid4().hex[:8]}", {})
    store.add_chunks(job_id, 0, [0, 1, 2, 3])
    store.update_job(job, state="running", total=4)
    started = clock.now()

    def one_more_done(refresh: int) -> None:
        clock.advance(2)
        task = store.get_task(job_id, "chunk", refresh)
        store.count_chunk(task, {"state": "done", "owner": "", "attempt": 1}, {}, "done")

    # When it is watched, output to a pipe, for three refreshes
    out = io.StringIO()
    console = Console(file=out, width=80)
    stop = _Stop(after=3, each=one_more_done)
    watch(lambda: read_snapshot(store, job_id), 2.0, stop, console, "x:/s", clock.monotonic)

    # Then a header, then one whole line per refresh, however wide: counts, rate, ETA
    stamps = [utc(started + timedelta(seconds=2 * n)) for n in range(3)]
    counts = "running 0  waiting {}  failed 0  poisoned 0"
    assert out.getvalue().splitlines() == [
        "chunkrunner  x:/s  every 2 s",
        f"{stamps[0]}  {job_id}  running  0%  0/4 done  {counts.format(4)}",
        f"{stamps[1]}  {job_id}  running  25%  1/4 done  {counts.format(3)}  0.50 chunks/s  ETA 6s",
        f"{stamps[2]}  {job_id}  running  50%  2/4 done  {counts.format(2)}  0.50 chunks/s  ETA 4s",
    ]
    assert "\x1b" not in out.getvalue()


def test_a_watched_list_shows_a_job_that_ends_and_counts_the_ended_ones(backend: Backend):
    # Given a running job of one chunk, watched as `runner status --watch` lists jobs:
    # the newest (on Azurite the session's store holds other tests' jobs, some active;
    # a list cut to the newest few reads only those in full)
    clock = backend.clock or FakeClock(datetime(2090, 1, 1, tzinfo=UTC))
    store = CheckpointStore(backend.storage, clock)
    job_id = f"ends-{uuid.uuid4().hex[:8]}"
    job, _ = store.create_job(job_id, "tests:Job", f"wq-{uuid.uuid4().hex[:8]}", {})
    store.add_chunks(job_id, 0, [0])
    store.update_job(job, state="running", total=1)
    listing = replace(Listing(limit=3), recent_ended=MAX_ENDED_JOBS)

    def ends(refresh: int) -> None:
        task = store.get_task(job_id, "chunk", 0)
        store.count_chunk(task, {"state": "done", "owner": "", "attempt": 1}, {}, "done")
        store.change_job(job_id, lambda job: {"state": "done"})

    # When it ends between the first and second refresh
    out = io.StringIO()
    stop = _Stop(after=2, each=ends)
    read = lambda: read_snapshot(store, None, listing)  # noqa: E731
    console = Console(file=out, width=80)
    watch(read, 2.0, stop, console, "x:/s", clock.monotonic)  # type: ignore[arg-type]

    # Then its line says so at the second refresh, though a default list leaves ended jobs
    # out, and the view counts the store's ended jobs
    mine = [line.split("  ")[2] for line in out.getvalue().splitlines() if job_id in line]
    assert mine == ["running", "done"]
    snapshot = read_snapshot(store, None, listing)
    assert snapshot.counts is not None
    ended = sum(snapshot.counts.by_state[state] for state in ("done", "failed", "cancelled"))
    shown = [job for job in snapshot.jobs if job.state in ("done", "failed", "cancelled")]
    text = _text(render_watch(WatchFrame(snapshot)))
    assert len(shown) <= MAX_ENDED_JOBS
    assert ended == len(shown) or f"... {ended - len(shown):,} more ended" in text


def test_a_running_chunk_with_no_lease_time_recorded_shows_a_question_mark():
    # Given a running chunk whose record holds no lease time (a claim mid-write)
    job = _job()
    chunk = replace(job.running[0], lease_until=None, lease_expired=False)
    frame = _snapshot(jobs=[replace(job, running=(chunk,))])

    # When the view is rendered, then its lease column says it does not know
    row = next(line for line in _text(render_watch(frame)).splitlines() if "#4" in line)
    assert " ? " in row and "expired" not in row


def test_a_watched_list_cut_to_its_limit_says_how_many_active_jobs_it_left_out():
    # Given a list of 2 active jobs shown of 5 matched, and one ended job of 4
    counts = JobCounts(
        by_state={"running": 5, "done": 4, "failed": 0, "cancelled": 0},
        unreadable=0,
        matched=5,
        left_out=3,
    )
    jobs: list[AnyJob] = [_job("a"), _job("b"), _job("c", state="done")]
    frame = _snapshot(jobs=jobs)
    frame = replace(frame, snapshot=replace(frame.snapshot, counts=counts))

    # When it is rendered
    text = _text(render_watch(frame))

    # Then it says what the limit left out, beside the ended jobs left out; piped, on
    # the first refresh only
    assert "... 3 more active, older (raise --limit)" in text
    assert "... 3 more ended" in text
    first = plain_lines(frame, set(), first=True)
    assert first[-1].endswith("  ... 3 more active, older (raise --limit)")
    assert not any("more active" in line for line in plain_lines(frame, {"a"}, first=False))


def test_watch_takes_the_lists_filters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    watched: list[Any] = []
    monkeypatch.setattr(commands, "watch_status", lambda *args: watched.append(args))
    where = ["status", "--watch", "--storage", _store_with_a_job(tmp_path)]

    for given in (["--state", "done", "--limit", "3"], ["--all"], []):
        result = CliRunner().invoke(commands.cli, [*where, *given])
        assert result.exit_code == 0, result.output

    assert [args[3] for args in watched] == [
        Listing(states=("done",), limit=3),
        Listing(every=True, limit=SHOWN_BY_DEFAULT),
        Listing(limit=SHOWN_BY_DEFAULT),
    ]


def test_plain_lines_show_each_job_not_ended_and_an_ended_one_once():
    running, old = _job("copy-rows-1"), _job("old-1", state="done", updated_on=_at(-600))
    counts = "running 2  waiting 1  failed 1  poisoned 0"

    first = plain_lines(_snapshot(jobs=[running, old]), set(), first=True)
    ended = plain_lines(_snapshot(jobs=[_job(state="done"), old]), {"copy-rows-1"}, first=False)
    quiet = plain_lines(_snapshot(jobs=[_job(state="done"), old]), set(), first=False)

    at = "2030-01-01T12:00:00.000000Z"
    assert first == [
        f"{at}  copy-rows-1  running  56%  4/8 done  {counts}  0.25 chunks/s  ETA 14s",
        f"{at}  old-1  done  56%  4/8 done  {counts}",
    ]
    assert ended == [f"{at}  copy-rows-1  done  56%  4/8 done  {counts}"]
    assert quiet == [f"{at}  no job running (2 ended)"]
    paused = plain_lines(_snapshot(jobs=[_job(paused=True)]), set(), first=False)
    assert paused == [f"{at}  copy-rows-1  running  56%  4/8 done  {counts}  paused"]
    planning = _job(
        "plan-1",
        state="planning",
        planning_done=False,
        chunks=ChunkCounts(
            total=0, done=0, running=0, waiting=0, failed=0, poisoned=0, cancelled=0
        ),
        progress_fraction=None,
    )
    assert plain_lines(_snapshot(jobs=[planning], rates={}), set(), first=False) == [
        f"{at}  plan-1  planning  0%  0/0+ (planning) done  "
        "running 0  waiting 0  failed 0  poisoned 0"
    ]
    unreadable = UnreadableJob(job_id="bad-1", error="job 'bad-1': garbled", unreadable=())
    assert plain_lines(_snapshot(jobs=[unreadable]), set(), first=True) == [
        f"{at}  bad-1  unreadable: job 'bad-1': garbled"
    ]


def test_without_a_terminal_a_failed_refresh_is_one_line():
    # Given a read whose second refresh fails and whose third stops the watch
    out = io.StringIO()
    console = Console(file=out, width=100)
    stop = _Stop(after=3)
    reads = iter([_snapshot().snapshot, None, _snapshot(rates={}).snapshot])

    def read() -> Snapshot:
        snapshot = next(reads)
        if snapshot is None:
            raise Throttled("ServerBusy")
        return snapshot

    watch(read, 0.01, stop, console, "embedded:/x", monotonic=iter(range(100)).__next__)

    lines = out.getvalue().splitlines()
    assert lines[0] == "chunkrunner  embedded:/x  every 0.01 s"
    assert lines[2] == "refresh failed: ServerBusy (last read 2030-01-01T12:00:00.000000Z)"
    assert [line.split("  ")[1] for line in lines[1:] if LINE_START.match(line)] == [
        "copy-rows-1",
        "copy-rows-1",
    ]


class _Stop:
    """A stop event that is set after ``after`` waits; ``each(n)`` runs at the n-th wait
    that does not stop (what happens between two refreshes)."""

    def __init__(self, after: int, each: Any = None):
        self.left, self.waits, self.each = after, 0, each

    def wait(self, seconds: float) -> bool:
        self.left -= 1
        if self.left > 0 and self.each is not None:
            self.each(self.waits)
        self.waits += 1
        return self.left <= 0


# --------------------------------------------------------------------------- the command


def _store_with_a_job(tmp_path: Path) -> str:
    storage = str(tmp_path / "store")
    with open_storage(storage) as opened:
        store = CheckpointStore(opened)
        job, _ = store.create_job("watched-1", "tests:Job", "watched", {})
        store.add_chunks("watched-1", 0, [0, 1, 2])
        store.update_job(job, state="running", total=3)
    return storage


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
        "COLUMNS": "100",
    }


def test_watch_without_a_terminal_refreshes_until_sigint_then_exits_0(tmp_path: Path):
    storage = _store_with_a_job(tmp_path)
    command = [*runner_command(), "status", "--watch", "--interval", "0.2", "--storage", storage]
    process = subprocess.Popen(
        command, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        # Two refreshes printed, a line each for the job
        assert process.stdout is not None
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 2 and time.monotonic() < deadline:
            line = process.stdout.readline().decode()
            seen += bool(LINE_START.match(line)) and "  watched-1  running  0%  0/3 done" in line
        assert seen == 2
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert err == b""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux pseudo-terminal")
def test_watch_on_a_terminal_redraws_in_place_and_ends_on_ctrl_c(tmp_path: Path):
    storage = _store_with_a_job(tmp_path)
    command = [*runner_command(), "status", "--watch", "--interval", "0.2", "--storage", storage]
    pid, terminal = os.forkpty()
    if pid == 0:  # the child: the command on the pseudo-terminal, nothing else
        try:
            os.chdir(ROOT)
            os.execvpe(command[0], command, _env())
        finally:
            os._exit(127)
    output = b""
    try:
        # Drawn, then redrawn in place twice (each redraw moves the cursor up first)
        output = _read_until(terminal, lambda out: out.count(b"chunkrunner") >= 3, 30)
        assert b"\x1b[1A" in output
        os.write(terminal, b"\x03")  # Ctrl-C, through the terminal: SIGINT
        # Read on until the child ends (so it never blocks on a full terminal), with a
        # generous bound for a loaded machine; past it, its threads' stacks are shown.
        output += _read_until(terminal, lambda out: False, 60)
        ended, status = _wait_for_exit(pid, 30)
        if not ended:
            os.kill(pid, signal.SIGABRT)  # faulthandler prints every thread's stack
            output += _read_until(terminal, lambda out: False, 10)
            pytest.fail("Ctrl-C did not end the view:\n" + output.decode(errors="replace"))
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert os.waitstatus_to_exitcode(status) == 0, output.decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode(errors="replace"))
    assert "watched-1  tests:Job  running" in text
    assert "Traceback" not in text and "aborted" not in text


def _wait_for_exit(pid: int, seconds: float) -> tuple[int, int]:
    """``os.waitpid`` for at most ``seconds``: (0, 0) if the child is still running."""
    deadline = time.monotonic() + seconds
    while True:
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended or time.monotonic() > deadline:
            return ended, status
        time.sleep(0.05)


def _read_until(terminal: int, done: Any, seconds: float) -> bytes:
    """What the terminal shows until ``done(output)`` or its end (or a timeout)."""
    output = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not done(output):
        ready, _, _ = select.select([terminal], [], [], 0.1)
        if not ready:
            continue
        try:
            data = os.read(terminal, 65536)
        except OSError:  # the child closed the terminal: it has exited
            return output
        if not data:
            return output
        output += data
    return output


def test_watch_and_json_together_are_refused(tmp_path: Path):
    done = subprocess.run(
        [*runner_command(), "status", "--watch", "--json", "--storage", str(tmp_path / "s")],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--watch shows a live view" in done.stderr
