"""The mypy baseline of tests/ and samples/ (tests/mypy_baseline.py): counted per file,
only allowed to shrink."""

from __future__ import annotations

from collections import Counter

from tests.mypy_baseline import compare, count_errors, read_baseline, write_baseline

REPORT = """\
tests/test_a.py:3: error: Incompatible types in assignment  [assignment]
tests/test_a.py:9: note: See https://mypy.readthedocs.io
tests/test_a.py:12: error: Missing type parameters for generic type "dict"  [type-arg]
samples/b.py:1: error: Name "x" is not defined  [name-defined]
Found 3 errors in 2 files (checked 4 source files)
"""


def test_errors_are_counted_per_file_and_notes_are_not():
    assert count_errors(REPORT) == Counter({"tests/test_a.py": 2, "samples/b.py": 1})


def test_the_baseline_reads_back_what_it_wrote():
    counts = Counter({"tests/test_a.py": 2, "samples/b.py": 1})
    assert read_baseline(write_baseline(counts)) == counts


def test_a_file_over_its_count_fails_and_one_under_is_reported():
    allowed = Counter({"tests/test_a.py": 1, "samples/b.py": 3})
    over, under = compare(count_errors(REPORT), allowed)
    assert over == ["  tests/test_a.py: 2 error(s), 1 allowed"]
    assert under == ["  samples/b.py: 1 error(s), 3 listed"]


def test_a_new_file_with_errors_is_over():
    over, _ = compare(Counter({"tests/test_new.py": 1}), Counter())
    assert over == ["  tests/test_new.py: 1 error(s), 0 allowed"]
