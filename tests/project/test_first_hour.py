"""What a newcomer meets first: the README's first screen says how to install from a
clone, no document offers a ``pip install`` of a distribution that is not published, and
``make help`` lists every target the Makefile has."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What a terminal shows of the README before the reader scrolls.
FIRST_SCREEN_LINES = 30


def _phony_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    found = re.findall(r"^\.PHONY:(.*)$", text, flags=re.MULTILINE)
    assert found, "the Makefile declares no .PHONY targets"
    return {name for line in found for name in line.split()}


def test_make_help_names_every_phony_target() -> None:
    shown = subprocess.run(
        ["make", "--no-print-directory", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    named = set(re.findall(r"\bmake ([a-z][a-z-]*)", shown))
    missing = _phony_targets() - named - {"help"}
    assert not missing, f"`make help` does not name: {sorted(missing)}"


def test_readme_first_screen_says_how_to_install_from_a_clone() -> None:
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN_LINES])
    assert "make venv" in first_screen
    # What it installs, and how to reach the command it installs.
    assert ".venv" in first_screen
    assert "editable" in first_screen
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for extra in extras["optional-dependencies"]:
        assert extra in first_screen, f"the README's first screen does not name {extra!r}"
    assert ".venv/bin/runner" in first_screen or ".venv/bin/activate" in first_screen


def test_no_document_installs_an_unpublished_distribution() -> None:
    documents = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    documents += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "samples").rglob("*.md"))
    sources = [*(ROOT / "jobs").rglob("*.py"), *(ROOT / "checkpoint").rglob("*.py")]
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in documents + sources
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"pip install ['\"]?chunkrunner", line)
    ]
    assert not offenders, f"`pip install chunkrunner` finds no distribution: {offenders}"
