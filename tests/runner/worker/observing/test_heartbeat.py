"""Workers' heartbeats (runner/worker/observing/heartbeat.py, checkpoint/workers.py): written, read
by status, shown gone when they stop coming, removed by the workers themselves after an hour.

Both backends, on a FakeClock: the records' times are the worker's own clock, so time is
advanced, not waited for (on Azurite too). The workers table is shared by every test of
a session on Azurite, so tests look only at their own workers.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock, SystemClock
from checkpoint.errors import BadRecord
from checkpoint.storage import Record
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults
from checkpoint.workers import (
    GONE_AFTER_BEATS,
    REMOVE_AFTER_SECONDS,
    TASKS_CHARS,
    WorkerBook,
    WorkerRecord,
)
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.cli.json_form import to_json, utc
from runner.cli.snapshot import read_report, read_snapshot, read_workers
from runner.worker.loop import WorkerLoop, WorkerSettings
from runner.worker.observing.heartbeat import MIN_GAP_SECONDS, Heartbeat, Identity, RunningTasks
from runner.worker.observing.logs import TaskIds
from tests.backends import Backend

BEAT = 5.0


class Quick(ChunkedJob):
    queue = "heartbeat-quick"

    def split(self, params: Any) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> Any:
        return chunk.payload


class World:
    def __init__(self, backend: Backend):
        self.clock = FakeClock()
        self.storage = backend.storage
        self.store = CheckpointStore(backend.storage, self.clock)
        self.store.ensure()
        self.book = WorkerBook(backend.storage.records)
        self.made: list[str] = []

    def heartbeat(self, queue: str = "hb-q", running: RunningTasks | None = None) -> Heartbeat:
        worker_id = f"test-host:{len(self.made) + 1}:{uuid.uuid4().hex[:4]}"
        self.made.append(worker_id)
        identity = Identity(worker_id, (queue,), ("tests:Job",), 4, host="test-host", pid=4711)
        return Heartbeat(self.book, identity, running or RunningTasks(), self.clock, BEAT)

    def mine(self) -> dict[str, dict[str, Any]]:
        """This test's workers as status reads them, by id."""
        found = to_json(read_workers(self.store, self.clock.now()))
        return {w["worker_id"]: w for w in found if w["worker_id"] in self.made}

    def clean_up(self) -> None:
        for worker_id in self.made:
            self.storage.records.delete(
                layout.WORKERS_TABLE, layout.WORKERS_PARTITION, worker_id, etag="*"
            )


@pytest.fixture
def world(backend: Backend):
    made = World(backend)
    yield made
    made.clean_up()


def test_a_beat_writes_who_the_worker_is_and_what_it_runs(world: World):
    running = RunningTasks()
    beat = world.heartbeat(running=running)
    started = world.clock.now()

    with (
        running.running(TaskIds("job-a", "chunk", 7, 1)),
        running.running(TaskIds("job-b", "final", 0, 1)),
    ):
        world.clock.advance(2)
        assert beat.beat()

    (shown,) = world.mine().values()
    assert shown["host"] == "test-host" and shown["pid"] == 4711
    assert shown["queues"] == ["hb-q"] and shown["job_types"] == ["tests:Job"]
    assert shown["concurrency"] == 4
    assert shown["running"] == 2 and shown["tasks"] == ["job-a#7", "job-b:final"]
    assert shown["state"] == "serving" and shown["gone"] is False
    assert shown["started_on"] == utc(started)
    assert shown["seen_on"] == utc(started + timedelta(seconds=2))
    assert shown["seen_ago_seconds"] == 0.0 and shown["beat_seconds"] == BEAT


def test_a_worker_not_seen_for_three_beats_is_shown_gone(world: World):
    beat = world.heartbeat()
    beat.beat()

    world.clock.advance(GONE_AFTER_BEATS * BEAT)
    (shown,) = world.mine().values()
    assert shown["gone"] is False and shown["seen_ago_seconds"] == GONE_AFTER_BEATS * BEAT

    world.clock.advance(0.1)
    (shown,) = world.mine().values()
    assert shown["gone"] is True and shown["state"] == "serving"


def test_a_worker_that_stops_says_so_and_is_gone_at_once(world: World):
    beat = world.heartbeat()
    beat.beat()
    beat.stopping()
    beat.beat()
    assert next(iter(world.mine().values()))["state"] == "stopping"

    beat.stop()

    (shown,) = world.mine().values()
    assert shown["state"] == "stopped" and shown["gone"] is True


def test_workers_remove_heartbeats_gone_for_an_hour(world: World):
    # Given a worker that stopped beating, and one that goes on
    old, alive = world.heartbeat(), world.heartbeat()
    old.beat()
    world.clock.advance(REMOVE_AFTER_SECONDS - 10)
    alive.beat()
    alive.sweep()  # the first sweep, at start: nothing is an hour old yet
    assert set(world.mine()) == {old._identity.worker_id, alive._identity.worker_id}

    # When more than an hour has passed since the first was seen, and a sweep is due
    world.clock.advance(20)
    alive.beat()
    alive.sweep()  # not due yet (one every few minutes)
    assert old._identity.worker_id in world.mine()
    world.clock.advance(300)
    alive.beat()
    alive.sweep()

    # Then its record is gone, and the live one stays
    assert set(world.mine()) == {alive._identity.worker_id}


def test_status_lists_the_workers_serving_each_jobs_queue(world: World):
    job, _ = world.store.create_job(f"hb-{uuid.uuid4().hex[:8]}", "tests:Job", "hb-q", {})
    serving, elsewhere = world.heartbeat("hb-q"), world.heartbeat("other-q")
    serving.beat()
    elsewhere.beat()

    (report,) = to_json(read_report(world.store, job.job_id))

    assert [w["worker_id"] for w in report["workers"]] == [serving._identity.worker_id]
    snapshot = to_json(read_snapshot(world.store, job.job_id))
    assert [w["worker_id"] for w in snapshot["workers"]] == [serving._identity.worker_id]
    assert snapshot["taken_on"] == utc(world.clock.now())


def test_a_heartbeat_that_cannot_be_read_is_left_out(world: World):
    beat = world.heartbeat()
    beat.beat()
    world.storage.records.merge(
        layout.WORKERS_TABLE,
        layout.WORKERS_PARTITION,
        beat._identity.worker_id,
        {"state": "dancing"},
        etag="*",
    )
    assert world.mine() == {}
    found = [w for w in world.book.scan(world.store.budget()) if isinstance(w, BadRecord)]
    assert any("state 'dancing' is not one of" in str(bad) for bad in found)


def test_a_failed_beat_is_logged_once_and_the_next_one_writes(tmp_path: Path, caplog):
    clock = FakeClock()
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    faults = ScriptedFaults(("records.upsert", "busy"), ("records.upsert", "busy"))
    faulty = FaultyStorage(storage, faults, sleep=clock.sleep)
    CheckpointStore(storage, clock).ensure()
    identity = Identity("h:1:abcd", ("q",), ("tests:Job",), 1)
    beat = Heartbeat(WorkerBook(faulty.storage.records), identity, RunningTasks(), clock, BEAT)
    caplog.set_level(logging.INFO, logger="runner")

    assert beat.beat() is False
    assert beat.beat() is False
    assert beat.beat() is True

    said = [r.getMessage() for r in caplog.records if "heartbeat" in r.getMessage()]
    assert len([line for line in said if "not written" in line]) == 1
    assert said[-1] == "heartbeat written again"
    storage.close()


def test_a_worker_loop_beats_while_it_serves_and_says_stopped_at_the_end(tmp_path: Path):
    # Given a worker (real clock) beating every 0.05 s, stopped once it has beaten twice
    storage = open_storage(str(tmp_path / "store"))
    submit(Quick, {"chunks": 3}, storage=storage)
    settings = WorkerSettings(heartbeat_seconds=0.05, poll_max_seconds=0.05)
    loop = WorkerLoop(storage, [Quick], settings)
    book = WorkerBook(storage.records)
    seen: list[WorkerRecord] = []

    def watch() -> None:
        while loop.heartbeat.beats < 3:
            threading.Event().wait(0.02)
        found = book.scan(CheckpointStore(storage).budget())
        seen.extend(w for w in found if isinstance(w, WorkerRecord))
        loop.request_stop()

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert loop.run() == 0
    watcher.join()

    (during,) = seen
    assert during.worker_id == loop.worker_id and during.state in ("serving", "stopping")
    assert during.queues == ("heartbeat-quick",) and during.job_types == (Quick.job_type(),)
    (after,) = book.scan(CheckpointStore(storage).budget())
    assert isinstance(after, WorkerRecord) and after.state == "stopped"
    storage.close()


def test_chunks_following_each_other_wait_for_the_beat_a_new_job_does_not(tmp_path: Path):
    # Given a worker's heartbeat (real time, a beat every 5 s), written once at start
    storage = open_storage(str(tmp_path / "store"))
    CheckpointStore(storage).ensure()
    running = RunningTasks()
    identity = Identity("h:1:abcd", ("q",), ("tests:Job",), 1)
    heartbeat = Heartbeat(WorkerBook(storage.records), identity, running, SystemClock(), BEAT)
    heartbeat.start()

    def run(job_id: str, index: int) -> None:
        with running.running(TaskIds(job_id, "chunk", index, 1)):
            threading.Event().wait(0.005)

    index = 0

    def beats_while_running(job_id: str, beats: int, seconds: float) -> None:
        """Quick chunks of ``job_id`` one after another until the heartbeat has written
        more than ``beats`` or ``seconds`` have passed."""
        nonlocal index
        deadline = time.monotonic() + seconds
        while heartbeat.beats <= beats and time.monotonic() < deadline:
            run(job_id, index)
            index += 1

    try:
        # Once its first beat (idle) is written
        deadline = time.monotonic() + 10
        while heartbeat.beats < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heartbeat.beats == 1

        # When it runs quick chunks of one job, going busy is worth a beat, sooner than
        # the one due (MIN_GAP_SECONDS after the first)
        beats_while_running("job-a", 1, 4 * MIN_GAP_SECONDS)
        assert heartbeat.beats == 2

        # but one chunk following another of the same job is not: for 1.5 s (the beat
        # due comes 5 s after the last) no beat is written
        beats_while_running("job-a", 2, 1.5)
        assert heartbeat.beats == 2

        # When a chunk of another job runs beside them, that is written at once (within
        # 2.5 s: the beat due is 3.5 s away)
        with running.running(TaskIds("job-b", "chunk", 0, 1)):
            beats_while_running("job-a", 2, 2.5)
        assert heartbeat.beats == 3
    finally:
        heartbeat.stop()
        storage.close()


def test_a_change_after_a_failed_first_beat_is_written_before_the_beat_is_due(tmp_path: Path):
    # Given a heartbeat (real time, a beat every 5 s) whose first beat the store refused
    storage = open_storage(str(tmp_path / "store"))
    CheckpointStore(storage).ensure()
    faults = ScriptedFaults(("records.upsert", "busy"))
    faulty = FaultyStorage(storage, faults)
    running = RunningTasks()
    identity = Identity("h:1:abcd", ("q",), ("tests:Job",), 1)
    book = WorkerBook(faulty.storage.records)
    heartbeat = Heartbeat(book, identity, running, SystemClock(), BEAT)
    heartbeat.start()
    try:
        deadline = time.monotonic() + 10
        while faults.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert heartbeat.beats == 0  # refused: nothing written yet

        # When a task starts
        with running.running(TaskIds("job-a", "chunk", 0, 1)):
            deadline = time.monotonic() + 3 * MIN_GAP_SECONDS
            while heartbeat.beats == 0 and time.monotonic() < deadline:
                time.sleep(0.01)

        # Then it is written before the beat is due: with nothing written, any change
        # is news
        assert heartbeat.beats == 1
    finally:
        heartbeat.stop()
        storage.close()


def _worker_record(**changes: Any) -> WorkerRecord:
    when = FakeClock().now()
    fields: dict[str, Any] = {
        "worker_id": "host:1:abcd",
        "host": "host",
        "pid": 1,
        "queues": ("q",),
        "job_types": ("m:Job",),
        "concurrency": 2,
        "tasks": ("j#1",),
        "running": 1,
        "state": "serving",
        "started_on": when,
        "seen_on": when,
        "beat_seconds": 5.0,
    }
    return WorkerRecord(**{**fields, **changes})


def test_a_heartbeat_reads_back_as_written_with_its_task_list_cut_at_a_whole_task():
    many = tuple(f"job-{n:04d}#{n}" for n in range(1000))  # ~13,000 characters
    written = _worker_record(tasks=many, running=1000).properties()

    assert len(written["tasks"]) <= TASKS_CHARS  # type: ignore[arg-type]
    assert str(written["tasks"]).split()[-1] in many
    back = WorkerRecord.from_record(Record("workers", "host:1:abcd", written, "e1"))
    assert back.running == 1000 and back.tasks == many[: len(back.tasks)]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"started_on": None}, "started_on and seen_on are required"),
        ({"beat_seconds": 0.0}, "beat_seconds 0.0 is not a number of seconds > 0"),
        ({"beat_seconds": "5"}, "beat_seconds '5' is not a number of seconds > 0"),
    ],
)
def test_a_garbled_heartbeat_is_a_bad_record_naming_the_worker(changes, problem):
    properties = {**_worker_record().properties(), **changes}

    with pytest.raises(BadRecord, match=f"^worker 'host:1:abcd': {problem}"):
        WorkerRecord.from_record(Record("workers", "host:1:abcd", properties, "e1"))
