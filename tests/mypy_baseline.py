"""``python -m tests.mypy_baseline``: mypy over ``tests/`` and ``samples/``, held to a
baseline that may only shrink.

The packages are checked strictly by ``make typecheck`` and must be clean. The tests and
samples are checked too (every function body, pyproject.toml's override for them only
lets a test function go unannotated), but were written before they were: the errors
still in them are counted per file in ``tests/mypy_baseline.txt``. A file with more
errors than its count there fails the check; a file with fewer is reported, to lower
its count (``--write`` rewrites the list from this run), so the list only shrinks.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "mypy_baseline.txt"
CHECKED = ["tests", "samples"]
_ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: ")
_HEADER = (
    "# mypy errors still in each file of tests/ and samples/ (python -m tests.mypy_baseline).\n"
    "# A file may have at most this many; lower a count when you fix one (--write).\n"
)


def count_errors(report: str) -> Counter[str]:
    """Errors per file in mypy's report."""
    return Counter(m.group("path") for line in report.splitlines() if (m := _ERROR.match(line)))


def read_baseline(text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            count, path = line.split(maxsplit=1)
            counts[path] = int(count)
    return counts


def write_baseline(counts: Counter[str]) -> str:
    return _HEADER + "".join(f"{n} {path}\n" for path, n in sorted(counts.items()) if n)


def compare(found: Counter[str], allowed: Counter[str]) -> tuple[list[str], list[str]]:
    """(files over their count, files under it), each as a line to print."""
    over = [
        f"  {path}: {n} error(s), {allowed[path]} allowed"
        for path, n in sorted(found.items())
        if n > allowed[path]
    ]
    under = [
        f"  {path}: {found[path]} error(s), {n} listed"
        for path, n in sorted(allowed.items())
        if found[path] < n
    ]
    return over, under


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the baseline")
    args = parser.parse_args(argv)
    report, errors, _ = api.run(CHECKED)
    if errors:
        print(errors, file=sys.stderr)
        return 2
    found = count_errors(report)
    if args.write:
        BASELINE.write_text(write_baseline(found))
        total, files = sum(found.values()), len(found)
        print(f"{BASELINE.relative_to(ROOT)}: {total} error(s) in {files} file(s)")
        return 0
    over, under = compare(found, read_baseline(BASELINE.read_text()))
    if under:
        print("mypy baseline: fewer errors than listed; lower the counts (--write):")
        print("\n".join(under))
    if over:
        print("mypy baseline: more errors than listed; fix them:")
        print("\n".join(over))
        print(report)
        return 1
    print(f"mypy over tests/ and samples/: {sum(found.values())} error(s), none new")
    return 0


if __name__ == "__main__":
    sys.exit(main())
