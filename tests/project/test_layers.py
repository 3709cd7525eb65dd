"""The import rules of docs/architecture.md, and its size rules for classes and folders,
checked on the source.

``checkpoint`` is the lowest layer (errors, the clock, storage, its service targets), ``jobs``
builds on it and ``runner`` on both; ``jobs.testing`` alone sits above ``runner``,
because a whole job run in a test's own process must run the worker's own code, not a
copy of it. Inside ``runner`` the command line (``runner.cli``) drives the engine
(``runner.worker``), and the engine never imports the command line, not even by way of
another module. No module imports inside a function or under ``TYPE_CHECKING`` to dodge
a cycle: the graph of our modules has none. Test machinery (``checkpoint.testing``,
``jobs.testing``) is imported by no module of the production path. Third-party imports
may be deferred (PySpark, azure-identity are optional extras). No class spans
more than :data:`MAX_CLASS_LINES`, no folder holds more than :data:`MAX_FOLDER_MODULES`
modules.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("checkpoint", "jobs", "runner")
#: Each package and what it may import of ours.
MAY_IMPORT = {
    "checkpoint": {"checkpoint"},
    "jobs": {"checkpoint", "jobs"},
    "runner": {"checkpoint", "jobs", "runner"},
}
#: Inside ``runner``: the engine, and the command line that drives it (never the reverse).
ENGINE, COMMAND_LINE = "runner.worker", "runner.cli"
#: Modules above the layer their package is in, and what that adds.
ABOVE_THEIR_PACKAGE = {"jobs.testing": {"runner"}}
#: Imports of ours deferred on purpose, and why (never to break a cycle).
DEFERRED = {
    ("checkpoint.backends", "checkpoint.backends.azure"): "the Azure SDKs load only for Azure",
    ("checkpoint.backends", "checkpoint.backends.embedded"): "likewise sqlite for the embedded",
    ("runner.cli.entry", "runner.cli.commands"): "once no package of the user's hides ours",
    ("runner.cli.dashboard.command", "runner.cli.dashboard.serve"): (
        "Starlette, Jinja2 and uvicorn load for `runner dashboard` only"
    ),
}
#: Test machinery beside the packages it tests: only tests (and these modules) import it;
#: ``runner start`` loads the fault injector by name, for ``RUNNER_FAULTS`` alone
#: (runner.worker.supervisor.storage_faults).
TESTING_TOOLS = ("checkpoint.testing", "jobs.testing")
#: The most lines one class of ours may span, its docstring and comments included: a
#: class past it holds more than one concern, to be split into parts of one each.
MAX_CLASS_LINES = 300
#: The most modules one folder of ours may hold (its ``__init__.py`` not counted): past
#: it "where is X?" has no right first guess, and the folder is split by concept into
#: folders of its own (docs/architecture.md, "Module map"; issue 31).
MAX_FOLDER_MODULES = 24


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(module imported, line, at module level)`` for each import of ours in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from checkpoint import codec`` imports the submodule checkpoint.codec.
            names = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in MODULES
                else node.module
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                found.append((name, node.lineno, id(node) in top_level))
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module):
    allowed = MAY_IMPORT[module.split(".")[0]] | ABOVE_THEIR_PACKAGE.get(module, set())
    upward = [
        f"line {line}: {imported}"
        for imported, line, _ in _imports(MODULES[module])
        if imported.split(".")[0] not in allowed
    ]
    assert not upward, f"{module} imports upward: {upward}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_our_imports_are_at_module_level(module):
    deferred = [
        f"line {line}: {imported}"
        for imported, line, top in _imports(MODULES[module])
        if not top and (module, imported) not in DEFERRED
    ]
    assert not deferred, f"{module} defers imports of ours (a cycle dodged?): {deferred}"


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Each module of ours and the modules of ours it imports."""
    return {
        module: {imported for imported, _, _ in _imports(path) if imported in MODULES}
        for module, path in MODULES.items()
    }


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _within(m, ENGINE)))
def test_the_engine_never_imports_the_command_line(module):
    # Followed through every module of ours on the way, so no third module (in runner,
    # jobs or checkpoint) can carry the command line into the engine.
    graph, seen, trail = _graph(), {module}, {module: [module]}
    todo = [module]
    while todo:
        current = todo.pop()
        for imported in sorted(graph[current] - seen):
            seen.add(imported)
            trail[imported] = trail[current] + [imported]
            todo.append(imported)
    reached = sorted(" -> ".join(trail[m]) for m in seen if _within(m, COMMAND_LINE))
    assert not reached, f"{module} imports the command line: {reached}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_of_the_production_path_imports_the_testing_tools(module):
    if any(_within(module, tools) for tools in TESTING_TOOLS):
        return
    testing = sorted(
        imported
        for imported in _graph()[module]
        if any(_within(imported, tools) for tools in TESTING_TOOLS)
    )
    assert not testing, f"{module} imports test machinery: {testing}"


def test_runner_is_the_engine_and_the_command_line():
    # A third part of runner would be a way round the rule above.
    stray = [
        m
        for m in MODULES
        if _within(m, "runner")
        and m != "runner"
        and not (_within(m, ENGINE) or _within(m, COMMAND_LINE))
    ]
    assert not stray, f"runner modules in neither {ENGINE} nor {COMMAND_LINE}: {stray}"


def _packages_run(module: str, imported: str) -> set[str]:
    """The packages whose ``__init__`` importing ``imported`` runs first, but for
    ``module``'s own (already running when it imports anything)."""
    parts = imported.split(".")
    packages = {".".join(parts[:end]) for end in range(1, len(parts))}
    return {p for p in packages if p in MODULES and not _within(module, p)}


def test_no_module_imports_itself_round_a_cycle():
    # An import runs the __init__ of each package above the module imported: a module
    # outside a package importing one of its modules imports that package's __init__
    # too, and a cycle through it breaks ``import jobs`` (a module outside jobs/spark/
    # importing jobs.spark.session, whose package's __init__ imports that module back).
    graph = {
        module: imported.union(*(_packages_run(module, i) for i in imported))
        for module, imported in _graph().items()
    }
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            cycle = trail[trail.index(module) :] + [module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for imported in sorted(graph[module]):
            # A package's __init__ importing its own modules is not a cycle through them.
            if not module.startswith(imported + ".") and imported != module:
                visit(imported, trail + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def _class_lines(path: Path) -> dict[str, int]:
    """Lines each class in ``path`` spans (nested ones too, by qualified name)."""
    tree = ast.parse(path.read_text(), str(path))
    found = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found[name] = (child.end_lineno or child.lineno) - first + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_class_is_longer_than_the_limit(module):
    too_long = {
        name: lines
        for name, lines in _class_lines(MODULES[module]).items()
        if lines > MAX_CLASS_LINES
    }
    assert not too_long, f"{module}: classes over {MAX_CLASS_LINES} lines: {too_long}"


def test_no_folder_holds_more_modules_than_the_limit():
    by_folder = Counter(
        path.parent.relative_to(ROOT).as_posix()
        for path in MODULES.values()
        if path.name != "__init__.py"
    )
    crowded = {folder: count for folder, count in by_folder.items() if count > MAX_FOLDER_MODULES}
    assert not crowded, f"folders over {MAX_FOLDER_MODULES} modules, to split by concept: {crowded}"


def test_the_rules_see_what_they_check():
    # Guards the checks above against passing vacuously (a parsing slip finding nothing).
    imports = {imported for imported, _, _ in _imports(MODULES["runner.worker.tasks.delivery"])}
    assert {"checkpoint.store", "jobs.job", "runner.worker.leases.lease"} <= imports
    assert len(MODULES) > 40
    assert "checkpoint.testing.faults" in _graph()["checkpoint.testing.injected"]
    # ... and that the engine and the command line are both there, one importing the other.
    assert {"runner.worker.loop", "runner.cli.commands"} <= set(MODULES)
    assert "runner.worker.loop" in _graph()["runner.cli.commands"]
    # and the class sizes, a decorated class counted from its decorator
    sizes = _class_lines(MODULES["runner.worker.leases.lease"])
    assert sizes["Lease"] > 60 and sizes["LeaseKeeper"] > 100
