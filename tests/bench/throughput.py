"""Trivial-chunk throughput of the worker loop, and its storage calls per chunk.

One run submits a :class:`~tests.bench.chunk_jobs.Trivial` job of ``n`` chunks and runs
worker loops in burst mode on counting storage (:mod:`tests.bench.counting`). The clock
starts at a worker's first receive and stops when the job record is set ``done``, so
the fixed start-up cost (interpreter, imports, opening storage, creating tables and
queues) is left out. Two kinds of run:

- *end to end*: the worker plans the job (``split``, chunk records, one message per
  chunk) and processes it;
- *planned first*: a loop of one slot and no prefetch plans the job and is stopped as it
  asks for more work; a fresh loop then processes the planned chunks alone.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import time
from dataclasses import dataclass, field, replace
from typing import Any

from checkpoint.backends import open_storage
from checkpoint.storage import Storage
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.loop import WorkerLoop, WorkerSettings
from tests.bench.chunk_jobs import Trivial
from tests.bench.counting import Flag, Tally, counted

#: Bound on a child worker process's run (a hung child fails the benchmark).
CHILD_TIMEOUT_SECONDS = 600.0


@dataclass
class Measured:
    """One timed window: its length, the chunks it covered and the calls made in it."""

    seconds: float
    chunks: int
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.chunks / self.seconds

    def per_chunk(self) -> dict[str, float]:
        return {operation: count / self.chunks for operation, count in self.calls.items()}


class PlanOnlyQueues:
    """Queues that stop ``loop`` at the receive after the plan message.

    With one slot and no prefetch the loop asks for more work only once planning has
    ended, so that receive is the boundary: it is not made, the loop is asked to stop.
    """

    def __init__(self, queues: Any):
        self._queues = queues
        self.loop: WorkerLoop | None = None
        self.stopped_at: float | None = None
        self._planning = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queues, name)

    def receive(self, queue: str, **options: Any) -> list[Any]:
        if self._planning:
            assert self.loop is not None
            self.stopped_at = time.monotonic()
            self.loop.request_stop()
            return []
        got = self._queues.receive(queue, **options)
        self._planning = bool(got)
        return got


def plan_only_loop(storage: Storage, job: type[ChunkedJob]) -> tuple[WorkerLoop, PlanOnlyQueues]:
    """A worker loop of one slot and no prefetch on ``storage`` that plans the submitted
    job of type ``job`` and stops; its queues say when (``stopped_at``)."""
    queues = PlanOnlyQueues(storage.queues)
    loop = WorkerLoop(
        replace(storage, queues=queues, closer=None),
        [job],
        WorkerSettings(concurrency=1, prefetch=0),
    )
    queues.loop = loop
    return loop, queues


def submit_trivial(storage: Storage, chunks: int, job: type[ChunkedJob] = Trivial) -> str:
    return submit(job, {"chunks": chunks}, storage=storage)


def plan_only(storage: Storage, chunks: int, job: type[ChunkedJob] = Trivial) -> Measured:
    """Run planning of the one submitted job alone; the loop stops when it is done."""
    tally = Tally()
    loop, queues = plan_only_loop(counted(storage, tally), job)
    loop.run()
    if tally.started_at is None or queues.stopped_at is None:
        raise RuntimeError("planning did not run to its end")
    return Measured(queues.stopped_at - tally.started_at, chunks, dict(tally.calls))


def run_in_process(
    storage: Storage, chunks: int, settings: WorkerSettings, job: type[ChunkedJob] = Trivial
) -> Measured:
    """One worker loop in this process, from its first receive to the job being done."""
    tally = Tally()
    WorkerLoop(counted(storage, tally), [job], settings).run()
    return Measured(tally.seconds, chunks, dict(tally.calls))


def _child(
    location: str,
    settings: WorkerSettings,
    done: Flag,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    with open_storage(location) as storage:
        tally = Tally(done)
        loop = WorkerLoop(counted(storage, tally), [Trivial], settings)
        ready.put(True)
        go.wait()
        loop.run()
        results.put((tally.started_at, tally.done_at, dict(tally.calls)))


def _collect(source: Any, children: list[Any]) -> list[Any]:
    """One item from ``source`` per child; fails early if a child died."""
    items: list[Any] = []
    deadline = time.monotonic() + CHILD_TIMEOUT_SECONDS
    while len(items) < len(children):
        try:
            items.append(source.get(timeout=0.5))
        except queue_module.Empty:
            if any(child.exitcode not in (None, 0) for child in children):
                raise RuntimeError("a worker process failed") from None
            if time.monotonic() > deadline:
                raise RuntimeError("a worker process did not report in time") from None
    return items


def run_processes(
    location: str, chunks: int, settings: WorkerSettings, processes: int, planned: bool
) -> tuple[Measured, Measured | None]:
    """``processes`` worker processes (spawned, started before the clock) on one job.

    Returns the processing window and, if ``planned``, the planning window before it.
    """
    context = multiprocessing.get_context("spawn")
    done, go = context.Event(), context.Event()
    ready, results = context.Queue(), context.Queue()
    children = [
        context.Process(target=_child, args=(location, settings, done, ready, go, results))
        for _ in range(processes)
    ]
    # Opened (so created) before the children start: two processes creating one fresh
    # embedded store at once can fail with "database is locked" (PRAGMA journal_mode).
    storage = open_storage(location)
    for child in children:
        child.start()
    try:
        _collect(ready, children)
        submit_trivial(storage, chunks)
        planning = plan_only(storage, chunks) if planned else None
        go.set()
        reports = _collect(results, children)
    finally:
        storage.close()
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join()
    starts = [started for started, _, _ in reports if started is not None]
    ends = [ended for _, ended, _ in reports if ended is not None]
    calls: dict[str, int] = {}
    for _, _, counts in reports:
        for operation, count in counts.items():
            calls[operation] = calls.get(operation, 0) + count
    return Measured(max(ends) - min(starts), chunks, calls), planning
