"""The ``runner`` command run as a user runs it: a subprocess from the user's folder, with
no ``RUNNER_STORAGE`` of ours leaking in, and its one-line errors read back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.processes import ROOT

ENTRY = [sys.executable, "-c", "from runner.cli.entry import main; main()"]


def run_runner(folder: Path, *args: str, path: str = "") -> subprocess.CompletedProcess[str]:
    """``runner *args`` in ``folder``; ``path`` goes on PYTHONPATH before the project."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [path, str(ROOT)]))}
    env.pop("RUNNER_STORAGE", None)
    return subprocess.run(
        [*ENTRY, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``runner: error: ...`` line a failed command printed (exit 1, nothing else)."""
    assert result.returncode == 1, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("runner: error: "), result.stderr
    return lines[0]
