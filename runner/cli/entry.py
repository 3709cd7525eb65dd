"""The ``runner`` console script: checks that our packages are ours, then runs the CLI.

A user's ``jobs/__init__.py`` (a common folder name for batch jobs) found before ours on
the import path would make every import of chunkrunner fail with a traceback that
points nowhere near the cause. This module imports only the standard library until it
has checked, so the clash is reported in one line instead.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: The top-level packages chunkrunner installs (``runner`` holds this module).
OUR_PACKAGES = ("jobs", "checkpoint", "runner")
#: The directory holding them: this file is runner/cli/entry.py in it.
_OUR_ROOT = Path(__file__).resolve().parents[2]


def hidden_package() -> str | None:
    """Why chunkrunner cannot run here, if a module of the user's hides one of our
    packages; else None."""
    for top in OUR_PACKAGES:
        spec = importlib.util.find_spec(top)
        origin = spec.origin if spec is not None else None
        if origin is None or Path(origin).resolve().parent.parent != _OUR_ROOT:
            return (
                f"{origin or top} hides chunkrunner's own {top!r} package; rename yours "
                f"(e.g. 'batch_{top}') or run from another directory"
            )
    return None


def main() -> None:
    problem = hidden_package()
    if problem is not None:
        print(f"runner: error: {problem}", file=sys.stderr)
        sys.exit(1)
    from runner.cli.commands import main as cli_main  # only now that `jobs` is known to be ours

    cli_main()
