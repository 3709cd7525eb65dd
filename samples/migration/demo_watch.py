"""The demo's ``runner`` side: the pipeline's workers, its progress, and the kill.

:class:`PipelineWatch` shows each step's line from ``runner status --pipeline ID
--json`` (about each second) until the pipeline ends, and while the transform step
runs, looks at the store every :data:`KILL_LOOK_SECONDS` for a chunk with a checkpoint
and batches still to do: it SIGKILLs that chunk's worker (with its Spark JVM) and
starts a replacement, then notices the chunk resumed by another worker.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from checkpoint.records import TaskRecord
from checkpoint.store import CheckpointStore
from samples.migration.pipeline import STEPS
from samples.migration.processes import PIPELINE_JOBS, Runner, Worker, worker_pid

Say = Callable[[str], None]

#: How often the demo asks ``runner status``.
POLL_SECONDS = 1.0
#: How often the demo looks at the store for a chunk to kill the worker of, and for how
#: long between two status lines: a `runner status` took 12 s on a loaded machine, and
#: a chunk of a few batches can pass its middle in less.
KILL_LOOK_SECONDS = 0.1
KILL_WINDOW_SECONDS = 10.0
#: A progress line at least this often, even when nothing changed.
QUIET_SECONDS = 10.0


@dataclass
class Crash:
    """The worker the demo killed, and what became of its chunk."""

    worker: str
    chunk: int
    batch: int
    of: int
    resumed_by: str | None = None
    resumed_attempt: int | None = None
    #: When the killed attempt's lease ran out (its record's last ``lease_until``), and
    #: when the next attempt started: the resumed chunk's wait (UTC).
    lease_until: datetime | None = None
    resumed_on: datetime | None = None


@dataclass(frozen=True)
class Steps:
    """A pipeline's id and its steps' job ids (``<pipeline>-<step>``)."""

    pipeline: str
    stage: str
    transform: str
    verify: str
    publish: str

    def by_name(self) -> dict[str, str]:
        return dict(
            zip(STEPS, (self.stage, self.transform, self.verify, self.publish), strict=True)
        )

    def name_of(self, job_id: str) -> str:
        return job_id.removeprefix(f"{self.pipeline}-")


class ClusterSide(Protocol):
    """The cluster demo's part (:class:`~.demo_cluster.SparkSide`)."""

    def kill_worker(self, say: Say) -> object:
        """Called right after the demo SIGKILLed a runner worker."""

    def report(self, say: Say) -> None:
        """Called once the job is done, before the verification."""


def start_workers(runner: Runner, worker_args: tuple[str, ...], say: Say) -> None:
    """Two workers serving the pipeline's job types (``--burst``: each exits once no
    step has work left)."""
    say(f"   STEP_TYPES={' '.join(PIPELINE_JOBS)}")
    for _ in range(2):
        worker = runner.start_worker(*worker_args, jobs=PIPELINE_JOBS)
        say(f"   {start_line(worker_args)} -> {worker.name} (pid {worker.pid})")


#: The states a pipeline (or a step) ends in.
ENDED = ("done", "failed", "cancelled")


@dataclass
class PipelineWatch:
    """Shows the pipeline's steps until it ends (``runner status --pipeline`` each
    second), and kills one worker mid-chunk in the transform step on the way, found by
    reading the store between two of them.

    ``on_staged`` is called once, when the stage step is seen done; with
    ``expect_verify_failure``, a pipeline failed at its verify step (publish blocked) is
    an end, not an error."""

    runner: Runner
    steps: Steps
    say: Say
    store: CheckpointStore
    #: Extra ``runner start`` options of every worker (a replacement's too).
    worker_args: tuple[str, ...] = ()
    timeout_seconds: float = 1800.0
    cluster: ClusterSide | None = None
    on_staged: Callable[[], None] | None = None
    expect_verify_failure: bool = False
    crash: Crash | None = None
    #: When the first :meth:`run` started: every line counts its seconds from there.
    started: float = field(default_factory=time.monotonic)

    def run(self, *, kill: bool = True) -> tuple[str, Crash | None]:
        """Watch until the pipeline ends; its state, and the crash made (``kill``: one
        at most) on the way."""
        said: dict[str, tuple[str, float]] = {}
        while True:
            state, by_name = self.status()
            elapsed = time.monotonic() - self.started
            self._show(by_name, elapsed, said)
            if state in ENDED:
                return self._ended(state, by_name), self.crash
            transform = by_name["transform"]
            if self.crash is not None and self.crash.resumed_by is None:
                _notice_resume(self.runner, transform, self.crash, self.say)
            if self.on_staged is not None and by_name["stage"]["state"] == "done":
                self.on_staged()
                self.on_staged = None
            if not any(worker.alive() for worker in self.runner.workers):
                if self.status()[0] not in ENDED:  # they may have just ended it
                    raise RuntimeError(
                        f"every worker exited, pipeline {self.steps.pipeline} has not ended"
                    )
            if elapsed > self.timeout_seconds:
                raise TimeoutError(f"pipeline {self.steps.pipeline} not done after {elapsed:.0f} s")
            if kill and self.crash is None and transform["state"] == "running":
                self.crash = _kill_when_due(
                    self.runner,
                    self.store,
                    self.steps.transform,
                    self.worker_args,
                    self.say,
                )
                if self.crash is not None and self.cluster is not None:
                    self.cluster.kill_worker(self.say)
            else:
                time.sleep(POLL_SECONDS)

    def status(self) -> tuple[str, dict[str, dict[str, Any]]]:
        """The pipeline's state and each step's ``runner status --json``, by step name."""
        status = self.runner.pipeline_status(self.steps.pipeline)
        steps = {self.steps.name_of(step["job_id"]): step for step in status["steps"]}
        return status["state"], steps

    def _show(
        self, by_name: dict[str, dict[str, Any]], elapsed: float, said: dict[str, tuple[str, float]]
    ) -> None:
        """A line per step that changed (a running one at least every QUIET_SECONDS)."""
        for name, step in by_name.items():
            line = _step_line(self.runner, self.steps, step)
            last, at = said.get(name, ("", 0.0))
            quiet = (
                step["state"] not in (*ENDED, "waiting", "blocked")
                and elapsed - at >= QUIET_SECONDS
            )
            if line != last or quiet:
                self.say(f"   [{elapsed:5.0f} s] {name}: {line}")
                said[name] = (line, elapsed)

    def _ended(self, state: str, by_name: dict[str, dict[str, Any]]) -> str:
        verify, publish = by_name["verify"], by_name["publish"]
        if state == "done" or (
            self.expect_verify_failure
            and verify["state"] == "failed"
            and publish["state"] == "blocked"
        ):
            self.say(f"   pipeline {self.steps.pipeline}: {state}")
            return state
        errors = "; ".join(
            f"{name}: {step.get('error') or step['state']}"
            for name, step in by_name.items()
            if step["state"] not in ("done", "waiting", "blocked")
        )
        raise RuntimeError(f"pipeline {self.steps.pipeline} {state}: {errors}")


def _step_line(runner: Runner, steps: Steps, step: dict[str, Any]) -> str:
    """What a step's line says: its progress while it runs, else its state and why."""
    state = step["state"]
    if state == "done":
        total = step["chunks"]["total"]
        return f"done ({total} chunks)" if total else "done (no chunks: its finalize only)"
    if state == "waiting":
        return "waiting for " + ", ".join(steps.name_of(job) for job in step["waiting_on"])
    if state == "blocked":
        return str(step["blocked"])  # "blocked: step verify failed (...)"
    if state in ("failed", "cancelled"):
        return f"{state}: {step['error']}"
    return progress_line(runner, step)


def progress_line(runner: Runner, status: dict[str, Any]) -> str:
    chunks = status["chunks"]
    running, waiting = [], []
    for entry in status["running"]:
        batch, of = batch_of(entry["progress"])
        worker = runner.worker_with_pid(worker_pid(entry["worker"]) or -1)
        who = worker.name if worker else entry["worker"]
        at = f" batch {batch}/{of}" if of else ""
        if entry["lease_expired"]:
            # Its worker stopped renewing (killed): the chunk is back on the queue, and
            # waits there while the live workers are busy with other chunks.
            waiting.append(
                f"#{entry['index']}{' at' + at if at else ''} (the lease of {who} ran out, "
                f"attempt {entry['attempt']})"
            )
        else:
            running.append(f"#{entry['index']} on {who}{at} (attempt {entry['attempt']})")
    total = chunks["total"] if status["planning_done"] else "?"
    text = f"{status['state']}: chunks {chunks['done']}/{total} done"
    if running:
        text += "; running " + ", ".join(running)
    if waiting:
        text += "; waiting for a worker " + ", ".join(waiting)
    if chunks["failed"]:
        text += f"; {chunks['failed']} retrying"
    return text


def batch_of(progress: Any) -> tuple[int, int]:
    """(batch, of) from a running chunk's last checkpoint (``runner status --json`` gives
    the state itself; None before the first checkpoint)."""
    if isinstance(progress, dict) and isinstance(progress.get("batch"), int):
        return progress["batch"], int(progress.get("of") or 0)
    return 0, 0


def _kill_when_due(
    runner: Runner, store: CheckpointStore, job_id: str, worker_args: tuple[str, ...], say: Say
) -> Crash | None:
    """For up to :data:`KILL_WINDOW_SECONDS`, look at the job's running chunks in the
    store every :data:`KILL_LOOK_SECONDS`; SIGKILL the worker of the first one with a
    checkpoint and batches still to do. None if there was none meanwhile.

    The store is read here rather than through ``runner status`` (a process, a second
    or more on a loaded machine): a chunk of a few batches is past its first and not at
    its last only for a few seconds."""
    deadline = time.monotonic() + KILL_WINDOW_SECONDS
    while True:
        for seen in _killable(store, job_id):
            worker = runner.worker_with_pid(worker_pid(seen.owner) or -1)
            if worker is None or not worker.alive():
                continue
            # Read a moment ago: its last batches may have run since. Stopped first, the
            # worker writes nothing more, so a read now says for sure whether the chunk
            # is still its own and unfinished.
            worker.pause()
            try:
                task = _still_running(store, job_id, seen)
            except BaseException:
                worker.resume()
                raise
            if task is None:
                worker.resume()
                continue
            return _kill(runner, worker, store, task, worker_args, say)
        if time.monotonic() >= deadline:
            return None
        time.sleep(KILL_LOOK_SECONDS)


def _kill(
    runner: Runner,
    worker: Worker,
    store: CheckpointStore,
    task: TaskRecord,
    worker_args: tuple[str, ...],
    say: Say,
) -> Crash:
    batch, of = batch_of(store.value(task.properties, "progress"))
    worker.kill()
    # A Connect client has no JVM of its own: its Spark work runs in the server's.
    jvm = "a Spark Connect client" if "--spark-remote" in worker_args else "with its Spark JVM"
    say(
        f"3. SIGKILL {worker.name} (pid {worker.pid}, {jvm}) while it runs transform "
        f"chunk #{task.index}: checkpoint says batch {batch} of {of} is next"
    )
    replacement = runner.start_worker(*worker_args, jobs=PIPELINE_JOBS)
    left = ""
    if task.lease_until is not None:  # the lease the workers sized, as last renewed
        seconds = max(0.0, (task.lease_until - datetime.now(UTC)).total_seconds())
        left = f" (in {seconds:.0f} s or less)"
    say(
        f"   {start_line(worker_args)} -> {replacement.name} (pid "
        f"{replacement.pid}) replaces it; the chunk is back on the queue once its "
        f"lease runs out{left}, for the next free worker"
    )
    return Crash(worker.name, task.index, batch, of, lease_until=task.lease_until)


def _killable(store: CheckpointStore, job_id: str) -> list[TaskRecord]:
    """The job's chunks running under a live lease with a checkpoint and batches to do."""
    now = store.clock.now()
    found = []
    for task in store.chunks(job_id, ("running",)):
        batch, of = batch_of(store.value(task.properties, "progress"))
        live = task.lease_until is not None and task.lease_until > now
        if live and task.owner and 0 < batch < of:
            found.append(task)
    return found


def _still_running(store: CheckpointStore, job_id: str, seen: TaskRecord) -> TaskRecord | None:
    """The chunk ``seen`` as stored now, if the same attempt still holds it unfinished,
    with a checkpoint and batches to do; else None."""
    for task in _killable(store, job_id):
        if (task.index, task.owner, task.attempt) == (seen.index, seen.owner, seen.attempt):
            return task
    return None


def _time(text: str | None) -> datetime | None:
    """A time of ``runner status --json`` (UTC, ``Z``) as a datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _notice_resume(runner: Runner, status: dict[str, Any], crash: Crash, say: Say) -> None:
    for entry in status["running"]:
        if entry["index"] != crash.chunk or entry["attempt"] < 2:
            continue
        worker = runner.worker_with_pid(worker_pid(entry["worker"]) or -1)
        crash.resumed_by = worker.name if worker else entry["worker"]
        crash.resumed_attempt = entry["attempt"]
        crash.resumed_on = _time(entry["started_on"])
        kept = "batch 0 is" if crash.batch == 1 else f"batches 0-{crash.batch - 1} are"
        say(
            f"4. transform chunk #{crash.chunk} taken over by {crash.resumed_by}: attempt "
            f"{entry['attempt']}, resuming from its checkpoint (batch {crash.batch} of "
            f"{crash.of}); {kept} not redone"
        )
        if worker is not None:
            for line in worker.log_lines("resumes from its checkpoint"):
                say(f"   {worker.name} log: {line.split(': ', 1)[-1]}")


def start_line(worker_args: tuple[str, ...]) -> str:
    """A worker's command line, its job types named by ``$STEP_TYPES`` (said once, by
    :func:`start_workers`)."""
    return " ".join(["runner start $STEP_TYPES --workers 1 --prefetch 0 --burst", *worker_args])


def wait_for_exit(runner: Runner, say: Say) -> dict[str, int | None]:
    """Burst workers exit by themselves once no step has work left; their exit codes."""
    codes: dict[str, int | None] = {}
    for worker in runner.workers:
        try:
            codes[worker.name] = worker.process.wait(60)
        except subprocess.TimeoutExpired:
            codes[worker.name] = None  # reported; killed by run_demo
    say("   workers exited: " + ", ".join(f"{name} {code}" for name, code in codes.items()))
    return codes
