"""Hold the lines the tests do not run to the list in ``tests/coverage_gaps.txt``.

``make test`` runs this after the suite, on the combined coverage data. Every uncovered
line of ``jobs/``, ``checkpoint/`` and ``runner/`` must be in the list, each group with
a reason. A line is known by its file, the function it sits in and its text, not its
number, so the list survives code moving around it.

- An uncovered line the list does not name fails the run (a new gap: test it, or list
  it with a reason); so does a group with no reason.
- A listed line that is covered now only prints a reminder: shrink the list
  (``--write`` does it).

Usage (from the repository root, after ``coverage combine``)::

    python -m tests.coverage_gaps           # check, and print coverage per package
    python -m tests.coverage_gaps --write   # rewrite the list from this run, keeping
                                            # reasons; new groups get an empty reason
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parents[1]
GAPS_FILE = ROOT / "tests" / "coverage_gaps.txt"
PACKAGES = ("jobs", "checkpoint", "runner")
MODULE = "<module>"
#: How the list names a group: ``path :: function  # reason``.
SEPARATOR = " :: "
HEADER = """\
# Lines of jobs/, checkpoint/ and runner/ that `make test` does not run, and why.
# Checked by tests/coverage_gaps.py at the end of `make test`: an uncovered line missing
# here fails the run; a line listed here that is covered now is only reported, to be
# removed. Each group is `path :: function  # why`, then the uncovered lines' text,
# indented (a line is known by its text, not its number, so edits elsewhere don't
# matter). `python -m tests.coverage_gaps --write` rewrites this file from the last run.
"""


@dataclass(frozen=True, order=True)
class Gap:
    """One uncovered line: where it is and what it says."""

    path: str
    function: str
    text: str


@dataclass
class Group:
    """A header of the list and the lines under it."""

    path: str
    function: str
    reason: str
    lines: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- the code


def functions_by_line(source: str) -> dict[int, str]:
    """Line number -> qualified name of the innermost function or class holding it."""
    owner: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                for line in range(first, (child.end_lineno or child.lineno) + 1):
                    owner[line] = name
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return owner


def source_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


@dataclass
class Measured:
    """What one coverage run found: uncovered lines, and statement counts per package."""

    gaps: list[tuple[Gap, int]] = field(default_factory=list)
    statements: Counter[str] = field(default_factory=Counter)
    missing: Counter[str] = field(default_factory=Counter)


def measure(data_file: Path) -> Measured:
    cov = coverage.Coverage(data_file=str(data_file), config_file=str(ROOT / "pyproject.toml"))
    cov.load()
    found = Measured()
    for path in source_files():
        relative = path.relative_to(ROOT).as_posix()
        _, statements, _, missing, _ = cov.analysis2(str(path))
        package = relative.split("/", 1)[0]
        found.statements[package] += len(statements)
        found.missing[package] += len(missing)
        source = path.read_text()
        lines = source.splitlines()
        owners = functions_by_line(source)
        for number in missing:
            gap = Gap(relative, owners.get(number, MODULE), lines[number - 1].strip())
            found.gaps.append((gap, number))
    return found


# --------------------------------------------------------------------------- the list


def read_list(text: str) -> list[Group]:
    """The groups of a gaps file. Raises ValueError naming a line it cannot read."""
    groups: list[Group] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace():
            if not groups:
                raise ValueError(f"line {number}: a code line before any group header")
            groups[-1].lines.append(line.strip())
            continue
        place, _, reason = line.partition("#")
        path, separator, function = place.strip().partition(SEPARATOR.strip())
        if not separator:
            raise ValueError(f"line {number}: expected 'path :: function  # why', got {line!r}")
        groups.append(Group(path.strip(), function.strip(), reason.strip()))
    return groups


def write_list(groups: Iterable[Group]) -> str:
    out = [HEADER]
    for group in groups:
        reason = f"  # {group.reason}" if group.reason else "  #"
        out.append(f"{group.path}{SEPARATOR}{group.function}{reason}")
        out.extend(f"    {text}" for text in group.lines)
    return "\n".join(out) + "\n"


def listed(groups: Iterable[Group]) -> Counter[Gap]:
    return Counter(Gap(g.path, g.function, text) for g in groups for text in g.lines)


def updated(groups: list[Group], gaps: list[tuple[Gap, int]]) -> list[Group]:
    """The list as this run found it: covered lines dropped, new ones added to their
    function's group (or a new group, reason to be written), in file and line order."""
    left = Counter(gap for gap, _ in gaps)
    kept: list[Group] = []
    for group in groups:
        lines = []
        for text in group.lines:
            gap = Gap(group.path, group.function, text)
            if left[gap] > 0:
                left[gap] -= 1
                lines.append(text)
        kept.append(Group(group.path, group.function, group.reason, lines))
    by_function = {(g.path, g.function): g for g in kept}
    for gap, _ in gaps:
        if left[gap] > 0:
            left[gap] -= 1
            key = (gap.path, gap.function)
            if key not in by_function:
                by_function[key] = Group(gap.path, gap.function, "")
                kept.append(by_function[key])
            by_function[key].lines.append(gap.text)
    first_line = {}
    for gap, number in gaps:
        first_line.setdefault((gap.path, gap.function), number)
    kept = [g for g in kept if g.lines]
    return sorted(kept, key=lambda g: (g.path, first_line.get((g.path, g.function), 0)))


# --------------------------------------------------------------------------- checking


def per_package(found: Measured) -> Iterator[str]:
    for package in PACKAGES:
        total, missing = found.statements[package], found.missing[package]
        share = 100.0 * (total - missing) / total if total else 100.0
        yield f"  {package + '/':12} {share:5.1f} %  ({missing} of {total} lines not run)"


def check(groups: list[Group], found: Measured, name: str = "tests/coverage_gaps.txt") -> int:
    """Print coverage per package and what the list misses; 1 if it misses anything."""
    allowed = listed(groups)
    seen: Counter[Gap] = Counter()
    new = []
    for gap, number in found.gaps:
        seen[gap] += 1
        if seen[gap] > allowed[gap]:
            new.append((gap, number))
    covered = allowed - Counter(gap for gap, _ in found.gaps)
    silent = [g for g in groups if not g.reason and g.lines]
    print("coverage by package:", *per_package(found), sep="\n")
    if covered:
        print(
            f"\ncoverage gaps: {sum(covered.values())} listed line(s) are covered now; "
            f"remove them from {name} "
            "(python -m tests.coverage_gaps --write):"
        )
        for gap in sorted(covered):
            print(f"  {gap.path} {gap.function}: {gap.text}")
    if new:
        print(
            f"\ncoverage gaps: {len(new)} uncovered line(s) not in "
            f"{name}; test them, or list them with a reason "
            "(python -m tests.coverage_gaps --write, then say why):"
        )
        for gap, number in new:
            print(f"  {gap.path}:{number} {gap.function}: {gap.text}")
    for group in silent:
        print(f"\ncoverage gaps: {group.path}{SEPARATOR}{group.function} says no reason")
    if new or silent:
        return 1
    print(f"\ncoverage gaps: every uncovered line is listed ({sum(allowed.values())} in all)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the list from this run")
    parser.add_argument("--data-file", type=Path, default=ROOT / ".coverage")
    parser.add_argument("--gaps-file", type=Path, default=GAPS_FILE)
    args = parser.parse_args(argv)
    if not args.data_file.exists():
        print(f"coverage gaps: no coverage data at {args.data_file} (run `make test`)")
        return 1
    groups = read_list(args.gaps_file.read_text()) if args.gaps_file.exists() else []
    found = measure(args.data_file)
    if args.write:
        args.gaps_file.write_text(write_list(updated(groups, found.gaps)))
        print(f"coverage gaps: wrote {args.gaps_file} ({len(found.gaps)} lines)")
        return 0
    shown = args.gaps_file.resolve()
    if shown.is_relative_to(ROOT):
        shown = shown.relative_to(ROOT)
    return check(groups, found, str(shown))


if __name__ == "__main__":
    sys.exit(main())
