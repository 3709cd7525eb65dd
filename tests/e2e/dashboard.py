"""A ``runner dashboard`` process for end-to-end tests: started on a free port, its
address and token read from what it prints, stopped (or killed) at the end."""

from __future__ import annotations

import os
import signal
import subprocess

from tests.e2e.processes import DEADLINE_SECONDS, ROOT, runner_command


class DashboardProcess:
    """``runner dashboard --port 0 --storage STORAGE OPTIONS`` until :meth:`stop`."""

    def __init__(self, storage: str, *options: str, env: dict[str, str] | None = None):
        command = [*runner_command(), "dashboard", "--port", "0", "--storage", storage, *options]
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**environment, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = self._first_lines()
        where = self.lines[0]
        self.url = where.split(" at ")[1].split()[0]
        self.token = next(
            (line.split()[-1] for line in self.lines if line.startswith("action token: ")), None
        )

    def _first_lines(self) -> list[str]:
        assert self.process.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "Ctrl-C stops it":
            line = self.process.stdout.readline()
            if not line:
                out, err = self.process.communicate(timeout=DEADLINE_SECONDS)
                raise AssertionError(f"the dashboard ended at start: {lines} {out} {err}")
            lines.append(line.rstrip("\n"))
        return lines

    def stop(self, number: int = signal.SIGTERM) -> tuple[int, str]:
        """Signal it, wait for it; its exit code and what it wrote on stderr."""
        if self.process.poll() is None:
            self.process.send_signal(number)
        try:
            _, err = self.process.communicate(timeout=DEADLINE_SECONDS)
        finally:
            self.process.kill()
        return self.process.returncode, err
