"""Real processes for end-to-end tests: ``runner`` commands, and patient waiting.

A :class:`Worker` is one background ``runner start`` process in a session of its own,
its output in a log file; :meth:`Worker.kill_all` kills it and everything it started.
:func:`wait_until` polls a condition with a generous deadline and, on timeout, fails
with whatever explanation the caller gives (worker log tails, the last events).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
#: Default bound of one wait; far above what any step takes on a busy 2-core machine,
#: with three other xdist workers and a Spark module beside it (a step seen at 30 s
#: there). A wait that is met ends at once: the bound costs only a failing test.
DEADLINE_SECONDS = 90.0


def runner_command() -> list[str]:
    """The ``runner`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "runner"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from runner.cli.entry import main; main()"]


def wait_until(
    predicate: Callable[[], T | None | Literal[False]],
    what: str,
    timeout: float = DEADLINE_SECONDS,
    interval: float = 0.1,
    explain: Callable[[], str] = lambda: "",
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{explain()}")
        time.sleep(interval)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (Linux /proc), children first."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces; fields after its ')' are plain.
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found.extend(children)
        frontier.extend(children)
    return found


def stopped(pid: int) -> bool:
    """True once every thread of ``pid`` is stopped (by SIGSTOP)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks]
    except (OSError, IndexError):
        return False
    return all(state in ("T", "t") for state in states)


class Worker:
    """One ``runner start`` process (a supervisor when ``--workers`` > 1)."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], log_path: Path):
        self.name = name
        self.process = process
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, number: int) -> float:
        """Send signal ``number``; return the wall-clock time it was sent."""
        sent_at = time.time()
        os.kill(self.pid, number)
        return sent_at

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = DEADLINE_SECONDS) -> None:
        """Until the worker serves its queues (it logs ``serving`` after its setup)."""
        wait_until(
            lambda: "serving" in self.log() or not self.alive(),
            f"{self.name} to start serving",
            timeout,
            explain=self.tail,
        )
        assert self.alive(), f"{self.name} exited at start\n{self.tail()}"

    def wait_exit(self, timeout: float = DEADLINE_SECONDS) -> int:
        """Its exit code, once it has exited (fails after ``timeout``)."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} (pid {self.pid}) still running after {timeout:g} s\n{self.tail()}"
            ) from None

    def kill_all(self) -> None:
        """SIGKILL this process and everything it started (idempotent)."""
        if not self.alive():
            return
        for pid in [*descendants(self.pid), self.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)

    def tail(self, lines: int = 40) -> str:
        text = "\n".join(self.log().splitlines()[-lines:])
        return f"--- {self.name} (pid {self.pid}, exit {self.process.poll()}) ---\n{text}"
