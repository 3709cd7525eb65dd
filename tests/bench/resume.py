"""Time from SIGKILL to resume, next to the lease it waits out.

A ``runner start --burst`` process runs the one chunk of a
:class:`~tests.bench.chunk_jobs.Checkpointing` job (a checkpoint every 0.2 s, lease
3 s). Once the chunk record shows it running with a checkpoint, the worker is SIGKILLed
and a second ``runner start --burst`` (default poll interval) is started at once. The
time measured runs from the kill to the moment the chunk record shows attempt 2
running, read by polling the checkpoint store from this process every
:data:`POLL_SECONDS`. It includes the second worker's start-up, which overlaps the
lease running out. The lease left at the kill is read from the record's ``lease_until``
as the killed worker last wrote it (with each checkpoint).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from checkpoint.backends import open_storage
from checkpoint.errors import StorageError
from checkpoint.records import TaskRecord
from checkpoint.store import CheckpointStore
from jobs.submit import submit
from tests.bench.chunk_jobs import Checkpointing

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
#: How often this process reads the chunk record while waiting (the resolution).
POLL_SECONDS = 0.05
#: Bound on each wait; far above lease + poll + start-up.
DEADLINE_SECONDS = 60.0


@dataclass
class ResumeTimes:
    """One kill and resume, in seconds."""

    kill_to_resume: float
    lease_left_at_kill: float

    @property
    def after_lease(self) -> float:
        """From the lease running out to the resumed claim."""
        return self.kill_to_resume - self.lease_left_at_kill


def _runner() -> list[str]:
    script = Path(sys.executable).parent / "runner"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from runner.cli.commands import main; main()"]


def _start(location: str, log_path: Path) -> subprocess.Popen[bytes]:
    command = [*_runner(), "start", Checkpointing.job_type(), "--burst", "--storage", location]
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait(predicate: Callable[[], T | None], what: str, log_path: Path) -> T:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        try:
            found = predicate()
        except StorageError:
            found = None  # not recorded yet
        if found:
            return found
        if time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"timed out waiting for {what}; worker log:\n{tail}")
        time.sleep(POLL_SECONDS)


def measure_resume(location: str, workdir: Path) -> ResumeTimes:
    """One run: start a worker, SIGKILL it mid-chunk, time its replacement's claim."""
    tag = uuid.uuid4().hex[:8]
    stop_file, log_path = workdir / f"stop-{tag}", workdir / f"workers-{tag}.log"
    workers: list[subprocess.Popen[bytes]] = []
    with open_storage(location) as storage:
        store = CheckpointStore(storage)
        job_id = submit(Checkpointing, {"stop_file": str(stop_file)}, storage=storage)

        def chunk() -> TaskRecord:
            return store.get_task(job_id, "chunk", 0)

        try:
            workers.append(_start(location, log_path))
            _wait(
                lambda: (task := chunk()).state == "running" and task.has_progress,
                "a running chunk with a checkpoint",
                log_path,
            )
            os.kill(workers[0].pid, signal.SIGKILL)
            killed_at = time.time()
            workers.append(_start(location, log_path))
            workers[0].wait(10)
            # The dead worker's last write says when its lease runs out.
            lease_until = chunk().lease_until
            _wait(
                lambda: (task := chunk()).attempt >= 2 and task.state == "running",
                "the chunk to be claimed again",
                log_path,
            )
            resumed_at = time.time()
            assert lease_until is not None
            lease_left = lease_until.timestamp() - killed_at
            stop_file.touch()
            if workers[1].wait(DEADLINE_SECONDS) != 0:
                raise RuntimeError(f"the second worker failed; see {log_path}")
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(10)
    return ResumeTimes(resumed_at - killed_at, lease_left)
