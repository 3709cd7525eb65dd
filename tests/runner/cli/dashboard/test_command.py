"""``runner dashboard`` as an extra (runner/cli/dashboard/command.py): without Starlette,
Jinja2 and uvicorn it says so in one line and exits 2, and no other command loads them
or the dashboard's server."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import runner.cli.dashboard
from checkpoint.backends import open_storage
from runner.cli.commands import main
from runner.cli.dashboard.command import EXTRA_PACKAGES, MISSING_EXTRA
from tests.e2e.processes import ROOT

#: What the ``runner`` group loads of the dashboard to register its command.
REGISTERED = {"runner.cli.dashboard", "runner.cli.dashboard.command"}
#: ``runner ARGS`` as the console script runs it, with ``sys.argv[1]`` (a comma-separated
#: list, may be empty) made unimportable first, writing the modules it loaded, once it
#: exits, to the file named by ``sys.argv[2]``.
PROBE = (
    "import atexit, sys\n"
    "blocked, out = sys.argv.pop(1), sys.argv.pop(1)\n"
    "sys.modules.update(dict.fromkeys(filter(None, blocked.split(',')), None))\n"
    "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "from runner.cli.entry import main\n"
    "main()\n"
)


def _run(folder: Path, blocked: tuple[str, ...], *args: str) -> tuple[int, str, set[str]]:
    """``runner *args`` in a subprocess: its exit code, stderr and the modules it loaded."""
    loaded = folder / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(blocked), str(loaded), *args],
        cwd=folder,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stderr, set(loaded.read_text().split())


def _without_the_server(monkeypatch: pytest.MonkeyPatch, *unimportable: str) -> None:
    """This process as if the dashboard's server had never been imported, and the
    modules named could not be."""
    for name in [m for m in sys.modules if m.startswith("runner.cli.dashboard.")]:
        if name not in REGISTERED:
            monkeypatch.delitem(sys.modules, name)
            monkeypatch.delattr(runner.cli.dashboard, name.rsplit(".", 1)[1], raising=False)
    for name in unimportable:
        monkeypatch.setitem(sys.modules, name, None)


def _main_exit(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["runner", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    assert isinstance(exited.value.code, int)
    return exited.value.code


@pytest.mark.parametrize("package", EXTRA_PACKAGES)
def test_without_the_extra_the_dashboard_says_so_in_one_line(
    package, tmp_path, monkeypatch, capsys
):
    # Given an install without one of the extra's packages
    _without_the_server(monkeypatch, package)
    # When the dashboard is asked for
    code = _main_exit(monkeypatch, "dashboard", "--storage", str(tmp_path / "store"))
    # Then one line says which extra it needs and how to install it, and exit 2
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        "runner: error: " + MISSING_EXTRA.format(module=package)
    ]
    assert "pip install -e '.[dashboard]'" in MISSING_EXTRA
    assert not (tmp_path / "store").exists()  # nothing done before the server loaded


def test_a_module_of_ours_missing_is_not_called_a_missing_extra(monkeypatch, capsys):
    # A broken install of chunkrunner itself: reported as the unexpected error it is
    _without_the_server(monkeypatch, "runner.cli.dashboard.views")
    assert _main_exit(monkeypatch, "dashboard") == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("runner: error: unexpected ModuleNotFoundError")
    assert "extra" not in line


def test_the_missing_extra_shows_its_traceback_only_at_debug_level(tmp_path):
    code, stderr, _ = _run(tmp_path, ("starlette",), "--log-level", "debug", "dashboard")
    assert code == 2
    assert "Traceback (most recent call last)" in stderr
    assert stderr.splitlines()[-1] == "runner: error: " + MISSING_EXTRA.format(module="starlette")


def _store(tmp_path: Path) -> str:
    with open_storage(str(tmp_path / "store")):
        return str(tmp_path / "store")


def test_the_extra_is_what_pyproject_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> list[str]:
        return [re.split(r"[<>=~!\[ ;]", r, maxsplit=1)[0].lower() for r in requirements]

    assert names(project["optional-dependencies"]["dashboard"]) == list(EXTRA_PACKAGES)
    assert not set(names(project["dependencies"])) & set(EXTRA_PACKAGES)


def test_no_other_command_loads_the_dashboard_or_its_extra(tmp_path):
    # Given the extra installed (nothing blocked), when `runner status` runs
    code, stderr, loaded = _run(tmp_path, (), "status", "--storage", _store(tmp_path))
    assert code == 0, stderr
    # Then the group loaded the dashboard's command to list it, and nothing else of it
    assert "runner.cli.commands" in loaded
    assert {m for m in loaded if m.startswith("runner.cli.dashboard")} == REGISTERED
    assert not {m for m in loaded if m.split(".")[0] in EXTRA_PACKAGES}


def test_other_commands_run_without_the_extra(tmp_path):
    # With the extra's packages unimportable, `runner status` and `check` still run
    store = _store(tmp_path)
    for args in (("status",), ("check",)):
        code, stderr, _ = _run(tmp_path, EXTRA_PACKAGES, *args, "--storage", store)
        assert code == 0, stderr
