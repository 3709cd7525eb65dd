"""A job type of several queues (``ChunkedJob.queues``): its chunks spread over
``<queue>-0`` ... in blocks, each with its poison queue, every worker polling them all.

On both backends, with in-process worker loops on the real clock (the embedded store
opened afresh on it: a whole job runs here, not one task at a time as in ``world``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint import layout, messages, parks
from checkpoint.backends import open_storage
from checkpoint.clock import SystemClock
from checkpoint.storage import ANY_ETAG, NEVER_EXPIRES, Storage
from checkpoint.store import CheckpointStore
from jobs import manage
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.job_run import SimulatedCrash
from jobs.submit import submit
from runner.cli.redrive import redrive
from runner.cli.status import job_status
from runner.worker.loop import WorkerLoop, WorkerSettings, assemble
from runner.worker.tasks.life import handle
from tests.backends import Backend

#: Chunk indexes whose attempts fail (set by a test, emptied after it).
FAILING: set[int] = set()
#: How long a test waits at most for what real worker threads do.
WAIT_SECONDS = 60


class Spread(ChunkedJob):
    """Returns its chunk's index; the indexes in :data:`FAILING` fail instead."""

    queue = "spread"
    queues = 4
    lease_seconds = 30
    max_attempts = 1

    def split(self, params: dict[str, Any]) -> Any:
        return ({"n": n} for n in range(params["chunks"]))

    def process(self, chunk: Chunk) -> Any:
        if chunk.index in FAILING:
            raise ValueError(f"chunk {chunk.index} fails")
        return chunk.index


@pytest.fixture
def storage(backend: Backend, tmp_path: Path) -> Iterator[Storage]:
    """The backend's storage on the real clock."""
    FAILING.clear()
    if backend.clock is None:
        yield backend.storage
    else:
        opened = open_storage(str(tmp_path / "real-clock"))
        yield opened
        opened.close()
    FAILING.clear()


def _job_class(backend: Backend, queues: int = 4) -> type[Spread]:
    """:class:`Spread` on queues of its own (Azurite's outlive the test: they are
    deleted after it)."""
    name = f"spread-{uuid.uuid4().hex[:10]}"
    cls = type("Spread", (Spread,), {"queue": name, "queues": queues, "__module__": __name__})
    for count in {1, 4, queues}:
        for queue in layout.job_queues(name, count):
            backend.made += [("queue", queue), ("queue", layout.poison_queue_of(queue))]
    backend.made.append(("queue", layout.resume_queue_of(name)))
    return cls


def _burst(storage: Storage, cls: type[ChunkedJob], workers: int = 1) -> None:
    """Run ``workers`` burst worker loops in this process until no work is left."""
    settings = WorkerSettings(concurrency=2, burst=True, poll_max_seconds=0.1)
    loops = [WorkerLoop(storage, [cls], settings) for _ in range(workers)]
    threads = [threading.Thread(target=loop.run, daemon=True) for loop in loops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECONDS)
    alive = any(thread.is_alive() for thread in threads)
    for loop in loops:
        loop.request_stop()  # a failing test leaves no worker running on
    assert not alive


def _plan(storage: Storage, cls: type[ChunkedJob], chunks: int) -> str:
    """Submit a job and run its planning only, as a worker would: its chunk messages
    then wait in its queues."""
    job_id = submit(cls, {"chunks": chunks}, storage=storage)
    clock = SystemClock()
    worker = assemble(storage, [cls], clock, "planner")
    first = cls.chunk_queues()[0]
    received_at = clock.monotonic()
    lease_seconds = worker.keeper.sizing.seconds(cls)
    (message,) = storage.queues.receive(first, visibility_seconds=lease_seconds)
    handle(worker, first, message, received_at)
    assert CheckpointStore(storage).get_job(job_id).total == chunks
    return job_id


def _wait(condition: Any) -> None:
    done = threading.Event()
    for _ in range(WAIT_SECONDS * 20):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError("waited in vain")


def _indexes(storage: Storage, queue: str) -> list[int]:
    """The chunk indexes of the first 32 visible messages of ``queue``."""
    found = storage.queues.peek(queue, max_messages=32)
    return sorted(messages.decode(message.body).index for message in found)


def test_a_job_of_four_queues_spreads_its_chunks_in_blocks_and_completes(
    backend: Backend, storage: Storage
):
    # Given a job of 130 chunks on four queues, planned
    cls = _job_class(backend)
    job_id = _plan(storage, cls, 130)
    store = CheckpointStore(storage)
    assert store.get_job(job_id).queues == cls.chunk_queues()

    # Then its chunks wait in blocks of 32 consecutive chunks dealt over its queues
    lengths = [storage.queues.approximate_length(queue) for queue in cls.chunk_queues()]
    assert lengths == [34, 32, 32, 32]
    assert _indexes(storage, f"{cls.queue}-1") == list(range(32, 64))
    assert _indexes(storage, f"{cls.queue}-3") == list(range(96, 128))
    # (and a queue without a number is not made at all; the type's one resume queue is)
    assert storage.queues.list_queues(cls.queue) == sorted(
        (*cls.chunk_queues(), *cls.poison_queues(), cls.resume_queue())
    )

    # When workers run
    _burst(storage, cls)

    # Then every chunk ran and the job completed, its queues empty
    assert store.get_job(job_id).state == "done"
    assert store.counts(job_id)["done"] == 130
    assert all(storage.queues.approximate_length(q) == 0 for q in cls.chunk_queues())


@pytest.mark.parametrize("workers", [1, 3])
def test_workers_in_this_process_run_a_job_of_four_queues_to_the_end(
    backend: Backend, storage: Storage, workers: int, monkeypatch: pytest.MonkeyPatch
):
    # Given a job of four queues, two chunks per block (a small job reaches them all)
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend)
    job_id = submit(cls, {"chunks": 24}, storage=storage)

    # When burst workers serve its type
    _burst(storage, cls, workers)

    # Then it completed, every chunk once
    store = CheckpointStore(storage)
    assert store.get_job(job_id).state == "done"
    assert store.counts(job_id)["done"] == 24


def test_a_chunk_poisoned_from_its_queue_lands_in_that_queues_poison_queue_and_is_redriven(
    backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    # Given a job of four queues whose chunk 5 fails (blocks of 2: it is on <queue>-2)
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend)
    FAILING.add(5)
    job_id = submit(cls, {"chunks": 8}, storage=storage)

    # When workers run it
    _burst(storage, cls)

    # Then the message is in <queue>-2-poison only, and the chunk is listed as poisoned
    poison = [storage.queues.approximate_length(q) for q in cls.poison_queues()]
    assert poison == [0, 0, 1, 0]
    store = CheckpointStore(storage)
    status = job_status(store, store.get_job(job_id), store.clock.now())
    assert [task.index for task in status.poisoned] == [5]
    assert status.queues == cls.chunk_queues()

    # When it is redriven once the cause is gone
    FAILING.clear()
    assert redrive(store, storage.queues, job_id).count == 1

    # Then its message went back to <queue>-2, and the job completes
    assert storage.queues.approximate_length(f"{cls.queue}-2-poison") == 0
    assert _indexes(storage, f"{cls.queue}-2") == [5]
    _burst(storage, cls)
    assert store.get_job(job_id).state == "done"


def test_a_redriven_chunk_whose_poison_message_is_gone_gets_one_on_its_own_queue(
    backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    # Given a job of four queues whose chunk 7 (on <queue>-3) was poisoned, its poison
    # message purged by hand
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend)
    FAILING.add(7)
    job_id = submit(cls, {"chunks": 8}, storage=storage)
    _burst(storage, cls)
    (purged,) = storage.queues.receive(f"{cls.queue}-3-poison")
    storage.queues.delete(f"{cls.queue}-3-poison", purged.id, purged.pop_receipt or "")

    # When it is redriven
    FAILING.clear()
    store = CheckpointStore(storage)
    redrive(store, storage.queues, job_id)

    # Then a fresh message for it waits on <queue>-3, and it runs there
    assert _indexes(storage, f"{cls.queue}-3") == [7]
    _burst(storage, cls)
    assert store.get_job(job_id).state == "done"


def test_deleting_a_job_of_four_queues_sweeps_every_queue_and_poison_queue(
    backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    # Given a planned job of four queues, cancelled with its chunks still queued, and a
    # message of it in the poison queue of <queue>-3
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend)
    job_id = _plan(storage, cls, 8)
    store = CheckpointStore(storage)
    job = store.get_job(job_id)
    body = messages.encode(
        messages.TaskMessage("chunk", job.job_type, job_id, 6, incarnation=job.incarnation)
    )
    poisoned = messages.poisoned(body, f"{cls.queue}-3", "test", "2026-11-27T00:00:00")
    storage.queues.send(f"{cls.queue}-3-poison", poisoned, ttl_seconds=NEVER_EXPIRES)
    # and one left in the type's resume queue (a copy of a chunk that was running)
    storage.queues.send(cls.resume_queue(), body, ttl_seconds=NEVER_EXPIRES)
    manage.cancel(job_id, "not wanted", storage=storage)

    # When it is deleted
    deleted = store.delete_job(job_id)

    # Then none of its messages is left anywhere
    every = [*cls.chunk_queues(), *cls.poison_queues(), cls.resume_queue()]
    assert [storage.queues.approximate_length(queue) for queue in every] == [0] * 9
    assert deleted.messages == 10


def test_a_paused_job_of_four_queues_parks_on_its_queues_and_runs_after_resume(
    backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    # Given a planned job of four queues, paused
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend)
    job_id = _plan(storage, cls, 8)
    manage.pause(job_id, storage=storage)

    # When a worker serves it while it is paused
    loop = WorkerLoop(storage, [cls], WorkerSettings(burst=True, poll_max_seconds=0.05))
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    records = storage.records
    partition = layout.park_partition(job_id)

    def notes() -> list[Any]:
        return list(records.query(layout.TASKS_TABLE, partition))

    _wait(lambda: len(notes()) == 8)

    # Then each chunk's message was parked on its own queue, the note naming it
    assert {note.row_key: note.properties["queue"] for note in notes()} == {
        parks.park_row("chunk", index): cls.chunk_queue(index) for index in range(8)
    }

    # When it is resumed, Then the parked copies come back and the job completes
    manage.resume(job_id, storage=storage)
    thread.join(WAIT_SECONDS)
    alive = thread.is_alive()
    loop.request_stop()  # a failing test leaves no worker running on
    assert not alive
    assert CheckpointStore(storage).get_job(job_id).state == "done"


@pytest.mark.parametrize(("submitted", "served"), [(1, 4), (4, 1)])
def test_a_job_keeps_the_queues_it_was_submitted_to_when_its_class_changes(
    backend: Backend, storage: Storage, submitted: int, served: int, monkeypatch: pytest.MonkeyPatch
):
    # Given a job submitted when its class had one queue count
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend, submitted)
    job_id = submit(cls, {"chunks": 8}, storage=storage)

    # When workers of the class changed to the other count serve it
    monkeypatch.setattr(cls, "queues", served)
    _burst(storage, cls)

    # Then its messages went where it was submitted, and it completed
    job = CheckpointStore(storage).get_job(job_id)
    assert job.queues == layout.job_queues(cls.queue, submitted)
    assert job.state == "done"


def test_a_burst_worker_serves_the_queues_of_a_job_submitted_with_another_count_meanwhile(
    backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    # Given a burst worker of a class of one queue, serving a paused job of it
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend, 1)
    first = submit(cls, {"chunks": 2}, storage=storage)
    manage.pause(first, storage=storage)
    loop = WorkerLoop(storage, [cls], WorkerSettings(burst=True, poll_max_seconds=0.05))
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    parked = layout.park_partition(first)
    _wait(lambda: list(storage.records.query(layout.TASKS_TABLE, parked)))

    # When a job of it is submitted on four queues (older or newer code), and the first
    # job resumed
    with monkeypatch.context() as changed:
        changed.setattr(cls, "queues", 4)
        second = submit(cls, {"chunks": 8}, storage=storage)
    manage.resume(first, storage=storage)

    # Then the worker found the job's queues at its check for remaining work, served
    # them, and left once both jobs were done
    thread.join(WAIT_SECONDS)
    alive = thread.is_alive()
    loop.request_stop()  # a failing test leaves no worker running on
    assert not alive
    store = CheckpointStore(storage)
    assert [store.get_job(job).state for job in (first, second)] == ["done", "done"]
    assert set(loop.heartbeat.record().queues) == {cls.queue, *layout.job_queues(cls.queue, 4)}


class _Mortal:
    """One of a worker's stores: once its life ends, every call raises
    :class:`SimulatedCrash`, as nothing a killed process does reaches the store."""

    def __init__(self, inner: Any, dead: threading.Event):
        self._inner = inner
        self._dead = dead

    def __getattr__(self, method: str) -> Any:
        target = getattr(self._inner, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._dead.is_set():
                raise SimulatedCrash("the worker is dead")
            return target(*args, **kwargs)

        return call


def test_a_dead_workers_chunk_of_four_queues_resumes_first_and_is_poisoned_on_its_queue(
    backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    # Given a planned job of four queues (blocks of 2: chunks 4 and 5 on <queue>-2) whose
    # chunks have two attempts under a lease of 2 s
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend)
    cls.lease_seconds, cls.max_attempts = 2, 2
    job_id = _plan(storage, cls, 8)
    dead = threading.Event()

    def die(self: Any, chunk: Chunk) -> Any:
        dead.set()
        raise SimulatedCrash(f"killed in chunk {chunk.index}")

    # When a worker dies in the chunk it received first from <queue>-2, its message
    # having moved to the type's one resume queue
    mortal = Storage(
        _Mortal(storage.queues, dead),
        _Mortal(storage.records, dead),
        _Mortal(storage.blobs, dead),
        storage.description,
    )
    dying = assemble(mortal, [cls], SystemClock(), "dying")
    received_at = dying.clock.monotonic()
    (message,) = storage.queues.receive(f"{cls.queue}-2", visibility_seconds=cls.lease_seconds)
    # Azure sends a planning page's messages concurrently: either of <queue>-2's comes first
    index = messages.decode(message.body).index
    assert index in (4, 5)
    with monkeypatch.context() as killing:
        killing.setattr(cls, "process", die)
        with pytest.raises(SimulatedCrash):
            handle(dying, f"{cls.queue}-2", message, received_at)
    assert storage.queues.approximate_length(cls.resume_queue()) == 1
    # and its lease runs out, the other seven chunks waiting in their queues all along
    _wait(lambda: storage.queues.peek(cls.resume_queue()))
    assert sum(storage.queues.approximate_length(q) for q in cls.chunk_queues()) == 7

    # Then the next message a worker receives is that chunk's, from the resume queue
    loop = WorkerLoop(storage, [cls], WorkerSettings(concurrency=1, prefetch=0))
    loop._prepare()
    assert loop._receive(1) == 1
    queue, resumed, received_at, lease = loop._work.get_nowait()  # type: ignore[misc]
    assert (queue, messages.decode(resumed.body).index) == (cls.resume_queue(), index)

    # When its second and last attempt fails
    FAILING.add(index)
    handle(loop.context, queue, resumed, received_at, lease)

    # Then it is poisoned into the poison queue of its own queue, <queue>-2, as from there
    store = CheckpointStore(storage)
    task = store.get_task(job_id, "chunk", index)
    assert (task.state, task.attempt) == ("poisoned", 2)
    poison = [storage.queues.approximate_length(q) for q in cls.poison_queues()]
    assert poison == [0, 0, 1, 0]
    (found,) = storage.queues.peek(f"{cls.queue}-2-poison")
    record = messages.read_poisoned(found.body)
    assert record is not None and record["queue"] == f"{cls.queue}-2"
    assert f"{cls.queue}-poison" not in storage.queues.list_queues(cls.queue)
    assert storage.queues.approximate_length(cls.resume_queue()) == 0

    # and a redrive sends it back to <queue>-2, where the job then completes
    FAILING.clear()
    assert redrive(store, storage.queues, job_id).count == 1
    assert _indexes(storage, f"{cls.queue}-2") == [4, 5]
    _burst(storage, cls)
    assert store.get_job(job_id).state == "done"


def _moved_to_resume_queue(storage: Storage, cls: type[ChunkedJob], queue: str) -> int:
    """Move the first message of ``queue`` to the type's resume queue, as a worker
    starting its chunk does; returns the chunk's index."""
    (message,) = storage.queues.receive(queue)
    storage.queues.send(cls.resume_queue(), message.body, ttl_seconds=NEVER_EXPIRES)
    storage.queues.delete(queue, message.id, message.pop_receipt or "")
    return messages.decode(message.body).index


def _garble_job(storage: Storage, job_id: str, state: Any) -> None:
    storage.records.merge(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, {"state": state}, etag=ANY_ETAG
    )


def test_a_resume_message_poisoned_before_its_job_could_be_read_is_redriven(
    backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    # Given a planned job of four queues (blocks of 2: chunks 4 and 5 on <queue>-2), one
    # of whose messages waits in the type's resume queue, and whose record another
    # version garbled
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend)
    job_id = _plan(storage, cls, 8)
    assert _moved_to_resume_queue(storage, cls, f"{cls.queue}-2") in (4, 5)  # either first
    _garble_job(storage, job_id, 42)

    # When a worker receives that message: its chunk's queue cannot be known, so it is
    # poisoned into the poison queue of the resume queue's job queue, <queue>-poison
    worker = assemble(storage, [cls], SystemClock(), "reader")
    (message,) = storage.queues.receive(cls.resume_queue(), visibility_seconds=30)
    handle(worker, cls.resume_queue(), message, worker.clock.monotonic())
    assert storage.queues.approximate_length(f"{cls.queue}-poison") == 1

    # When the record is mended and the job redriven
    _garble_job(storage, job_id, "running")
    store = CheckpointStore(storage)
    assert redrive(store, storage.queues, job_id).count == 1

    # Then the message went home to <queue>-2, and the job completes
    assert storage.queues.approximate_length(f"{cls.queue}-poison") == 0
    assert _indexes(storage, f"{cls.queue}-2") == [4, 5]
    _burst(storage, cls)
    assert store.get_job(job_id).state == "done"


def test_deleting_a_job_of_four_queues_sweeps_its_messages_poisoned_from_the_resume_queue(
    backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch
):
    # Given a job of four queues with a message poisoned from the resume queue while its
    # record could not be read, then cancelled
    monkeypatch.setattr(layout, "QUEUE_BLOCK", 2)
    cls = _job_class(backend)
    job_id = _plan(storage, cls, 8)
    _moved_to_resume_queue(storage, cls, f"{cls.queue}-3")
    _garble_job(storage, job_id, 42)
    worker = assemble(storage, [cls], SystemClock(), "reader")
    (message,) = storage.queues.receive(cls.resume_queue(), visibility_seconds=30)
    handle(worker, cls.resume_queue(), message, worker.clock.monotonic())
    _garble_job(storage, job_id, "running")
    manage.cancel(job_id, "not wanted", storage=storage)

    # When it is deleted, then that message is gone too
    CheckpointStore(storage).delete_job(job_id)
    assert storage.queues.approximate_length(f"{cls.queue}-poison") == 0
