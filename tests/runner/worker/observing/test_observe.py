"""What a running chunk shows the outside (runner/worker/observing/observe.py): its start, resume,
finish, failure and lost lease as log lines carrying its ids, the ids on the job's own log lines,
and its ``progress=`` stored with its checkpoints and shown by ``runner status``.

In this process, on both backends, with a worker assembled as the loop does and a
FakeClock (as tests/runner/worker/tasks/test_task_lifecycle.py does): a message is sent,
received and handed to ``runner.worker.tasks.life.handle``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from checkpoint import messages
from checkpoint.clock import FakeClock, utc_text
from checkpoint.records import CHECKPOINT_ON, Progress
from checkpoint.storage import NEVER_EXPIRES
from checkpoint.store import CheckpointStore
from jobs.backoff import Backoff
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from runner.cli.json_form import to_json, utc
from runner.cli.render import render_status
from runner.cli.status import job_status
from runner.cli.status_types import JobStatus
from runner.worker.loop import assemble
from runner.worker.observing.logs import ContextFilter
from runner.worker.tasks.delivery import Context
from runner.worker.tasks.life import handle
from tests.backends import Backend

WORKER = "worker-a"
STEPS = 10
#: What happens after a given checkpoint of a job's chunk, by job id (set by a test).
AFTER_STEP: dict[str, Callable[[int], None]] = {}
#: The job's own logger, as a user's module would have it.
user_log = logging.getLogger("tests.user_job")


class Counting(ChunkedJob):
    """Counts to 10 from its state, checkpointing each step with its progress; a payload
    ``{"fail_at": n}`` raises after step n."""

    queue = "observe-counting"  # a fresh queue per test instead (World)
    lease_seconds = 30
    max_attempts = 3
    checkpoint_interval_seconds = 0.0  # every checkpoint is written at once
    backoff = Backoff(first_seconds=10, max_seconds=10, jitter=0)

    def process(self, chunk: Chunk) -> Any:
        user_log.info("counting from %s", chunk.state)
        for step in range((chunk.state or 0) + 1, STEPS + 1):
            chunk.checkpoint(step, progress=(step, STEPS))
            AFTER_STEP.get(chunk.job_id, lambda step: None)(step)
            if step == chunk.payload.get("fail_at"):
                raise ValueError(f"bad row {step}")
        return STEPS


class World:
    """A worker serving Counting from a fresh queue, a store, and captured log lines."""

    def __init__(self, backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog):
        self.backend = backend
        self.clock = backend.clock or FakeClock()
        self.queue = backend.queue()
        monkeypatch.setattr(Counting, "queue", self.queue)
        backend.storage.queues.create_queue(Counting.poison_queue())
        backend.made.append(("queue", Counting.poison_queue()))
        self.worker: Context = assemble(backend.storage, [Counting], self.clock, WORKER)
        self.store = CheckpointStore(backend.storage, self.clock)
        self.monkeypatch = monkeypatch
        # Ours and the job's lines; not the Azure SDK's (one per request at INFO).
        caplog.set_level(logging.WARNING)
        caplog.set_level(logging.INFO, logger="runner")
        caplog.set_level(logging.INFO, logger=user_log.name)
        caplog.handler.addFilter(ContextFilter())  # as the worker's own handler has
        self.caplog = caplog

    def job(self, payloads: list[dict[str, Any]]) -> str:
        job_id = f"obs-{uuid.uuid4().hex[:10]}"
        job, _ = self.store.create_job(job_id, Counting.job_type(), self.queue, {})
        self.store.add_chunks(job_id, 0, payloads)
        self.store.update_job(job, state="running", total=len(payloads))
        return job_id

    def run_chunk(self, job_id: str, index: int = 0) -> None:
        body = messages.encode(messages.TaskMessage("chunk", Counting.job_type(), job_id, index))
        self.backend.storage.queues.send(self.queue, body, ttl_seconds=NEVER_EXPIRES)
        (message,) = self.backend.storage.queues.receive(
            self.queue, visibility_seconds=Counting.lease_seconds
        )
        handle(self.worker, self.queue, message, self.clock.monotonic())

    def after_step(self, job_id: str, action: Callable[[int], None]) -> None:
        self.monkeypatch.setitem(AFTER_STEP, job_id, action)

    def lines(self, job_id: str) -> list[logging.LogRecord]:
        return [r for r in self.caplog.records if getattr(r, "job_id", None) == job_id]


@pytest.fixture
def world(backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog) -> World:
    return World(backend, monkeypatch, caplog)


def _ids(record: logging.LogRecord) -> tuple[Any, ...]:
    return (record.job_id, record.task, record.chunk, record.attempt, record.worker_id)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- log lines


def test_a_chunk_logs_its_start_and_finish_and_the_jobs_own_lines_carry_its_ids(world: World):
    job_id = world.job([{}])

    world.run_chunk(job_id)

    lines = world.lines(job_id)
    said = [(r.name, r.levelname, r.getMessage()) for r in lines]
    assert said[0] == ("runner.worker.tasks", "INFO", f"chunk 0 of {job_id} started (attempt 1)")
    assert said[1] == ("tests.user_job", "INFO", "counting from None")
    assert said[-1][:2] == ("runner.worker.tasks", "INFO")
    assert said[-1][2].startswith(f"chunk 0 of {job_id} finished in ")
    assert said[-1][2].endswith(" s (attempt 1)")
    # Every line logged while it ran, the job's own included, carries its ids
    assert {_ids(r) for r in lines} == {(job_id, "chunk", 0, 1, WORKER)}


def test_a_chunk_resumed_says_from_which_checkpoint(world: World):
    # Given chunk 0 as a failed first attempt left it: state 4, said 4 of 10, retrying
    job_id = world.job([{}])
    written_on = world.clock.now() - timedelta(minutes=3)
    task = world.store.get_task(job_id, "chunk", 0)
    changes = {"state": "retrying", "attempt": 1, CHECKPOINT_ON: written_on}
    world.store.write_task(task, {**changes, **Progress(0.4, 4, 10).properties()}, {"progress": 4})

    world.run_chunk(job_id)

    first = world.lines(job_id)[0]
    assert first.getMessage() == (
        f"chunk 0 of {job_id} resumed (attempt 2) from its checkpoint of "
        f"{utc_text(written_on)}, 40% (4/10)"
    )
    assert _ids(first) == (job_id, "chunk", 0, 2, WORKER)
    assert world.lines(job_id)[1].getMessage() == "counting from 4"


def test_a_failure_is_logged_with_the_chunks_ids(world: World):
    job_id = world.job([{"fail_at": 3}])

    world.run_chunk(job_id)

    (failed,) = [r for r in world.lines(job_id) if r.levelname == "WARNING"]
    assert failed.getMessage() == f"chunk 0 of {job_id} failed (attempt 1): ValueError('bad row 3')"
    assert _ids(failed) == (job_id, "chunk", 0, 1, WORKER)
    # and the failure kept the state and progress of its last checkpoint
    stored = world.store.get_task(job_id, "chunk", 0)
    assert stored.state == "retrying"
    assert Progress.from_properties(stored.properties, "x") == Progress(0.3, 3, 10)


def test_a_lost_lease_is_logged_with_the_chunks_ids(world: World):
    job_id = world.job([{}])

    def taken_over(step: int) -> None:
        if step == 2:  # another worker claims the chunk: the next checkpoint is fenced
            task = world.store.get_task(job_id, "chunk", 0)
            world.store.write_task(task, {"owner": "worker-b", "attempt": 2})

    world.after_step(job_id, taken_over)
    world.run_chunk(job_id)

    lost = [r for r in world.lines(job_id) if "lease lost" in r.getMessage()]
    assert [r.levelname for r in lost] == ["WARNING"]
    assert lost[0].getMessage().startswith(f"chunk 0 of {job_id} stopped: lease lost (")
    assert _ids(lost[0]) == (job_id, "chunk", 0, 1, WORKER)


def test_a_running_chunk_is_among_the_workers_running_tasks(world: World):
    job_id = world.job([{}])
    seen: list[tuple[str, ...]] = []
    world.after_step(job_id, lambda step: seen.append(world.worker.running.now()))

    world.run_chunk(job_id)

    assert set(seen) == {(f"{job_id}#0",)}
    assert world.worker.running.now() == ()


# --------------------------------------------------------------------------- progress=


def test_progress_is_stored_with_each_checkpoint_and_shown_by_status(world: World):
    # Given a job of two chunks, the first running and checkpointing its progress
    job_id = world.job([{}, {}])
    shown: dict[int, JobStatus] = {}

    def look(step: int) -> None:
        if step == 4:
            world.clock.advance(2)
            shown[step] = job_status(world.store, world.store.get_job(job_id), world.clock.now())

    world.after_step(job_id, look)
    world.run_chunk(job_id)

    # Then status showed the chunk's progress, and the job's: 4/10 of one of two chunks
    report = to_json(shown[4])
    (running,) = report["running"]
    assert (running["progress_fraction"], running["progress_done"], running["progress_total"]) == (
        0.4,
        4,
        10,
    )
    assert running["progress"] == 4 and running["worker"] == WORKER
    assert running["checkpoint_on"] == utc(world.clock.now() - timedelta(seconds=2))
    assert running["started_on"] is not None
    assert report["progress_fraction"] == pytest.approx(0.2)
    text = render_status([shown[4]])
    assert "progress 4, 40% done (4/10)" in text
    assert "[###" in text and " 20%" in text
    # And once done the chunk counts whole; the record keeps what it said last
    after = to_json(job_status(world.store, world.store.get_job(job_id), world.clock.now()))
    assert after["progress_fraction"] == pytest.approx(0.5) and after["running"] == []
    stored = world.store.get_task(job_id, "chunk", 0)
    assert Progress.from_properties(stored.properties, "x") == Progress(1.0, 10, 10)
