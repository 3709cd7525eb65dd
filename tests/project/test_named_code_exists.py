"""Every piece of our code that a docstring, a comment or a document names exists.

Modules are renamed and functions moved; the prose that names them is not checked by
anything else, so it goes stale (``runner.completion`` was cited a while after it became
``runner.worker.tasks.job_completion``). This test reads the docstrings and comments of
``jobs/``, ``checkpoint/``, ``runner/`` and ``samples/``, and the documents whole
(README.md, docs/*.md, the others at the top but CHANGELOG.md, the samples'), and checks:

- every dotted name that starts with one of our packages (``runner.worker.leases.lease``,
  ``checkpoint.store.CheckpointStore.count_chunks``, ``jobs.Chunk``) resolves: each
  leading part is a module of ours (its file exists), the rest are names defined in it
  (a def, a class, an assignment, an import), then members of that class (its body, its
  bases of ours, ``self.name = ...`` in its methods);
- every path of this checkout (``runner/worker/leases/lease.py``, ``../checkpoint/layout.py``,
  ``tests/e2e``) exists.

It reads the code, never imports it (no side effects; about a second). A name it
cannot follow (a member of a class based on someone else's, or of a module-level value)
is taken as it stands: the test misses such a slip rather than report a false one.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jobs", "checkpoint", "runner")
#: First folders of the paths checked (as written from the checkout's root).
FOLDERS = (*PACKAGES, "samples", "tests", "docs")

#: ``runner.worker.leases.lease``, not within a longer dotted name, path or URL.
DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)")
#: ``runner/worker/leases/lease.py``, ``../docs/cli.md``, ``tests/e2e``; not within a URL (the
#: dashboard's ``/jobs/JOB_ID``) or a longer path.
PATH = re.compile(rf"(?<![\w./-])(?:\.\./)*((?:{'|'.join(FOLDERS)})/[\w./-]*\w)")

#: Tokens after which a string starts a statement of its own (a docstring).
STATEMENT_START = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)


@dataclass(frozen=True)
class Mention:
    """A name or path written at ``where`` (``file:line``)."""

    where: str
    text: str


def mentions(text: str, where: str) -> Iterator[Mention]:
    """The dotted names and paths of our code in ``text``."""
    for pattern in (DOTTED, PATH):
        for match in pattern.finditer(text):
            yield Mention(where, match.group(1))


def prose_of_module(source: str) -> Iterator[tuple[int, str]]:
    """The docstrings (a string that is a statement of its own) and comments of Python
    ``source``, with their first lines. Tokens, not the syntax tree: one pass, and
    comments are not in the tree."""
    before = tokenize.NEWLINE  # the kind of the last token that was not a line break
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
        elif token.type == tokenize.STRING and before in STATEMENT_START:
            yield token.start[0], token.string
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            before = token.type


def documents() -> list[Path]:
    """README.md, docs/*.md, the other documents at the top and the samples'. Not
    CHANGELOG.md: it tells of names as they were."""
    top = [path for path in sorted(ROOT.glob("*.md")) if path.name != "CHANGELOG.md"]
    return [*top, *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("samples/**/*.md"))]


def every_mention() -> Iterator[Mention]:
    for package in (*PACKAGES, "samples"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, text in prose_of_module(path.read_text(encoding="utf-8")):
                yield from mentions(text, f"{path.relative_to(ROOT)}:{line}")
    for path in documents():
        for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            yield from mentions(text, f"{path.relative_to(ROOT)}:{line}")


# ------------------------------------------------------------------- resolving


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def module_file(dotted: str, root: Path = ROOT) -> Path | None:
    """The file of our module ``dotted`` (a package's ``__init__.py``), or None."""
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a module or class body, into ``if`` and ``try`` blocks."""
    for node in body:
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level(block)
            for handler in node.handlers:
                yield from _top_level(handler.body)
        else:
            yield node


def _bound(node: ast.stmt) -> Iterator[str]:
    """The names a statement binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.Assign):
        for target in node.targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    yield name.id
    elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
        yield node.target.id
    elif isinstance(node, ast.Import | ast.ImportFrom):
        for alias in node.names:
            yield alias.asname or alias.name.split(".")[0]


def _definition(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The last statement of ``body`` that binds ``name``."""
    found = None
    for node in _top_level(body):
        if name in _bound(node):
            found = node
    return found


def resolves(dotted: str, root: Path = ROOT) -> bool:
    """Whether ``dotted`` names a module of ours, or something defined in one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]), root)
        if path is not None:
            return _in_module(path, parts[:cut], parts[cut:], root)
    return False


def _in_module(path: Path, module: list[str], rest: list[str], root: Path) -> bool:
    if not rest:
        return True
    node = _definition(_tree(path).body, rest[0])
    if node is None:
        return False
    if isinstance(node, ast.ImportFrom):
        return _imported(node, module, path, rest, root)
    if isinstance(node, ast.ClassDef):
        return _in_class(node, path, module, rest[1:], root)
    return True  # a value or a function: its members are not followed


def _imported(
    node: ast.ImportFrom, module: list[str], path: Path, rest: list[str], root: Path
) -> bool:
    """Follow ``from x import name`` into our module ``x`` (relative or absolute)."""
    if node.level:
        package = module if path.name == "__init__.py" else module[:-1]
        source = [*package[: len(package) - node.level + 1], *(node.module or "").split(".")]
        source = [part for part in source if part]
    else:
        source = (node.module or "").split(".")
    if source[0] not in PACKAGES:
        return True  # someone else's: not followed
    name = next(a.name for a in node.names if (a.asname or a.name) == rest[0])
    return resolves(".".join([*source, name, *rest[1:]]), root)


def _in_class(
    node: ast.ClassDef, path: Path, module: list[str], rest: list[str], root: Path
) -> bool:
    if not rest:
        return True
    member = rest[0]
    if _definition(node.body, member) is not None:
        return len(rest) == 1 or _member_of_member(node, path, module, rest, root)
    for method in node.body:
        if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            for target in ast.walk(method):
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.ctx, ast.Store)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    and target.attr == member
                ):
                    return True
    for base in node.bases:
        if not isinstance(base, ast.Name):
            return True  # Generic[...], a dotted base: not followed
        definition = _definition(_tree(path).body, base.id)
        if definition is None:
            return True  # a builtin (Exception, ...)
        if isinstance(definition, ast.ClassDef):
            if _in_class(definition, path, module, rest, root):
                return True
        elif _in_module(path, module, [base.id, *rest], root):
            return True
    return False


def _member_of_member(
    node: ast.ClassDef, path: Path, module: list[str], rest: list[str], root: Path
) -> bool:
    inner = _definition(node.body, rest[0])
    if isinstance(inner, ast.ClassDef):
        return _in_class(inner, path, module, rest[1:], root)
    return True


def path_exists(written: str, root: Path = ROOT) -> bool:
    return (root / written.rstrip("./")).exists()


def stale(found: list[Mention], root: Path = ROOT) -> list[str]:
    """``file:line: name`` of each mention that names nothing."""
    return [
        f"{mention.where}: {mention.text}"
        for mention in found
        if not (path_exists if "/" in mention.text else resolves)(mention.text, root)
    ]


# ------------------------------------------------------------------- tests


def test_every_name_and_path_of_our_code_in_the_prose_exists():
    found = list(every_mention())
    assert len(found) > 600  # the scan reads what it should (about 720)
    assert stale(found) == []


def test_the_scanner_finds_and_refuses_a_name_that_is_gone():
    text = """Marks the chunk done (:meth:`~checkpoint.store.CheckpointStore.count_chunks`),
    then checks completion (:mod:`runner.completion`) as runner.worker.tasks.outcome.nothing
    does; see runner/worker/leases/lease.py and `checkpoint/gone.py`, and the route
    /jobs/JOB_ID and https://example.com/runner/x.py, not ours."""
    found = list(mentions(text, "sample:1"))
    assert [m.text for m in found] == [
        "checkpoint.store.CheckpointStore.count_chunks",
        "runner.completion",
        "runner.worker.tasks.outcome.nothing",
        "runner/worker/leases/lease.py",
        "checkpoint/gone.py",
    ]
    assert stale(found) == [
        "sample:1: runner.completion",
        "sample:1: runner.worker.tasks.outcome.nothing",
        "sample:1: checkpoint/gone.py",
    ]


def test_members_resolve_through_imports_classes_and_their_bases():
    assert resolves("jobs.ChunkedJob.split")  # re-exported by jobs/__init__.py
    assert resolves("runner.worker.tasks.chunk_finisher.Finisher._pending")  # self._pending = ...
    assert resolves("checkpoint.records.JobRecord.total")  # a dataclass field
    assert resolves("checkpoint.errors.LeaseLost")
    assert not resolves("jobs.ChunkedJob.no_such_hook")
    assert not resolves("runner.worker.tasks.chunk_finisher.Finisher.no_such_method")
    assert not resolves("checkpoint.no_such_module")
