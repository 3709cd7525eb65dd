"""What ``runner status`` reports of running chunks: the state itself for tools
(``--json``), a short text for people; of a cancelled job, and of a retry that is due."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.clock import FakeClock
from checkpoint.records import CHECKPOINT_ON
from checkpoint.storage import ANY_ETAG
from checkpoint.store import CheckpointStore
from jobs import Chunk, manage
from runner.cli.json_form import VALUE_JSON_BYTES, to_json, user_value, utc
from runner.cli.render import render_status
from runner.cli.status import PROGRESS_CHARS, job_status
from runner.worker.job_cache import FRESH_SECONDS
from runner.worker.stop_orders import CHECK_SECONDS
from tests.backends import Backend
from tests.runner.world import Verdicts, World


def _waiting_job(store: CheckpointStore, chunks: int) -> str:
    job_id = f"st-{uuid.uuid4().hex[:10]}"
    job, _ = store.create_job(job_id, "tests:Job", "status-q", {})
    store.add_chunks(job_id, 0, list(range(chunks)))
    store.update_job(job, state="running", total=chunks)
    return job_id


def _running_job(store: CheckpointStore, states: list[Any], waiting: int = 0) -> str:
    job_id = _waiting_job(store, len(states) + waiting)
    for index, state in enumerate(states):
        task = store.get_task(job_id, "chunk", index)
        store.write_task(
            task, {"state": "running", "owner": "w:1:ab", "attempt": 1}, {"progress": state}
        )
    return job_id


@pytest.fixture
def store(backend) -> CheckpointStore:
    return CheckpointStore(backend.storage)


def test_a_plain_state_is_given_as_itself(store: CheckpointStore):
    state = {"batch": 3, "of": 8, "files": ["a.csv", "b.csv"], "ratio": 0.5, "ok": True}
    job_id = _running_job(store, [state, 42, None])

    report = job_status(store, store.get_job(job_id), datetime.now(UTC))

    running = {chunk["index"]: chunk for chunk in to_json(report)["running"]}
    assert running[0]["progress"] == state and not running[0]["progress_omitted"]
    assert running[1]["progress"] == 42
    assert running[2]["progress"] is None and not running[2]["progress_omitted"]
    # The text people see is JSON, as runner report shows a payload, not a Python repr
    assert running[0]["progress_text"] == json.dumps(state, ensure_ascii=False)
    assert "progress 42" in render_status([report])


@pytest.mark.parametrize(
    "state",
    [
        b"\x00raw bytes",
        {"when": datetime(2030, 1, 1, tzinfo=UTC)},
        {1: "int keys"},
        [float("nan"), float("inf")],
    ],
    ids=["bytes", "datetime", "int-keys", "nan"],
)
def test_a_state_json_cannot_hold_is_given_tagged_not_mangled(store: CheckpointStore, state):
    job_id = _running_job(store, [state])

    (chunk,) = to_json(job_status(store, store.get_job(job_id), datetime.now(UTC)))["running"]

    assert chunk["progress"] == user_value(state) and chunk["progress_omitted"] is False
    assert chunk["progress"] != state  # each of these needs a $-tag
    assert len(chunk["progress_text"]) <= PROGRESS_CHARS


def test_a_state_over_the_json_limit_is_omitted(store: CheckpointStore):
    job_id = _running_job(store, [["x" * VALUE_JSON_BYTES]])

    (chunk,) = to_json(job_status(store, store.get_job(job_id), datetime.now(UTC)))["running"]

    assert chunk["progress"] is None and chunk["progress_omitted"] is True
    assert chunk["progress_text"]  # people still see something
    assert len(chunk["progress_text"]) <= PROGRESS_CHARS


# --------------------------------------------------------------------------- failures


def _retrying(store: CheckpointStore, job_id: str, index: int, retry_at: datetime) -> None:
    task = store.get_task(job_id, "chunk", index)
    changes = {
        "state": "retrying",
        "attempt": 1,
        "max_attempts": 5,
        "retryable": True,
        "retry_at": retry_at,
        "error_type": "ValueError",
        "error_message": "row 130",
    }
    store.write_task(task, changes)


def test_a_cancelled_job_has_nothing_waiting_and_nothing_to_retry(backend: Backend):
    # Given a job of 8 chunks, chunk 1 failed and due again in 30 s, cancelled
    clock = backend.clock or FakeClock()
    store = CheckpointStore(backend.storage, clock)
    job_id = _waiting_job(store, 8)
    _retrying(store, job_id, 1, clock.now() + timedelta(seconds=30))
    manage.cancel(job_id, "wrong input", storage=backend.storage, clock=clock)

    # When status is read a minute later
    clock.advance(60)
    typed = job_status(store, store.get_job(job_id), clock.now())
    status = to_json(typed)

    # Then the 7 chunks never claimed are cancelled, not waiting, and chunk 1 has no
    # next try (its message is deleted unrun when it surfaces)
    assert status["chunks"]["waiting"] == 0 and status["chunks"]["cancelled"] == 7
    (failed,) = status["failed"]
    assert failed["retry_at"] is None and failed["retry_due"] is False
    text = render_status([typed])
    assert "running 0  cancelled 7  failed 1  poisoned 0" in text
    assert "failed  chunk #1 attempt 1 of 5, not retried (cancelled): ValueError" in text
    assert "next try" not in text


def test_a_running_jobs_unclaimed_chunks_are_waiting_not_cancelled(store: CheckpointStore):
    job_id = _running_job(store, [None], waiting=2)

    typed = job_status(store, store.get_job(job_id), datetime.now(UTC))
    status = to_json(typed)

    assert (status["chunks"]["waiting"], status["chunks"]["cancelled"]) == (2, 0)
    assert "running 1  waiting 2  failed 0  poisoned 0" in render_status([typed])


def test_a_retry_that_is_due_says_it_waits_for_a_worker(store: CheckpointStore):
    # Given a chunk whose retry fell due 65 s ago, its message not yet received
    now = datetime.now(UTC)
    job_id = _running_job(store, [None, None])
    _retrying(store, job_id, 1, now - timedelta(seconds=65))

    typed = job_status(store, store.get_job(job_id), now)
    status = to_json(typed)

    (failed,) = status["failed"]
    assert failed["retry_due"] is True
    assert failed["retry_at"] == utc(now - timedelta(seconds=65))
    assert (
        f"failed  chunk #1 attempt 1 of 5, next try due since {failed['retry_at']} "
        "(waiting for a worker): ValueError: row 130"
    ) in render_status([typed])


def test_a_garbled_planning_record_is_shown_unreadable_and_the_rest_still_counted(
    store: CheckpointStore, backend: Backend
):
    # Given a running job whose planning record another version garbled
    job_id = _running_job(store, [1], waiting=1)
    store.ensure_task(job_id, "plan")
    backend.storage.records.merge(
        layout.TASKS_TABLE,
        layout.control_partition(job_id),
        layout.PLAN_ROW,
        {"attempt": "x"},
        etag=ANY_ETAG,
    )

    # When its status is read, then the record is one unreadable line, no traceback
    report = to_json(job_status(store, store.get_job(job_id), datetime.now(UTC)))
    assert [(bad["kind"], bad["index"]) for bad in report["unreadable"]] == [("plan", 0)]
    assert "attempt 'x' is not a whole number" in report["unreadable"][0]["problem"]
    # and the chunks are counted as before
    assert report["chunks"]["running"] == 1 and report["chunks"]["waiting"] == 1


# --------------------------------------------------------------------------- progress


def _stopped_mid_chunk(world: World, stop: str, progress: tuple[int, int]) -> str:
    """A job of 4 chunks whose chunk 0 said ``progress`` and was then paused or
    cancelled mid-chunk, through the worker's own code: it is handed back waiting."""
    job_id = world.job([{"act": "ok"}] * 4)

    def process(self: Verdicts, chunk: Chunk) -> Any:
        chunk.checkpoint(progress[0], progress=progress)
        if stop == "pause":
            manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
        else:
            manage.cancel(job_id, "wrong input", storage=world.backend.storage, clock=world.clock)
        world.clock.advance(FRESH_SECONDS + CHECK_SECONDS)  # the worker looks at its jobs
        world.worker.stop_orders.check_due()
        chunk.checkpoint(progress[0] + 1, progress=progress)  # stops here
        return 0

    world.monkeypatch.setattr(Verdicts, "process", process)
    world.send(job_id)
    world.deliver()
    assert world.task(job_id).state == "waiting"  # handed back, its progress saved
    return job_id


@pytest.mark.parametrize("stop", ["pause", "cancel"])
def test_progress_a_chunk_saved_before_it_was_handed_back_still_counts(world: World, stop: str):
    # Given chunk 0 of 4 at 12/20 when its job was paused (or cancelled) mid-chunk
    job_id = _stopped_mid_chunk(world, stop, (12, 20))

    # When status is read
    typed = job_status(world.store, world.job_record(job_id), world.clock.now())

    # Then the job is where the chunk got: 0.6 of one chunk of 4, not 0 %
    assert typed.progress_fraction == pytest.approx(0.6 / 4)
    assert to_json(typed)["progress_fraction"] == pytest.approx(0.15)
    assert "15%  0/4 done" in render_status([typed])
    assert typed.chunks.running == 0


def test_a_chunk_handed_back_without_progress_adds_nothing(store: CheckpointStore):
    # Given a waiting chunk that said no fraction, and a done job's chunk record
    job_id = _waiting_job(store, 2)
    task = store.get_task(job_id, "chunk", 0)
    store.write_task(task, {"state": "waiting", "attempt": 0}, {"progress": "half"})

    typed = job_status(store, store.get_job(job_id), datetime.now(UTC))

    assert typed.progress_fraction == 0.0


def test_a_done_jobs_status_reads_no_waiting_chunks(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
):
    # Given a done job (no chunk of it waits again), status reading its chunks by state
    job_id = _waiting_job(store, 1)
    store.update_job(store.get_job(job_id), state="done")
    asked: list[tuple[str, ...]] = []
    scan = store.scan_chunks

    def noted(job_id: str, states: tuple[str, ...] = (), *args: Any, **kwargs: Any) -> Any:
        asked.append(tuple(states))
        return scan(job_id, states, *args, **kwargs)

    monkeypatch.setattr(store, "scan_chunks", noted)

    job_status(store, store.get_job(job_id), datetime.now(UTC))

    assert ("waiting",) not in asked and ("running",) in asked


def test_a_garbled_shard_counter_is_shown_unreadable_and_counted_as_none(
    store: CheckpointStore,
):
    # Given a job of 2 chunks whose shard counter was edited by hand
    job_id = _waiting_job(store, 2)
    partition = layout.shard_partition(job_id, 0)
    store.storage.records.merge(
        layout.TASKS_TABLE, partition, layout.COUNTS_ROW, {"done": "many"}, etag=ANY_ETAG
    )

    # When its status is read
    status = job_status(store, store.get_job(job_id), datetime.now(UTC))

    # Then the counter is named unreadable and nothing is counted done, the rest shown
    assert [(bad.kind, bad.index) for bad in status.unreadable] == [("counter", 0)]
    assert "is not counts" in status.unreadable[0].problem
    assert (status.chunks.done, status.chunks.total, status.chunks.waiting) == (0, 2, 2)


def test_a_jobs_status_reads_only_the_shards_holding_its_chunks(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
):
    # Given a job of 40 chunks (two shards' first blocks), one chunk of each shard
    # running, and a job still planning (its total not known)
    job_id = _running_job(store, ["a"], waiting=39)
    last = store.get_task(job_id, "chunk", 39)
    store.write_task(last, {"state": "running", "owner": "w:1:ab", "attempt": 1}, {})
    planning, _ = store.create_job(f"st-{uuid.uuid4().hex[:10]}", "tests:Job", "status-q", {})
    read: list[str] = []
    records = store.storage.records

    def noted(name: str) -> Any:
        method = getattr(records, name)

        def call(table: str, partition: str, *args: Any, **kwargs: Any) -> Any:
            read.append(partition)
            return method(table, partition, *args, **kwargs)

        return call

    for name in ("get", "query"):
        monkeypatch.setattr(records, name, noted(name))

    # When each one's status is read
    status = job_status(store, store.get_job(job_id), datetime.now(UTC))
    shards_read = {p for p in read if p.startswith(f"{job_id}~") and p[-2:].isdigit()}
    read.clear()
    job_status(store, store.get_job(planning.job_id), datetime.now(UTC))
    planning_shards = {p for p in read if p[-2:].isdigit()}

    # Then the first reads its two shards only, and finds both running chunks; the one
    # planning reads every shard (its chunks may be anywhere yet)
    assert shards_read == {layout.shard_partition(job_id, 0), layout.shard_partition(job_id, 1)}
    assert [chunk.index for chunk in status.running] == [0, 39]
    assert status.chunks.waiting == 38
    assert len(planning_shards) == layout.SHARDS


# --------------------------------------------------------------------------- last moved


def test_last_progress_is_when_a_chunk_was_last_done_or_checkpointed(world: World):
    # Given a job of 3 chunks, submitted, then chunk 0 done 100 s later
    job_id = world.job([{"act": "ok"}] * 3)
    updated_on = world.job_record(job_id).updated_on
    assert (
        job_status(world.store, world.job_record(job_id), world.clock.now()).last_progress_at
        is None
    )
    world.clock.advance(100)
    done_at = world.clock.now()
    world.end_chunk(job_id, "done", 0)

    # When status is read 200 s later
    world.clock.advance(200)
    typed = job_status(world.store, world.job_record(job_id), world.clock.now())

    # Then it last moved when chunk 0 was done; the job record's own time is kept apart
    assert typed.last_progress_at == done_at and typed.updated_on == updated_on
    assert to_json(typed)["last_progress_at"] == utc(done_at)
    assert "moved 3m20s ago" in render_status([typed], now=world.clock.now())

    # And a running chunk's checkpoint written since is a move too
    world.clock.advance(5)
    checkpointed = world.clock.now()
    task = world.task(job_id, index=1)
    world.store.write_task(
        task, {"state": "running", "attempt": 1, CHECKPOINT_ON: checkpointed}, {"progress": 3}
    )
    typed = job_status(world.store, world.job_record(job_id), world.clock.now())
    assert typed.last_progress_at == checkpointed


# --------------------------------------------------------------------------- rate


def test_the_first_read_has_a_rate_and_an_eta_from_what_the_store_holds(world: World):
    # Given a job of 10 chunks whose planning started at T, 4 chunks done by T+20 s
    job_id = world.job([{"act": "ok"}] * 10)
    world.clock.advance(10)  # submitted 10 s before a worker took its planning
    world.set_task(job_id, "plan", state="done", attempt=1, started_on=world.clock.now())
    world.clock.advance(20)
    for index in range(4):
        world.end_chunk(job_id, "done", index)

    # When status is read for the first time
    typed = job_status(world.store, world.job_record(job_id), world.clock.now())

    # Then it has a rate (4 chunks in 20 s) and an ETA (6 chunks left at that rate)
    assert typed.chunks_per_second == pytest.approx(0.2)
    assert typed.eta_seconds == pytest.approx(30.0)
    assert to_json(typed)["eta_seconds"] == pytest.approx(30.0)
    assert "0.20 chunks/s  ETA 30s" in render_status([typed])


def test_no_rate_while_paused_nor_an_eta_while_planning_or_once_ended(world: World):
    job_id = world.job([{"act": "ok"}] * 10)
    world.clock.advance(20)
    world.end_chunk(job_id, "done", 0)
    job = world.job_record(job_id)
    now = world.clock.now()
    # no plan record: the rate runs from the job's creation
    assert job_status(world.store, job, now).chunks_per_second == pytest.approx(0.05)
    planning = job_status(world.store, replace(job, state="planning", total=None), now)
    assert planning.chunks_per_second is not None and planning.eta_seconds is None
    paused = job_status(world.store, replace(job, paused_on=now), now)
    assert paused.chunks_per_second is None and paused.eta_seconds is None
    ended = job_status(world.store, replace(job, state="failed"), now)
    assert ended.chunks_per_second is None and ended.eta_seconds is None
    assert job.created_on is not None
    just_made = job_status(world.store, job, job.created_on)
    assert just_made.chunks_per_second is None
