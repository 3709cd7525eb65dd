"""What a whole job run in a test's process is told and reports (``jobs.testing.run_job``).

:class:`CrashAt` says where a worker dies; :class:`JobRun` is the job as the checkpoint
store recorded it once it ended, with every call of the job's own code
(:class:`Call`). Plain data: nothing here runs anything. Import it from
:mod:`jobs.testing`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from checkpoint.clock import FakeClock
from checkpoint.records import JobState, Progress, TaskKind, TaskState

Outcome = Literal["running", "returned", "raised", "crashed"]


class SimulatedCrash(BaseException):
    """The worker running this task died here, as by SIGKILL (raised by ``run_job``).

    A ``BaseException``, so an ``except Exception`` in your code does not catch it. If
    you catch ``BaseException``, re-raise it: the harness refuses every storage call of
    the dead worker anyway, so nothing you do after it is written.
    """


@dataclass(frozen=True)
class CrashAt:
    """Where :func:`~jobs.testing.run_job` kills the worker running a task (as SIGKILL
    would: nothing more is written by it, its lease is not released); a fresh worker then
    goes on.

    ``CrashAt(chunk=3, checkpoint=2)``: the worker dies inside chunk 3's 2nd
    ``chunk.checkpoint`` call, right after that state was written durably. The chunk's
    message reappears once its lease has run out (the harness moves the fake clock
    there) and the next attempt starts from exactly that state.

    ``CrashAt(chunk=3)`` (``checkpoint=None``): it dies once ``process`` has returned,
    before the chunk is recorded done, so its work since the last durable state is done
    again: the test of an idempotent ``process``. ``checkpoint=0``: it dies as
    ``process`` starts (after the claim, so the attempt counts).

    Planning and finalize: :meth:`planning` and :meth:`finalizing`.

    Attributes:
        chunk: the chunk's index (None for planning and finalize).
        checkpoint: the cancellation point to die at (1 = the first), 0 for the start,
            None for "after your method returned".
        attempt: the attempt to crash (``chunk.attempt``; for planning and finalize, 1
            is their first run), or None for every attempt (the task is then poisoned
            after ``max_attempts``).
        kind: "chunk", "plan" or "final".
    """

    chunk: int | None = None
    checkpoint: int | None = None
    attempt: int | None = 1
    kind: TaskKind = field(default="chunk", kw_only=True)

    def __post_init__(self) -> None:
        if (self.kind == "chunk") != (self.chunk is not None):
            raise ValueError(
                "name the chunk to crash (CrashAt(chunk=...)), or use "
                "CrashAt.planning() / CrashAt.finalizing()"
            )
        if self.checkpoint is not None and self.checkpoint < 0:
            raise ValueError(f"checkpoint must be >= 0 or None, not {self.checkpoint}")
        if self.attempt is not None and self.attempt < 1:
            raise ValueError(f"attempt must be >= 1 or None, not {self.attempt}")

    @classmethod
    def planning(cls, payloads: int, attempt: int | None = 1) -> CrashAt:
        """Die during planning once ``split`` has yielded ``payloads`` payloads, as
        planning asks it for the next one (0: before the first)."""
        return cls(checkpoint=payloads, attempt=attempt, kind="plan")

    @classmethod
    def finalizing(cls, checkpoint: int | None = None, attempt: int | None = 1) -> CrashAt:
        """Die in ``finalize`` at its ``checkpoint``-th cancellation point (each result
        read from ``summary.results()``, before it is handed over, and each
        ``summary.raise_if_stopped()`` call), or, if None, once it has returned and before
        the job is recorded done (it then runs again: the test of an idempotent one)."""
        return cls(checkpoint=checkpoint, attempt=attempt, kind="final")

    def __str__(self) -> str:
        task = {"chunk": f"chunk {self.chunk}", "plan": "planning", "final": "finalize"}
        method = {"chunk": "process", "plan": "split", "final": "finalize"}[self.kind]
        if self.checkpoint is None:
            where = f"after {method} returned"
        elif self.kind == "plan":
            where = f"after {self.checkpoint} payload(s)"
        else:
            where = f"at checkpoint {self.checkpoint}" if self.checkpoint else "at the start"
        attempt = "every attempt" if self.attempt is None else f"attempt {self.attempt}"
        return f"crash of {task[self.kind]} {where}, {attempt}"

    def hits(self, kind: TaskKind, index: int, attempt: int, point: int | None) -> bool:
        """Whether this crash point is the given one of a task's cancellation points."""
        return (
            self.kind == kind
            and (kind != "chunk" or self.chunk == index)
            and self.attempt in (None, attempt)
            and self.checkpoint == point
        )


@dataclass(frozen=True)
class SummarySeen:
    """What ``finalize`` was told: the summary's counts and the results it read."""

    job_id: str
    total: int
    done: int
    results: list[tuple[int, Any]]


@dataclass
class Call:
    """One call of your ``split``, ``process`` or ``finalize`` during :func:`~jobs.testing.run_job`.

    Attributes:
        kind: "plan" (``split``), "chunk" (``process``) or "final" (``finalize``).
        index: the chunk's index (0 for planning and finalize).
        attempt: ``chunk.attempt``; for planning and finalize, which run it is.
        worker: the id of the (simulated) worker that ran it.
        started_on: the fake clock's time at the call.
        started_from: ``chunk.state`` as ``process`` started (None otherwise).
        checkpoints: the states ``process`` passed to ``chunk.checkpoint``, in order.
        progress: the ``progress=`` of each of those checkpoints, as a
            :class:`~checkpoint.records.Progress` (None where it was not given).
        limits: the ``(name, units)`` of each ``chunk.limit`` call, in order (the
            harness takes nothing from a store and never waits for a token).
        passed: cancellation points passed: checkpoints (``process``), payloads yielded
            (``split``), results read and stop checks (``finalize``).
        outcome: "returned", "raised" (your exception), "crashed" (a :class:`CrashAt`
            killed the worker) or "running" (planning stopped reading ``split`` early).
        result: what it returned.
        error: what it raised (your exception, or ``LeaseLost``, ``ChunkStopped``).
        traceback: ``error``'s formatted traceback.
        summary: what ``finalize`` was told (None for the others).
    """

    kind: TaskKind
    index: int
    attempt: int
    worker: str
    started_on: datetime
    started_from: Any = None
    checkpoints: list[Any] = field(default_factory=list)
    progress: list[Progress | None] = field(default_factory=list)
    limits: list[tuple[str, int]] = field(default_factory=list)
    passed: int = 0
    outcome: Outcome = "running"
    result: Any = None
    error: BaseException | None = None
    traceback: str = ""
    summary: SummarySeen | None = None


@dataclass(frozen=True)
class TaskReport:
    """Planning, one chunk or finalize as the checkpoint store ended up recording it,
    with every call of your code for it.

    Attributes:
        kind: "plan", "chunk" or "final".
        index: the chunk's index (0 for planning and finalize).
        state: "done", "poisoned", ... (the task states of docs/semantics.md).
        attempt: attempts recorded (claims, less the ones given back).
        result: the chunk's stored result (None for planning and finalize).
        checkpoint: the last durable state (for planning: chunks enqueued).
        progress: how far the chunk said it got with that state (``progress=``), as
            ``runner status`` shows it, or None if it never said.
        error: the recorded error of the last failure, ``{"type", "message",
            "traceback"}``, or None.
        calls: every call of your code for this task, in order.
    """

    kind: TaskKind
    index: int
    state: TaskState
    attempt: int
    result: Any
    checkpoint: Any
    error: dict[str, str] | None
    calls: tuple[Call, ...]
    progress: Progress | None = None

    @property
    def runs(self) -> int:
        """How many times your ``split``, ``process`` or ``finalize`` ran for it."""
        return len(self.calls)

    @property
    def exceptions(self) -> list[BaseException]:
        """What your code raised, call by call (a crash is not one)."""
        return [call.error for call in self.calls if call.error is not None]


@dataclass(frozen=True)
class JobRun:
    """A job run end to end by :func:`~jobs.testing.run_job`, as recorded when it ended.

    Attributes:
        job_id: the job's id.
        state: "done" or "failed" (or where it stopped, in :class:`JobDidNotFinish`).
        error: the job's recorded error, or None.
        total: chunks ``split`` yielded (None if planning never ended).
        planning: the planning task (None if it never ran).
        chunks: every chunk, in index order (``chunks[i].index == i``).
        finalize: the finalize task (None if it never ran).
        calls: every call of your code, in the order they were made.
        rounds: messages delivered and clock jumps made.
        clock: the fake clock the run was on (it shows how much time passed).
        directory: the store's directory if you gave one (it is kept), else None.
    """

    job_id: str
    state: JobState
    error: str | None
    total: int | None
    planning: TaskReport | None
    chunks: tuple[TaskReport, ...]
    finalize: TaskReport | None
    calls: tuple[Call, ...]
    rounds: int
    clock: FakeClock
    directory: Path | None

    @property
    def results(self) -> list[Any]:
        """Every chunk's stored result, in index order (None for a chunk not done)."""
        return [chunk.result for chunk in self.chunks]

    @property
    def summary(self) -> SummarySeen | None:
        """What the last ``finalize`` run was told (None if it never ran)."""
        finals = [call for call in self.calls if call.kind == "final"]
        return finals[-1].summary if finals else None

    @property
    def finalize_result(self) -> Any:
        """What the last ``finalize`` run that returned returned."""
        returned = [c for c in self.calls if c.kind == "final" and c.outcome == "returned"]
        return returned[-1].result if returned else None

    def assert_done(self) -> JobRun:
        """Return this run if the job is done; else raise AssertionError saying why,
        with the recorded traceback of each failed task."""
        if self.state != "done":
            raise AssertionError(self.describe())
        return self

    def describe(self) -> str:
        """The run in a few lines: the job's state, then each task that did not end done."""
        lines = [
            f"job {self.job_id!r} is {self.state} after {self.rounds} rounds"
            + (f": {self.error}" if self.error else "")
        ]
        tasks = [self.planning, *self.chunks, self.finalize]
        for task in tasks:
            if task is None or task.state == "done":
                continue
            name = f"chunk {task.index}" if task.kind == "chunk" else task.kind
            lines.append(f"  {name}: {task.state}, attempt {task.attempt}, {task.runs} run(s)")
            if task.error:
                lines.append(f"    {task.error['type']}: {task.error['message']}")
                lines.extend("    " + line for line in task.error["traceback"].splitlines())
        return "\n".join(lines)


class JobDidNotFinish(AssertionError):
    """:func:`~jobs.testing.run_job` stopped before the job ended; ``run`` is where it got to."""

    def __init__(self, message: str, run: JobRun):
        super().__init__(f"{message}\n{run.describe()}")
        self.run = run
