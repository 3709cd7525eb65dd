"""Test your own job in your test's process: one chunk, or the whole job end to end.

- :class:`ChunkEnvironment` runs your ``process`` on one chunk as a worker would, with
  no store, no queue and no worker: checkpoints, a lost lease, a stop, the next attempt.
  Fast, and the place to test every branch of ``process``, ``split`` and ``finalize``.
- :func:`run_job` runs a whole job — planning, every chunk, finalize — through the
  runner's own code on a temporary embedded store and a fake clock, one message at a
  time (after dramatiq's ``StubBroker`` + ``worker.join()`` and huey's immediate mode).
  Workers can be killed at chosen points (:class:`CrashAt`) and the job goes on as it
  would in production: a fresh worker takes the chunk over once its lease ran out and
  resumes it from its last durable checkpoint. The :class:`JobRun` it returns says how
  every task ended and every call of your code.

Example, with the ``MigrateOrders`` job of docs/writing-jobs.md::

    from jobs.testing import CrashAt, run_job

    def test_migrate_orders_survives_a_crash():
        run = run_job(MigrateOrders, {"rows": 25, "rows_per_chunk": 10},
                      crash=CrashAt(chunk=1, checkpoint=4))
        run.assert_done()
        assert run.results == [{"rows": 10}, {"rows": 10}, {"rows": 5}]
        crashed, resumed = run.chunks[1].calls
        assert crashed.outcome == "crashed" and crashed.checkpoints[-1] == 14
        assert resumed.started_from == 14        # durable at the crash, so not redone
"""

from __future__ import annotations

import contextlib
import math
import random
import tempfile
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.codec import round_trip
from checkpoint.errors import NotFound
from checkpoint.location import StorageLocation
from checkpoint.records import Progress, TaskKind, TaskRecord
from checkpoint.storage import BlobStore, QueueStore, RecordStore, Storage
from checkpoint.store import CheckpointStore
from jobs.chunk import Chunk, ChunkControl, Takeover
from jobs.chunk_environment import ChunkEnvironment
from jobs.job import ChunkedJob, resource_rate
from jobs.job_run import (
    Call,
    CrashAt,
    JobDidNotFinish,
    JobRun,
    SimulatedCrash,
    SummarySeen,
    TaskReport,
)
from jobs.submit import submit
from jobs.summary import JobSummary
from runner.worker.leases.lease import take_lease
from runner.worker.loop import assemble
from runner.worker.tasks.control import TaskControl
from runner.worker.tasks.delivery import Context
from runner.worker.tasks.life import handle

__all__ = [
    "Call",
    "ChunkEnvironment",
    "CrashAt",
    "JobDidNotFinish",
    "JobRun",
    "Progress",
    "SimulatedCrash",
    "SummarySeen",
    "TaskReport",
    "run_job",
]

#: Messages delivered and clock jumps a run may take before :func:`run_job` gives up.
DEFAULT_MAX_ROUNDS = 10_000


def run_job(
    job: type[ChunkedJob],
    params: Any = None,
    *,
    crash: CrashAt | Iterable[CrashAt] = (),
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    checkpoint_seconds: float = 0.0,
    directory: str | Path | None = None,
    clock: FakeClock | None = None,
    job_id: str = "test-job",
    seed: int = 0,
) -> JobRun:
    """Run a whole job in this process: submit, plan, every chunk, finalize.

    The runner's own code runs it (``runner.worker.loop.assemble``,
    ``runner.worker.leases.lease.take_lease``, ``runner.worker.tasks.life.handle``, the
    finisher driven in this thread) on an embedded store in a temporary directory, on a
    :class:`~checkpoint.clock.FakeClock`: one message at a time, no threads, no sleeps.
    When no message is visible the clock jumps to the next one (past a backoff, past a
    dead worker's lease). Deterministic: the backoff's jitter
    is drawn from ``seed``.

    Args:
        job: your ChunkedJob subclass.
        params: the job's params, as ``submit`` takes them (msgpack-able).
        crash: where workers die (:class:`CrashAt`); each time a fresh worker goes on.
        max_rounds: messages delivered plus clock jumps before giving up.
        checkpoint_seconds: fake time each ``chunk.checkpoint`` call takes (the lease
            is renewed meanwhile, as the worker's keeper does). 0: time stands still
            while chunks run, so no checkpoint is written before the chunk ends unless a
            crash point asks for it.
        directory: keep the store there (``runner status --storage DIR`` reads it);
            by default a temporary directory, removed before this returns.
        clock: the fake clock to run on (a new one if None).
        job_id: the job's id.
        seed: seeds the backoff's jitter.

    Returns:
        The :class:`JobRun`, read from the store once the job ended ("done" or
        "failed": a job that fails is reported, not raised; see
        :meth:`JobRun.assert_done`).

    Raises:
        JobDidNotFinish: the job had not ended after ``max_rounds`` rounds, or no
            message was left to run it; ``.run`` holds where it got to.
    """
    if checkpoint_seconds < 0 or max_rounds < 1:
        raise ValueError("checkpoint_seconds must be >= 0 and max_rounds >= 1")
    crashes = (crash,) if isinstance(crash, CrashAt) else tuple(crash)
    clock = clock if clock is not None else FakeClock()
    with contextlib.ExitStack() as stack:
        if directory is None:
            where = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="run-job-")))
        else:
            where = Path(directory)
        storage = open_storage(StorageLocation("embedded", directory=where), clock=clock)
        stack.callback(storage.close)
        harness = _WholeJob(job, storage, clock, crashes, checkpoint_seconds, seed)
        harness.submit(params, job_id)
        return harness.run(max_rounds, None if directory is None else where)


@dataclass(eq=False)
class _Worker:
    """One simulated worker process: its parts, and whether it has been killed."""

    id: str
    dead: bool = False
    context: Context | None = None


class _Mortal:
    """One service of a worker's storage. Once the worker is dead every call raises
    :class:`SimulatedCrash`, so nothing more is written by it, whatever code runs on
    in this process. For the job's queues it also notes when each message becomes
    visible, so the harness knows where to move the clock when none is."""

    def __init__(
        self,
        inner: Any,
        worker: _Worker,
        visible_at: dict[str, datetime] | None = None,
        queues: tuple[str, ...] = (),
    ):
        self._inner = inner
        self._worker = worker
        self._visible_at = visible_at
        self._queues = queues

    def __getattr__(self, method: str) -> Any:
        target = getattr(self._inner, method)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._worker.dead:
                raise SimulatedCrash(f"{self._worker.id} is dead: it makes no more calls")
            result = target(*args, **kwargs)
            if self._visible_at is not None and args and args[0] in self._queues:
                self._note(method, args, result)
            return result

        return call

    def _note(self, method: str, args: tuple[Any, ...], result: Any) -> None:
        assert self._visible_at is not None
        if method == "receive":
            self._visible_at.update((message.id, message.next_visible_on) for message in result)
        elif method == "send":
            self._visible_at[result.id] = result.next_visible_on
        elif method == "update":
            self._visible_at[args[1]] = result.next_visible_on
        elif method == "delete":
            self._visible_at.pop(args[1], None)
        elif method == "delete_many":
            for message_id, _ in args[1]:
                self._visible_at.pop(message_id, None)


class _Watched:
    """The :class:`~jobs.chunk.ChunkControl` your code is given: the runner's own, with
    the harness at each cancellation point (to let time pass, count it, crash there)."""

    def __init__(self, inner: ChunkControl, harness: _WholeJob, call: Call):
        self._inner = inner
        self._harness = harness
        self._call = call

    def offer(self, state: Any, progress: Progress | None = None) -> None:
        self._harness.pass_time(self._harness.checkpoint_seconds)
        self._inner.offer(state, progress)
        self._call.checkpoints.append(round_trip(state, "checkpoint state"))
        self._call.progress.append(progress)

    def raise_if_stopped(self) -> None:
        self._inner.raise_if_stopped()
        self._call.passed += 1
        self._harness.crash_if_due(self._call, self._call.passed, self._inner)

    @property
    def stopping(self) -> bool:
        return self._inner.stopping

    @property
    def claim(self) -> str:
        return self._inner.claim

    @property
    def taken_over(self) -> Takeover | None:
        return self._inner.taken_over

    def publish(self, name: str, record: Mapping[str, Any]) -> None:
        self._inner.publish(name, record)

    def published(self) -> dict[str, Any]:
        return self._inner.published()

    def record_spark_session(self, session: str) -> None:
        self._inner.record_spark_session(session)

    def limit(self, name: str, units: int) -> None:
        # Recorded, not taken: a test's job runs on one fake clock, not the store's limits.
        resource_rate(self._harness.job_class, name)
        self._inner.raise_if_stopped()
        self._call.limits.append((name, units))


class _WholeJob:
    """Runs one job with the runner's parts, one message at a time (see :func:`run_job`)."""

    def __init__(
        self,
        job_class: type[ChunkedJob],
        storage: Storage,
        clock: FakeClock,
        crashes: tuple[CrashAt, ...],
        checkpoint_seconds: float,
        seed: int,
    ):
        self.job_class = job_class
        self.storage = storage
        self.store = CheckpointStore(storage, clock)
        self.clock = clock
        self.crashes = crashes
        self.checkpoint_seconds = checkpoint_seconds
        self.seed = seed
        self.job_id = ""
        self.calls: list[Call] = []
        self.rounds = 0
        self._observed = self._observe(job_class)
        self._visible_at: dict[str, datetime] = {}
        self._worker: _Worker | None = None
        self._workers = 0
        #: The job's queues (its class's, as it is submitted with them), and which one
        #: a receive asks first.
        self._queues = job_class.chunk_queues()
        self._next_queue = 0

    def submit(self, params: Any, job_id: str) -> None:
        self.job_id = submit(self.job_class, params, job_id=job_id, storage=self.storage)

    # ----------------------------------------------------------------- the loop

    def run(self, max_rounds: int, directory: Path | None) -> JobRun:
        while not self._ended():
            if self.rounds >= max_rounds:
                raise JobDidNotFinish(
                    f"the job had not ended after max_rounds={max_rounds} rounds (messages "
                    "delivered and clock jumps)",
                    self.report(directory),
                )
            self.rounds += 1
            if not self._deliver():
                self._wait(directory)
        return self.report(directory)

    def _ended(self) -> bool:
        # As burst mode's test: the job ended and nothing is left on its queues (a
        # duplicate message left behind is delivered, found done and deleted unrun).
        state = self.store.get_job(self.job_id).state
        return state in ("done", "failed") and not self._queued()

    def _queued(self) -> int:
        """Messages in the job's queues and its resume queue, visible or not."""
        queues = self.storage.queues
        return sum(queues.approximate_length(name) for name in self._served())

    def _served(self) -> tuple[str, ...]:
        """The queues a worker polls: the resume queue, then the job's queues."""
        return (self.job_class.resume_queue(), *self._queues)

    def _in_turn(self) -> list[str]:
        """The queues to ask for the next message, as a worker asks them: resumed work
        first, then the job's queues in turn, from the one after the last asked."""
        turn = [
            self._queues[(self._next_queue + n) % len(self._queues)]
            for n in range(len(self._queues))
        ]
        return [self.job_class.resume_queue(), *turn]

    def _deliver(self) -> bool:
        """Receive one message, as the worker loop does, and handle it; False if none
        was visible. Its resume queue is asked first, then the job's queues in turn,
        starting after the last one asked."""
        worker = self._worker = self._worker or self._new_worker()
        assert worker.context is not None
        for queue in self._in_turn():
            if queue != self.job_class.resume_queue():
                self._next_queue = (self._queues.index(queue) + 1) % len(self._queues)
            received_at = self.clock.monotonic()  # before the receive, as the loop takes it
            lease_seconds = worker.context.keeper.sizing.seconds(self.job_class)
            batch = worker.context.queues.receive(
                queue, max_messages=1, visibility_seconds=lease_seconds
            )
            if batch:
                break
        else:
            return False
        # The lease is what the receive gave (as the worker loop takes it).
        of = worker.context.by_queue[queue]
        lease = take_lease(worker.context.keeper, queue, batch[0], of, received_at, lease_seconds)
        try:
            chunk_seconds = handle(worker.context, queue, batch[0], received_at, lease)
            if chunk_seconds is not None:  # noted as the worker loop notes them
                worker.context.chunk_times.observe(self.job_class.job_type(), chunk_seconds)
        except SimulatedCrash:
            if not worker.dead:
                raise
        if worker.dead:
            self._worker = None  # the next message goes to a fresh worker process
        return True

    def _wait(self, directory: Path | None) -> None:
        """Move the clock to when the next message becomes visible (a backoff ending,
        a dead worker's lease running out)."""
        now = self.clock.now()
        upcoming = [moment for moment in self._visible_at.values() if moment >= now]
        if upcoming:
            # Visibility is stored as float seconds: if rounding left the message hidden
            # at its own time, a microsecond more shows it.
            self.pass_time((min(upcoming) - now).total_seconds() or 1e-6)
        elif self._queued():
            self.pass_time(1.0)  # not one we saw received: wait for it a second at a time
        else:
            state = self.store.get_job(self.job_id).state
            raise JobDidNotFinish(
                f"no message is left to run the job, yet it is {state}", self.report(directory)
            )

    def _new_worker(self) -> _Worker:
        self._workers += 1
        worker = _Worker(f"worker-{self._workers}")
        queues = _Mortal(self.storage.queues, worker, self._visible_at, self._served())
        storage = Storage(
            queues=cast(QueueStore, queues),
            records=cast(RecordStore, _Mortal(self.storage.records, worker)),
            blobs=cast(BlobStore, _Mortal(self.storage.blobs, worker)),
            description=f"{self.storage.description} as {worker.id}",
        )
        worker.context = assemble(storage, [self._observed], self.clock, worker.id)
        worker.context.rng = random.Random(f"{self.seed}:{worker.id}")
        worker.context.store.ensure()
        return worker

    def pass_time(self, seconds: float) -> None:
        """Let ``seconds`` pass, renewing the running worker's leases when due and
        looking at its running jobs' state, as its lease keeper's and stop-order watcher's
        threads do."""
        if seconds <= 0:
            return
        end = self.clock.monotonic() + seconds
        while True:
            worker = self._worker
            due_in = math.inf
            if worker is not None and worker.context is not None and not worker.dead:
                context = worker.context
                due_in = min(context.keeper.renew_due(), context.stop_orders.check_due())
            left = end - self.clock.monotonic()
            if left <= 0:
                return
            self.clock.advance(min(left, max(due_in, 0.001)))

    # ----------------------------------------------------------------- your code, watched

    def _observe(self, job_class: type[ChunkedJob]) -> type[ChunkedJob]:
        """A subclass calling your methods through the harness; same job type, queue and
        settings, so the runner treats it as your class."""
        namespace = {
            "queue": job_class.queue,
            "__module__": job_class.__module__,
            "__qualname__": job_class.__qualname__,
            "__doc__": job_class.__doc__,
            "split": lambda job, params: self._split(job, params),
            "process": lambda job, chunk: self._process(job, chunk),
            "finalize": lambda job, params, summary: self._finalize(job, params, summary),
        }
        return type(job_class.__name__, (job_class,), namespace)

    def _call(self, kind: TaskKind, index: int, attempt: int | None = None) -> Call:
        if attempt is None:  # planning and finalize: which run this is
            attempt = 1 + sum(1 for call in self.calls if call.kind == kind)
        worker = self._worker.id if self._worker is not None else "?"
        call = Call(kind, index, attempt, worker, self.clock.now())
        self.calls.append(call)
        return call

    def _split(self, job: ChunkedJob, params: Any) -> Iterator[Any]:
        call = self._call("plan", 0)
        return self._payloads(call, lambda: self.job_class.split(job, params))

    def _payloads(self, call: Call, split: Callable[[], Iterable[Any]]) -> Iterator[Any]:
        try:
            payloads = iter(split())
            while True:
                self.crash_if_due(call, call.passed)
                try:
                    payload = next(payloads)
                except StopIteration:
                    break
                call.passed += 1
                yield payload
        except (SimulatedCrash, GeneratorExit):
            raise
        except BaseException as error:
            _raised(call, error)
            raise
        call.outcome = "returned"

    def _process(self, job: ChunkedJob, chunk: Chunk) -> Any:
        call = self._call("chunk", chunk.index, chunk.attempt)
        call.started_from = round_trip(chunk.state, "chunk state")
        # The runner's control is the chunk's own (private) one: wrapped, not replaced.
        control = _Watched(chunk._control, self, call)
        watched = Chunk(
            job_id=chunk.job_id,
            index=chunk.index,
            payload=chunk.payload,
            params=chunk.params,
            state=chunk.state,
            attempt=chunk.attempt,
            control=control,
        )
        return self._run(call, lambda: self.job_class.process(job, watched))

    def _finalize(self, job: ChunkedJob, params: Any, summary: JobSummary) -> Any:
        call = self._call("final", 0)
        seen = call.summary = SummarySeen(summary.job_id, summary.total, summary.done, [])
        read = summary._results

        def results() -> Iterator[tuple[int, Any]]:
            for item in read():
                seen.results.append(item)
                yield item

        control = None if summary._control is None else _Watched(summary._control, self, call)
        watched = replace(summary, _results=results, _control=control)
        return self._run(call, lambda: self.job_class.finalize(job, params, watched))

    def _run(self, call: Call, action: Callable[[], Any]) -> Any:
        self.crash_if_due(call, 0)
        try:
            result = action()
        except SimulatedCrash:
            call.outcome = "crashed"
            raise
        except BaseException as error:
            _raised(call, error)
            raise
        call.outcome, call.result = "returned", result
        self.crash_if_due(call, None)
        return result

    def crash_if_due(self, call: Call, point: int | None, control: Any = None) -> None:
        """Kill the worker if a crash point names this one: the chunk's newest state is
        written first (the crash point's checkpoint is durable), then nothing more."""
        for crash in self.crashes:
            if crash.hits(call.kind, call.index, call.attempt, point):
                if isinstance(control, TaskControl):
                    control.flush()
                if self._worker is not None:
                    self._worker.dead = True
                call.outcome = "crashed"
                raise SimulatedCrash(f"{call.worker} killed: {crash}")

    # ----------------------------------------------------------------- the report

    def report(self, directory: Path | None) -> JobRun:
        job = self.store.get_job(self.job_id)
        return JobRun(
            job_id=self.job_id,
            state=job.state,
            error=job.error,
            total=job.total,
            planning=self._task("plan"),
            chunks=tuple(self._report(task) for task in self.store.chunks(self.job_id)),
            finalize=self._task("final"),
            calls=tuple(self.calls),
            rounds=self.rounds,
            clock=self.clock,
            directory=directory,
        )

    def _task(self, kind: TaskKind) -> TaskReport | None:
        try:
            return self._report(self.store.get_task(self.job_id, kind, 0))
        except NotFound:
            return None

    def _report(self, task: TaskRecord) -> TaskReport:
        calls = tuple(c for c in self.calls if c.kind == task.kind and c.index == task.index)
        return TaskReport(
            kind=task.kind,
            index=task.index,
            state=task.state,
            attempt=task.attempt,
            result=self.store.value(task.properties, "result", of=task.name),
            checkpoint=self.store.value(task.properties, "progress", of=task.name),
            progress=Progress.from_properties(task.properties, task.name),
            error=task.error,
            calls=calls,
        )


def _raised(call: Call, error: BaseException) -> None:
    call.outcome, call.error = "raised", error
    call.traceback = "".join(traceback.format_exception(error))
