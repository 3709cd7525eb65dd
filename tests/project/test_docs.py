"""Every example in README.md and docs/*.md runs as written, so the docs keep to the code.

Each fenced block is one test, named by file and the line of its opening fence
(``docs/cli.md:88``). The conventions a writer follows (summed up in README.md, "Develop"):

- ``python``: run in this process. The blocks of one document share one namespace and
  run in order; a block's test run alone (``-k``) first runs the blocks before it. A
  block whose first line is ``# name.py`` is a *module*: written to ``name.py`` (with the
  document's line numbers) and imported into the namespace (``from name import *``).
  Every module of every document is written into each document's folder before its
  first block runs, so one document may use another's as its prose says (cli.md runs
  ``squares.py`` of README.md and ``orders.py`` of writing-jobs.md); a name is defined
  once. A module named ``test_*.py`` is run with pytest instead, and must pass.
- ``console``: a line starting with ``$`` is a command, run by bash on its own (shell
  variables do not carry over: write a script as an ``sh`` block). The lines after a
  command are its output: what it wrote to stdout, then to stderr (logs, errors), each
  whole, so that worker processes writing at once cannot make one run differ from the
  next. Output is compared loosely: whitespace is normalised, ``...`` stands for any
  text (doctest's ELLIPSIS), and generated job ids, ISO times and worker ids match any
  such value. A command shown without output is run, not compared.
- ``sh`` / ``bash`` / ``shell``: the whole block is one bash script (``set -euo
  pipefail``).
- A console or shell block runs only if it holds a ``runner`` command, and each
  ``runner start`` in it needs ``--burst``: no test waits for a worker serving forever.
  Every command must exit 0.
- ``text``, ``json``, ``mermaid`` and unlabelled blocks are shown, not run; one that
  starts with ``$`` is a console session under the wrong label, and fails.
- Markers, an HTML comment on the line right before the fence (readers do not see it),
  each with its reason in parentheses:
  ``<!-- docs-test: skip (why) -->``: not run (a Python block is still compiled);
  ``<!-- docs-test: exit N (why) -->``: the block's last command must exit N.
  A block that fits none of the above (a shell block with no ``runner`` command, another
  language), a marker with no reason, an unknown marker, or a marker not followed by a
  fence fails: nothing is left untested without saying why.

Every document runs in a fresh folder of its own, its working directory and ``HOME``
(``TMPDIR`` inside it), with ``RUNNER_STORAGE`` the embedded store ``./.runner`` there;
``runner`` and ``python`` on ``PATH`` are this interpreter's, this checkout first on
``PYTHONPATH``, and other ``RUNNER_*`` variables are dropped. Nothing is written outside
the test's temporary folders.

Sybil and pytest-examples were weighed: both run Python blocks well, but neither runs
shell sessions against a CLI nor refuses an unmarked block, and Sybil collects the
Markdown files themselves (outside ``tests/``), so this module (and
``tests/project/docs_blocks.py``, which parses and classifies the blocks) does it instead.
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.processes import descendants
from tests.project.docs_blocks import BLOCKS, MODULES, PYTHON, ROOT, TESTED, Block, parse, session

#: One block's commands may take this long; the whole module takes a few seconds.
BLOCK_TIMEOUT_SECONDS = 60

#: Values that differ on every run, matched by kind: generated job ids, ISO 8601 times,
#: worker ids (host:pid:4 hex).
_VOLATILE = [
    (re.compile(r"\b[a-z0-9]+(?:-[a-z0-9]+)*-\d{8}-\d{6}-[0-9a-f]{6}\b"), "<job-id>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?"), "<time>"),
    (re.compile(r"\b[\w.-]+:\d+:[0-9a-f]{4}\b"), "<worker>"),
]


@dataclass
class DocumentRun:
    """One document's folder, namespace and progress through its blocks."""

    directory: Path
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__docs__"})
    done: int = 0
    failed: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.directory),
            "TMPDIR": str(self.directory / "tmp"),
            "RUNNER_STORAGE": str(self.directory / ".runner"),
        }


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``runner`` (the console script's entry point, ``runner.cli.commands:main``) and ``python``,
    both of this interpreter."""
    folder = tmp_path_factory.mktemp("docs-bin")
    main = "import sys; from runner.cli.commands import main; sys.argv[0] = 'runner'; main()"
    scripts = {
        "runner": f'exec {shlex.quote(sys.executable)} -c {shlex.quote(main)} "$@"',
        "python": f'exec {shlex.quote(sys.executable)} "$@"',
    }
    for name, line in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{line}\n")
        (folder / name).chmod(0o755)
    return folder


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, DocumentRun]:
    """A :class:`DocumentRun` per document, made when its first block is tested."""

    class Runs(dict[Path, DocumentRun]):
        def __missing__(self, doc: Path) -> DocumentRun:
            directory = tmp_path_factory.mktemp(doc.stem)
            (directory / "tmp").mkdir()
            for name, block in MODULES.items():
                # Padded so that the file's line numbers are the document's.
                (directory / f"{name}.py").write_text("\n" * block.line + block.text)
            for name in MODULES:
                sys.modules.pop(name, None)  # another document's copy
            self[doc] = DocumentRun(directory)
            return self[doc]

    return Runs()


@pytest.mark.parametrize("block", TESTED, ids=[block.name for block in TESTED])
def test_block(
    block: Block,
    runs: dict[Path, DocumentRun],
    bin_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if block.problem:
        pytest.fail(f"{block.name}: {block.problem}", pytrace=False)
    run = runs[block.doc]
    blocks = [found for found in BLOCKS if found.doc == block.doc]
    position = blocks.index(block)
    _environment(monkeypatch, run)
    _catch_up(blocks, position, run, bin_dir)
    if block.skip:
        _compile(block)
        pytest.skip(f"{block.name}: {block.skip}")
    if run.done == position:
        _run_own(blocks, run, bin_dir)


def _catch_up(blocks: list[Block], position: int, run: DocumentRun, bin_dir: Path) -> None:
    """Run the blocks before ``position`` that have not run (this test runs alone, -k);
    their failures are their own tests' (named by a later failure, see _run_own)."""
    while run.done < position:
        try:
            _run_next(blocks, run, bin_dir)
        except (Exception, pytest.fail.Exception):
            pass


def _run_own(blocks: list[Block], run: DocumentRun, bin_dir: Path) -> None:
    """Run the next block; if it fails after an earlier one did, say which did."""
    earlier = ", ".join(run.failed)
    try:
        _run_next(blocks, run, bin_dir)
    except pytest.fail.Exception as failure:
        if not earlier:
            raise
        pytest.fail(f"{failure.msg}\n(before it, {earlier} failed)", pytrace=False)
    except Exception as error:
        if earlier:
            error.add_note(f"(before it, {earlier} failed)")
        raise


def _environment(monkeypatch: pytest.MonkeyPatch, run: DocumentRun) -> None:
    """The document's folder, store and HOME for Python blocks run in this process."""
    monkeypatch.chdir(run.directory)
    monkeypatch.syspath_prepend(str(run.directory))
    for name, value in run.env.items():
        monkeypatch.setenv(name, value)


def _run_next(blocks: list[Block], run: DocumentRun, bin_dir: Path) -> None:
    block = blocks[run.done]
    run.done += 1
    if block.skip or block.problem or block.kind == "shown":
        return
    try:
        RUNNERS[block.kind](block, run, bin_dir)
    except BaseException:
        run.failed.append(block.name)
        raise


def _compile(block: Block) -> Any:
    """The block's code, compiled with the document's name and line numbers."""
    if block.lang not in PYTHON:
        return None
    return compile("\n" * block.line + block.text, str(block.doc), "exec")


def _run_python(block: Block, run: DocumentRun, bin_dir: Path) -> None:
    exec(_compile(block), run.namespace)


def _run_module(block: Block, run: DocumentRun, bin_dir: Path) -> None:
    assert block.module is not None
    sys.modules.pop(block.module, None)
    importlib.invalidate_caches()
    module = importlib.import_module(block.module)
    assert Path(module.__file__ or "").parent == run.directory, module.__file__
    run.namespace.update({k: v for k, v in vars(module).items() if not k.startswith("_")})


def _run_test_module(block: Block, run: DocumentRun, bin_dir: Path) -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    code, output = _shell(run, bin_dir, shlex.join([*command, f"{block.module}.py"]))
    if code != 0:
        pytest.fail(f"{block.name}: its tests failed:\n{output}", pytrace=False)


def _run_shell(block: Block, run: DocumentRun, bin_dir: Path) -> None:
    code, output = _shell(run, bin_dir, block.text)
    if code != block.exit_code:
        pytest.fail(
            f"{block.name}: exit {code}, expected {block.exit_code}; output:\n{output}",
            pytrace=False,
        )


def _run_console(block: Block, run: DocumentRun, bin_dir: Path) -> None:
    commands = session(block)
    for number, (command, want) in enumerate(commands):
        code, output = _shell(run, bin_dir, command, merge=False)
        expected = block.exit_code if number == len(commands) - 1 else 0
        if code != expected:
            pytest.fail(
                f"{block.name}: `{command}` exited {code}, expected {expected}; output:\n{output}",
                pytrace=False,
            )
        _compare(block, command, "\n".join(want), output)


def _compare(block: Block, command: str, want: str, got: str) -> None:
    if not want.strip():
        return
    # Whitespace next to "..." is part of what it stands for: a shown "...\nline" must
    # also match output that starts with "line".
    pattern = re.sub(r"\s*\.\.\.\s*", "...", _steady(want))
    if not doctest.OutputChecker().check_output(pattern, _steady(got), doctest.ELLIPSIS):
        pytest.fail(
            f"{block.name}: `{command}` printed\n{got}\nwhich does not match the document's\n"
            f"{want}",
            pytrace=False,
        )


def _steady(text: str) -> str:
    """``text`` with its volatile values replaced and its whitespace made single spaces."""
    for pattern, placeholder in _VOLATILE:
        text = pattern.sub(placeholder, text)
    return " ".join(text.split())


def _shell(run: DocumentRun, bin_dir: Path, script: str, merge: bool = True) -> tuple[int, str]:
    """Run ``script`` in bash, in the document's folder and environment; return its exit
    status and output: stdout and stderr as written (``merge``), else stdout whole, then
    stderr whole."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")},
        **run.env,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "COLUMNS": "80",
    }
    process = subprocess.Popen(
        ["bash", "-c", f"set -euo pipefail\n{script}"],
        cwd=run.directory,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge else subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        _kill_all(process.pid)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"`{script.strip()}` still ran after {BLOCK_TIMEOUT_SECONDS} s; output:\n"
            f"{stdout}{stderr or ''}",
            pytrace=False,
        )
    return process.returncode, stdout + (stderr or "")


def _kill_all(pid: int) -> None:
    # Worker processes of `runner start --workers N` run in sessions of their own.
    for child in [*descendants(pid), pid]:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


RUNNERS = {
    "python": _run_python,
    "module": _run_module,
    "test-module": _run_test_module,
    "console": _run_console,
    "shell": _run_shell,
}


def test_unmarked_or_mismarked_blocks_are_refused(tmp_path: Path) -> None:
    # Given a document with one block of each kind the test must not let through
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```sh\nmake test\n```\n"  # no runner command, no marker
        "```console\n$ runner start m:J --workers 2\n```\n"  # would serve forever
        "```text\n$ runner status\n```\n"  # a session labelled text
        "```toml\n[x]\n```\n"  # neither run nor shown
        "<!-- docs-test: skip -->\n```sh\nmake\n```\n"  # a skip without a reason
        "<!-- docs-test: exit 1 (why) -->\n```python\npass\n```\n"  # exit is for shells
        "<!-- docs-test: skip (why) -->\n\n```sh\nmake\n```\n"  # marker not on the fence
        "<!-- docs-test: skip (make targets) -->\n```sh\nmake test\n```\n"  # fine
        "```console\n$ runner --help\nUsage: ...\n```\n"  # fine: run, output compared
    )

    # When it is parsed
    blocks = parse(doc)

    # Then every block but the last two fails with its reason, the stray marker too
    problems = [(block.line, block.problem) for block in blocks if block.problem]
    assert [line for line, _ in problems] == [1, 4, 7, 10, 14, 18, 21, 23]
    assert all(problem for _, problem in problems)
    assert [block.kind for block in blocks if not block.problem] == ["shell", "console"]
    assert blocks[-2].skip == "make targets"
