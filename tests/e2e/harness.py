"""The cluster of one end-to-end test: its ``runner`` processes, files and store.

A :class:`Cluster` belongs to one test: it runs ``runner submit|status|poison`` to
completion and ``runner start`` as background
:class:`~tests.e2e.processes.Worker` processes, reads the jobs' event log (see
:mod:`tests.e2e.e2e_jobs`) and the checkpoint store, and on :meth:`Cluster.close` kills
every process it started that is still alive. Waits poll with generous deadlines; a
timeout fails with the workers' log tails and the last events, to show what happened.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from checkpoint.backends import open_storage
from checkpoint.backends.embedded import DATABASE_FILE
from checkpoint.errors import StorageError
from checkpoint.records import TaskRecord
from checkpoint.storage import QueueStore, Storage
from checkpoint.store import CheckpointStore
from tests.e2e.e2e_jobs import EVENTS_FILE, SINK_DIR, TAG_ENV, queue_for
from tests.e2e.processes import (
    DEADLINE_SECONDS,
    ROOT,
    Worker,
    runner_command,
    stopped,
    wait_until,
)

T = TypeVar("T")

JOBS_MODULE = "tests.e2e.e2e_jobs"
#: Workers poll empty queues at least this often (the default 1 s only slows tests).
POLL_MAX_SECONDS = 0.25
#: A `runner submit|status|poison` call should never take this long.
COMMAND_TIMEOUT_SECONDS = 60.0


class Cluster:
    """The processes, files and store of one end-to-end test on one backend.

    Args:
        backend: "embedded" or "azurite".
        storage: the ``--storage`` value.
        workdir: the test's directory: event log, sink, worker logs.
        tag: makes this test's queue names unique on a shared account.
        jobs_module: the module of the jobs :meth:`job` names.
    """

    def __init__(
        self, backend: str, storage: str, workdir: Path, tag: str, jobs_module: str = JOBS_MODULE
    ):
        self.backend = backend
        self.storage = storage
        self.workdir = workdir
        self.tag = tag
        self.jobs_module = jobs_module
        self.workers: list[Worker] = []
        self._opened: Storage | None = None
        self._store: CheckpointStore | None = None

    # ----------------------------------------------------------------- names and files

    def job(self, name: str) -> str:
        """The ``module:Class`` of a test job."""
        return f"{self.jobs_module}:{name}"

    def queue(self, name: str) -> str:
        """The queue of a test job in this test (see ``e2e_jobs.queue_for``)."""
        return queue_for(name, self.tag)

    def params(self, **values: Any) -> dict[str, Any]:
        return {"dir": str(self.workdir), **values}

    def events(self, event: str | None = None, **match: Any) -> list[dict[str, Any]]:
        """Logged events, oldest first, optionally only of one kind with given fields."""
        try:
            text = (self.workdir / EVENTS_FILE).read_text()
        except FileNotFoundError:
            return []
        found = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written right now
            if event is not None and entry["event"] != event:
                continue
            if all(entry.get(key) == value for key, value in match.items()):
                found.append(entry)
        return found

    def sink(self) -> dict[int, str]:
        """The sink: item -> content (which is the item's number, as text)."""
        folder = self.workdir / SINK_DIR
        if not folder.is_dir():
            return {}
        return {
            int(path.name): path.read_text()
            for path in folder.iterdir()
            if not path.name.startswith(".")
        }

    # ----------------------------------------------------------------- storage

    @property
    def store(self) -> CheckpointStore:
        """The checkpoint store, opened in this process (for waiting and checking)."""
        if self._store is None:
            self._opened = open_storage(self.storage, azure_retry_total=1)
            self._store = CheckpointStore(self._opened)
        return self._store

    @property
    def queues(self) -> QueueStore:
        return self.store.storage.queues

    def job_state(self, job_id: str) -> str:
        return self.store.get_job(job_id).state

    def chunk(self, job_id: str, index: int = 0) -> TaskRecord:
        return self.store.get_task(job_id, "chunk", index)

    def progress(self, job_id: str, index: int = 0) -> Any:
        return self.store.value(self.chunk(job_id, index).properties, "progress")

    # ----------------------------------------------------------------- commands

    def env(self) -> dict[str, str]:
        return {**os.environ, TAG_ENV: self.tag, "PYTHONUNBUFFERED": "1"}

    def runner(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``runner ARGS --storage ...`` to completion."""
        command = [*runner_command(), *args, "--storage", self.storage]
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"runner {' '.join(args)} exited {done.returncode}\n"
                f"stdout: {done.stdout}\nstderr: {done.stderr}"
            )
        return done

    def submit(
        self, name: str, params: dict[str, Any], job_id: str | None = None, delay: int = 0
    ) -> str:
        """``runner submit``; returns the job id it printed."""
        args = ["submit", self.job(name), "--params", json.dumps(params)]
        if job_id is not None:
            args += ["--job-id", job_id]
        if delay:
            args += ["--delay", str(delay)]
        printed = self.runner(*args).stdout.strip()
        assert printed and "\n" not in printed, f"submit printed {printed!r}"
        return printed

    def runner_json(self, *args: str) -> Any:
        """``runner ARGS --json``, parsed."""
        return json.loads(self.runner(*args, "--json").stdout)

    def status(self, job_id: str | None = None) -> Any:
        """``runner status [JOB_ID] --json``, parsed."""
        return self.runner_json("status", *([job_id] if job_id else []))

    def start(
        self,
        name: str,
        *options: str,
        burst: bool = True,
        workers: int = 1,
        ready: bool = False,
        env: dict[str, str] | None = None,
        storage: str | None = None,
    ) -> Worker:
        """``runner start`` in the background (``--burst`` unless told otherwise), with
        ``env`` added to its environment and on ``storage`` (default: the cluster's)."""
        label = f"worker-{len(self.workers) + 1}"
        log_path = self.workdir / f"{label}.log"
        command = [
            *runner_command(),
            "start",
            self.job(name),
            "--storage",
            storage or self.storage,
            "--workers",
            str(workers),
            "--poll-max",
            str(POLL_MAX_SECONDS),
            *(["--burst"] if burst else []),
            *options,
        ]
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**self.env(), **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(label, process, log_path)
        self.workers.append(worker)
        if ready:
            worker.wait_ready()
        return worker

    def worker_of(self, pid: int) -> Worker:
        """The started worker whose process (not a child of it) has ``pid``."""
        for worker in self.workers:
            if worker.pid == pid:
                return worker
        raise AssertionError(f"pid {pid} is none of {[w.pid for w in self.workers]}")

    def pause(self, worker: Worker) -> float:
        """SIGSTOP ``worker``; return when it has stopped, with the time it was sent.

        On the embedded backend a process stopped inside a write transaction would hold
        the database's write lock and block every other worker (SQLite's nature, not
        the runner's), which is not what the test is about; so if the store is locked
        once the worker is stopped, it is continued and stopped again a moment later.
        """
        for _ in range(50):
            sent_at = worker.send(signal.SIGSTOP)
            self.wait_until(lambda: stopped(worker.pid), f"{worker.name} to stop", 5)
            if self.backend != "embedded" or self._store_writable():
                return sent_at
            worker.send(signal.SIGCONT)
            time.sleep(0.03)
        raise AssertionError(f"{worker.name} kept stopping while holding the store's lock")

    def _store_writable(self) -> bool:
        connection = sqlite3.connect(Path(self.storage) / DATABASE_FILE, timeout=1.0)
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.rollback()
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            connection.close()

    # ----------------------------------------------------------------- waiting

    def wait_until(
        self,
        predicate: Callable[[], T | None | Literal[False]],
        what: str,
        timeout: float = DEADLINE_SECONDS,
    ) -> T:
        return wait_until(predicate, what, timeout, explain=self.diagnostics)

    def wait_event(
        self, event: str, count: int = 1, timeout: float = DEADLINE_SECONDS, **match: Any
    ) -> list[dict[str, Any]]:
        """Until ``count`` matching events are logged; returns them all."""
        return self.wait_until(
            lambda: (found := self.events(event, **match)) and len(found) >= count and found,
            f"{count} {event!r} event(s) matching {match}",
            timeout,
        )

    def wait_job(
        self, job_id: str, states: tuple[str, ...] = ("done",), timeout: float = DEADLINE_SECONDS
    ) -> str:
        return self.wait_until(
            lambda: (state := self.job_state(job_id)) in states and state,
            f"job {job_id} to be {' or '.join(states)}",
            timeout,
        )

    def diagnostics(self) -> str:
        parts = [worker.tail() for worker in self.workers]
        events = self.workdir / EVENTS_FILE
        if events.is_file():
            last = events.read_text().splitlines()[-25:]
            parts.append("--- last events ---\n" + "\n".join(last))
        return "\n".join(parts)

    # ----------------------------------------------------------------- teardown

    def close(self) -> None:
        """Kill every process this test started that is still alive; close the store."""
        for worker in self.workers:
            worker.kill_all()
        if self._opened is not None:
            self._opened.close()


class ProgressSampler(threading.Thread):
    """Reads a chunk's durable progress every ``interval`` seconds on its own storage
    connection, to check it never goes back."""

    def __init__(self, storage: str, job_id: str, index: int = 0, interval: float = 0.05):
        super().__init__(name="progress-sampler", daemon=True)
        self._storage = storage
        self._job_id = job_id
        self._index = index
        self._interval = interval
        self._stop_event = threading.Event()
        self.samples: list[tuple[float, Any]] = []

    def run(self) -> None:
        opened = open_storage(self._storage, azure_retry_total=1)
        store = CheckpointStore(opened)
        try:
            while not self._stop_event.is_set():
                try:
                    task = store.get_task(self._job_id, "chunk", self._index)
                    progress = store.value(task.properties, "progress")
                except StorageError:
                    pass  # not recorded yet, or a passing fault: the next read will do
                else:
                    self.samples.append((time.time(), progress))
                self._stop_event.wait(self._interval)
        finally:
            opened.close()

    def stop(self) -> list[tuple[float, Any]]:
        self._stop_event.set()
        self.join(10)
        return self.samples
