"""Real ``runner start`` workers on one store, and what their chunks' records show.

A :class:`Rig` runs ``workers`` processes of ``runner start JOB`` (one worker each, its
Prometheus metrics on a free loopback port), submits jobs, and signals its workers
(SIGKILL, SIGSTOP, SIGCONT) by pid. :class:`Attempts` builds each chunk's attempt
history by reading the job's chunk records a few times a second: every attempt as it
appears (its number, owner and ``started_on``, stamped by the worker's clock), so the
figures come from the records, not from log lines. An attempt superseded by a later one
was lost by its owner (its lease ran out, or was refused, before the chunk ended).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from checkpoint.clock import SystemClock
from checkpoint.errors import StorageError
from checkpoint.lease_book import LeaseBook
from checkpoint.retries import SHARING, Budget
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.leases.learned import LearnedLease
from tests import azurite as azurite_process
from tests.e2e.processes import ROOT

ENTRY = [sys.executable, "-c", "from runner.cli.entry import main; main()"]
#: How often the chunk records are read for new attempts (seconds).
POLL_SECONDS = 0.25
#: How long a worker gets to exit after SIGTERM before it is killed.
EXIT_SECONDS = 60.0


@dataclass
class Attempt:
    """One attempt at one chunk, as its record showed it."""

    chunk: int
    number: int
    owner: str | None
    started_on: datetime | None
    state: str
    ended_on: datetime | None = None

    @property
    def pid(self) -> int | None:
        """The pid of the worker that made it (worker ids are ``host:pid:token``)."""
        parts = (self.owner or "").split(":")
        return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


class Attempts(threading.Thread):
    """Each chunk's attempts of one job, read from its chunk records until stopped."""

    def __init__(self, store: CheckpointStore, job_id: str):
        super().__init__(name=f"attempts-{job_id}", daemon=True)
        self._store, self.job_id = store, job_id
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._history: dict[int, list[Attempt]] = {}

    def run(self) -> None:
        while not self._stopped.wait(POLL_SECONDS):
            self.poll()

    def poll(self) -> None:
        try:
            tasks = list(self._store.chunks(self.job_id))
        except StorageError:
            return
        with self._lock:
            for task in tasks:
                if task.attempt < 1:
                    continue
                seen = self._history.setdefault(task.index, [])
                started = task.properties.get("started_on")
                started_on = started if isinstance(started, datetime) else None
                if not seen or seen[-1].number < task.attempt:
                    seen.append(Attempt(task.index, task.attempt, task.owner, started_on, ""))
                last = seen[-1]
                last.state = task.state
                if task.state == "done" and last.ended_on is None:
                    done = task.properties.get("done_on")
                    last.ended_on = done if isinstance(done, datetime) else task.updated_on

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join()
        self.poll()

    def history(self) -> dict[int, list[Attempt]]:
        """A copy: chunk index to its attempts in order."""
        with self._lock:
            return {index: list(seen) for index, seen in self._history.items()}

    def attempts_per_chunk(self) -> list[int]:
        """The highest attempt number of each chunk (a missed attempt counts too)."""
        return [seen[-1].number for _, seen in sorted(self.history().items())]

    def lost_by(self) -> dict[int | None, list[Attempt]]:
        """Attempts superseded by a later one, by the pid of their worker (None: an
        attempt too short to be seen)."""
        lost: dict[int | None, list[Attempt]] = {}
        for seen in self.history().values():
            for before, after in zip(seen, seen[1:], strict=False):
                lost.setdefault(before.pid, []).append(after)
                for _ in range(before.number + 1, after.number):
                    lost.setdefault(None, []).append(after)
        return lost


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    metrics_port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def counter(self, name: str, job_type: str) -> float | None:
        """The worker's ``chunkrunner_<name>_total`` for ``job_type`` (None: no answer)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        pattern = (
            rf'^chunkrunner_{name}_total\{{[^}}]*job_type="{re.escape(job_type)}"[^}}]*\}} (\S+)$'
        )
        found = re.search(pattern, text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0


@dataclass
class Rig:
    """``workers`` ``runner start`` processes serving ``job`` on the store at
    ``location``; ``env``: more environment for them (``RUNNER_FAULTS``)."""

    name: str
    location: str
    storage: Storage
    job: type[ChunkedJob]
    scratch: Path
    env: dict[str, str] = field(default_factory=dict)
    concurrency: int = 1
    workers: list[Worker] = field(default_factory=list)

    @property
    def store(self) -> CheckpointStore:
        return CheckpointStore(self.storage)

    def start(self, count: int) -> None:
        for _ in range(count):
            port = azurite_process.free_port()
            log_path = self.scratch / f"{self.name}-{len(self.workers) + 1}.log"
            with open(log_path, "ab") as out:
                process = subprocess.Popen(
                    [
                        *ENTRY,
                        "start",
                        self.job.job_type(),
                        "--concurrency",
                        str(self.concurrency),
                        "--metrics-port",
                        str(port),
                    ],
                    env={**os.environ, "RUNNER_STORAGE": self.location, **self.env},
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.workers.append(Worker(process, port, log_path))

    def submit(self, params: dict[str, Any]) -> Attempts:
        job_id = submit(self.job, params, storage=self.storage)
        attempts = Attempts(self.store, job_id)
        attempts.start()
        return attempts

    def worker_of(self, pid: int | None) -> Worker | None:
        return next((w for w in self.workers if w.pid == pid), None)

    def signal(self, worker: Worker, signum: signal.Signals) -> None:
        os.kill(worker.pid, signum)

    def learned(self) -> LearnedLease | None:
        """The job type's learned-lease row (None: none yet)."""
        budget = Budget(SHARING, SystemClock())
        row = LeaseBook(self.storage.records).read(self.job.job_type(), budget)
        return None if row is None else LearnedLease.from_record(self.job.job_type(), row)

    def forget(self) -> None:
        """Remove the type's learned-lease row: its next workers start from the floor."""
        LeaseBook(self.storage.records).forget(self.job.job_type(), Budget(SHARING, SystemClock()))

    def wait_done(self, job_id: str, timeout_seconds: float) -> str:
        """The job's state once it ended, or its state at the timeout."""
        deadline = time.monotonic() + timeout_seconds
        state = ""
        while time.monotonic() < deadline:
            try:
                state = self.store.get_job(job_id).state
            except StorageError:
                pass
            if state in ("done", "failed", "cancelled"):
                return state
            time.sleep(0.5)
        return state

    def close(self) -> None:
        """SIGTERM every worker still running (SIGCONT first: one may be stopped), wait."""
        for worker in self.workers:
            if worker.alive():
                worker.process.send_signal(signal.SIGCONT)
                worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.process.wait(timeout=EXIT_SECONDS)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
