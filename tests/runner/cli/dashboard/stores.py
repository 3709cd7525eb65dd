"""Stores for the dashboard's tests: jobs in every state a page shows, written through
the checkpoint store as workers write them, with user data that holds markup.

:func:`populate` writes, on a :class:`FakeClock` advanced between them (so newest first
is a known order): a running job of 300 chunks (some done, one running with progress,
two retrying, one poisoned, one payload and one error holding ``<script>``), a paused
job, a cancelled one, and a worker's heartbeat serving them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from checkpoint import layout
from checkpoint.clock import FakeClock
from checkpoint.records import CHECKPOINT_ON, Progress, error_properties
from checkpoint.storage import ANY_ETAG
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook
from jobs import manage
from runner.worker.observing.heartbeat import Heartbeat, Identity, RunningTasks
from runner.worker.observing.logs import TaskIds

#: What a job's code might put in a payload or an error: shown as text, never run.
SCRIPT = "<script>alert('owned')</script>"
RUNNING_CHUNKS = 300
DONE = (0, 1, 2, 40)
RUNNING = 3
RETRYING = (5, 33)
POISONED = 7
SCRIPT_PAYLOAD = 9


@dataclass(frozen=True)
class Populated:
    """What :func:`populate` wrote."""

    running: str
    paused: str
    cancelled: str
    queue: str
    worker: str


def populate(store: CheckpointStore, clock: FakeClock) -> Populated:
    tag = uuid.uuid4().hex[:8]
    queue = f"dash-{tag}"
    for name in (queue, queue + layout.POISON_SUFFIX):  # a redrive sends to them
        store.storage.queues.create_queue(name)
    ids = Populated(f"dash-run-{tag}", f"dash-paused-{tag}", f"dash-cancel-{tag}", queue, "")
    _running_job(store, clock, ids.running, queue)
    clock.advance(1)
    _job(store, ids.paused, queue, 20)
    manage.pause(ids.paused, storage=store.storage, clock=clock)
    clock.advance(1)
    _job(store, ids.cancelled, queue, 10)
    manage.cancel(ids.cancelled, "wrong input", storage=store.storage, clock=clock)
    worker = f"dash-host:{tag}:ab12"
    running = RunningTasks()
    identity = Identity(worker, (queue,), ("tests:Job",), 2, host="dash-host", pid=4242)
    heartbeat = Heartbeat(WorkerBook(store.storage.records), identity, running, clock)
    with running.running(TaskIds(ids.running, "chunk", RUNNING, 1)):
        heartbeat.beat()
    clock.advance(2)
    return Populated(ids.running, ids.paused, ids.cancelled, queue, worker)


def clean_up(store: CheckpointStore, populated: Populated) -> None:
    """Remove the heartbeat and the queues (Azurite is shared by the session)."""
    store.storage.records.delete(
        layout.WORKERS_TABLE, layout.WORKERS_PARTITION, populated.worker, etag=ANY_ETAG
    )
    for name in (populated.queue, populated.queue + layout.POISON_SUFFIX):
        store.storage.queues.delete_queue(name)


def _job(store: CheckpointStore, job_id: str, queue: str, chunks: int) -> None:
    job, _ = store.create_job(job_id, "tests:Job", queue, {"chunks": chunks})
    store.add_chunks(job_id, 0, [{"i": i} for i in range(chunks)])
    store.update_job(job, state="running", total=chunks)


def _running_job(store: CheckpointStore, clock: FakeClock, job_id: str, queue: str) -> None:
    payloads: list[Any] = [{"i": i} for i in range(RUNNING_CHUNKS)]
    payloads[SCRIPT_PAYLOAD] = {"path": SCRIPT}
    job, _ = store.create_job(job_id, "tests:Job", queue, {"chunks": RUNNING_CHUNKS})
    store.add_chunks(job_id, 0, payloads)
    store.update_job(job, state="running", total=RUNNING_CHUNKS)
    for index in DONE:
        task = store.get_task(job_id, "chunk", index)
        store.count_chunk(task, {"state": "done", "attempt": 1}, {"result": index}, "done")
    task = store.get_task(job_id, "chunk", RUNNING)
    store.write_task(
        task,
        {
            "state": "running",
            "owner": "dash-host:1:ab12",
            "attempt": 1,
            "lease_until": clock.now() + timedelta(seconds=30),
            CHECKPOINT_ON: clock.now(),
            **Progress(0.4, 40, 100).properties(),
        },
        {"progress": {"row": 40}},
    )
    for index in RETRYING:
        task = store.get_task(job_id, "chunk", index)
        failure = error_properties(ValueError(f"row {index} {SCRIPT}"), f"Traceback\n{SCRIPT}")
        retry = {"retry_at": clock.now() + timedelta(seconds=40), "max_attempts": 5}
        store.write_task(task, {"state": "retrying", "attempt": 1, **failure, **retry})
    task = store.get_task(job_id, "chunk", POISONED)
    failure = error_properties(RuntimeError(f"always fails {SCRIPT}"), f"Traceback\n{SCRIPT}")
    store.count_chunk(task, {"state": "poisoned", "attempt": 3, **failure}, {}, "poisoned")
