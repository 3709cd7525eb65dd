"""The demo's ``runner`` processes: commands run to completion, and background workers.

Every worker is a ``runner start ... --workers 1`` process of its own, in a session of
its own, so the demo can SIGKILL exactly one worker *and its Spark JVM* (the whole
process group) as a crash would, and nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The repository root: ``runner`` imports ``samples.migration.job`` from here.
ROOT = Path(__file__).resolve().parents[2]
JOB = "samples.migration.job:MigrateOrders"
#: The job types of the pipeline's steps (:mod:`.pipeline`), in the order they run: what
#: a worker of the pipeline serves.
PIPELINE_JOBS = (
    "samples.migration.stage:StageExport",
    JOB,
    "samples.migration.reconcile:VerifyAgainstSource",
    "samples.migration.publish:PublishManifest",
)
#: Longest a ``runner submit`` / ``status`` call may take.
COMMAND_TIMEOUT_SECONDS = 120


def runner_command() -> list[str]:
    """The ``runner`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "runner"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from runner.cli.commands import main; main()"]


@dataclass
class Runner:
    """``runner`` commands against one storage location.

    The location goes to the processes through ``RUNNER_STORAGE`` (never on a command
    line, where ``ps`` would show an account key); the job reads its blobs from there too.
    """

    storage: str
    logs: Path
    workers: list[Worker] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {**os.environ, "RUNNER_STORAGE": self.storage, "PYTHONUNBUFFERED": "1"}

    def run(self, *args: str) -> str:
        """``runner ARGS`` to completion; its stdout. Raises RuntimeError if it fails."""
        done = subprocess.run(
            [*runner_command(), *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )
        if done.returncode != 0:
            raise RuntimeError(f"runner {args[0]} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def submit(self, params: dict[str, Any]) -> str:
        """Submit the migration job; its id."""
        return self.run("submit", JOB, "--params", json.dumps(params)).strip()

    def status(self, job_id: str) -> dict[str, Any]:
        """``runner status JOB_ID --json``."""
        return dict(json.loads(self.run("status", job_id, "--json")))

    def pipeline_status(self, pipeline_id: str) -> dict[str, Any]:
        """``runner status --pipeline PIPELINE_ID --json``."""
        return dict(json.loads(self.run("status", "--pipeline", pipeline_id, "--json")))

    def poisoned(self, job_id: str) -> list[dict[str, Any]]:
        """``runner poison list JOB_ID --json``."""
        return list(json.loads(self.run("poison", "list", job_id, "--json")))

    def start_worker(
        self, *options: str, processes: int = 1, jobs: tuple[str, ...] = (JOB,)
    ) -> Worker:
        """A background ``runner start --burst`` worker (``processes`` worker processes
        under one supervisor) serving ``jobs``, its output in a log file."""
        name = f"worker-{len(self.workers) + 1}"
        log_path = self.logs / f"{name}.log"
        # --prefetch 0: a chunk runs for minutes, so a worker takes only the one it runs;
        # a prefetched message would sit leased behind it while the other worker idles.
        command = [
            *runner_command(),
            "start",
            *jobs,
            "--workers",
            str(processes),
            "--prefetch",
            "0",
            "--burst",
            *options,
        ]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(name, process, log_path)
        self.workers.append(worker)
        return worker

    def worker_with_pid(self, pid: int) -> Worker | None:
        """The started worker whose process has ``pid``."""
        return next((worker for worker in self.workers if worker.pid == pid), None)

    def kill_all(self) -> None:
        """SIGKILL every worker still running (at exit, whatever happened)."""
        for worker in self.workers:
            worker.kill()


@dataclass
class Worker:
    """One ``runner start`` process (with its Spark JVM, in the same process group)."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker's process group (the worker and its JVM), as a crash would."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGKILL)  # its own session: pgid == pid
            except ProcessLookupError:
                pass
            self.process.wait(30)

    def pause(self) -> None:
        """SIGSTOP the worker's process group: it writes nothing more until resumed."""
        os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the worker's process group."""
        os.killpg(self.pid, signal.SIGCONT)

    def log_lines(self, containing: str) -> list[str]:
        """Lines of the worker's log that contain ``containing``."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if containing in line]

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        return "\n".join(text.splitlines()[-lines:])


def worker_pid(worker_id: str | None) -> int | None:
    """The process id inside a runner worker id (``host:pid:suffix``)."""
    try:
        return int((worker_id or "").split(":")[1])
    except (IndexError, ValueError):
        return None
