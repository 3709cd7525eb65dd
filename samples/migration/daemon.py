"""One daemon process of the loopback cluster, leader of its own process group.

Started with ``start_new_session=True``, so its process group holds it and every child
it starts (a Spark worker's executors): signals go to the whole group, and
:func:`group_pids` finds what is left of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

#: SIGTERM, then this long, then SIGKILL.
STOP_TIMEOUT_SECONDS = 15.0
LOG_TAIL_LINES = 25


@dataclass
class Daemon:
    """One JVM daemon, leader of its own process group (its children are in it too)."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (the JVM and every child, e.g. executors)."""
        _signal_group(self.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT_SECONDS)

    def stop(self) -> None:
        """SIGTERM the group, wait up to :data:`STOP_TIMEOUT_SECONDS`, then SIGKILL it."""
        if self.alive():
            _signal_group(self.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        # Even once the leader is gone, children it left (executors) may still run.
        self.kill()

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, read from ``/proc``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found
