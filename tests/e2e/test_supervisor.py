"""``runner start --workers N``: a dead worker is reported and replaced, none outlives
its parent, and what stops a worker from starting at all is one line, not a restart loop.

Real processes on the embedded store, serving the quickstart job's queue (idle: nothing
is submitted, so the only events are the ones the tests cause).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.processes import ROOT, Worker, descendants, runner_command, wait_until

pytestmark = pytest.mark.e2e

JOB = "samples.quickstart.wordcount:WordCount"


def _start(tmp_path: Path, *options: str, storage: str | None = None) -> Worker:
    log_path = tmp_path / f"supervisor-{len(list(tmp_path.glob('supervisor-*')))}.log"
    env = {**os.environ, "RUNNER_STORAGE": storage or str(tmp_path / "store")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*runner_command(), "start", JOB, "--workers", "2", *options],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Worker("supervisor", process, log_path)


def _workers(supervisor: Worker, count: int) -> list[int]:
    """The worker processes' pids, once ``count`` of them serve."""
    wait_until(
        lambda: supervisor.log().count("serving") >= count,
        f"{count} workers serving",
        explain=supervisor.tail,
    )
    return wait_until(
        lambda: (
            _python_children(supervisor.pid) if len(_python_children(supervisor.pid)) >= 2 else None
        ),
        "2 worker processes",
        explain=supervisor.tail,
    )


def _python_children(pid: int) -> list[int]:
    # The spawn start method may keep a resource tracker beside the workers: only the
    # processes that run a worker count, known by their title (`runner worker-1 QUEUE`).
    return [
        child for child in descendants(pid) if _command_line(child).startswith("runner worker-")
    ]


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


@pytest.fixture
def supervisors():
    started: list[Worker] = []
    yield started
    for supervisor in started:
        supervisor.kill_all()


def test_a_worker_that_dies_is_reported_and_replaced(tmp_path, supervisors):
    supervisor = _start(tmp_path)
    supervisors.append(supervisor)
    first, second = _workers(supervisor, 2)

    os.kill(first, signal.SIGKILL)

    log = wait_until(
        lambda: supervisor.log() if supervisor.log().count("serving") >= 3 else None,
        "a third worker serving",
        explain=supervisor.tail,
    )
    assert re.search(rf"worker-\d \(pid {first}\) died: killed by SIGKILL", log), log
    assert re.search(r"restarting worker-\d", log), log
    workers = _python_children(supervisor.pid)
    assert second in workers and first not in workers and len(workers) == 2
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit() == 0


def test_with_no_restart_a_dead_worker_is_reported_and_its_code_kept(tmp_path, supervisors):
    supervisor = _start(tmp_path, "--no-restart")
    supervisors.append(supervisor)
    first, _ = _workers(supervisor, 2)

    os.kill(first, signal.SIGKILL)
    wait_until(lambda: "died" in supervisor.log(), "the death reported", explain=supervisor.tail)
    supervisor.send(signal.SIGTERM)

    assert supervisor.wait_exit() == 128 + signal.SIGKILL
    assert "restarting" not in supervisor.log() and "restarts in" not in supervisor.log()


def test_a_sigkilled_parent_leaves_no_worker_running(tmp_path, supervisors):
    supervisor = _start(tmp_path)
    supervisors.append(supervisor)
    workers = _workers(supervisor, 2)

    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.process.wait(10)

    wait_until(lambda: all(_gone(pid) for pid in workers), "the workers to stop")
    # They stopped as on SIGTERM: cleanly, each saying so.
    assert supervisor.log().count("stopped (exit 0)") == 2, supervisor.tail()


def test_a_worker_that_cannot_start_stops_all_in_one_line_each(tmp_path, supervisors):
    # An account URL with no credential available: no worker can ever start.
    supervisor = _start(tmp_path, storage="https://nosuchaccount.blob.core.windows.net")
    supervisors.append(supervisor)

    assert supervisor.wait_exit(60) == 1
    log = supervisor.log()
    assert "no usable Azure credential" in log
    assert "cannot run here" in log and "restarts in" not in log
    assert "Traceback" not in log and len(log.splitlines()) <= 8, log
