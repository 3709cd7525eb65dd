"""tests/coverage_gaps.py, the check that holds uncovered lines to a list: reading and
writing the list, and what fails the run (a new gap, a group with no reason) and what
only reminds (a listed line covered now)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.coverage_gaps import (
    MODULE,
    Gap,
    Group,
    Measured,
    check,
    functions_by_line,
    read_list,
    updated,
    write_list,
)

SOURCE = """\
import os

class Keeper:
    def renew(self):
        if os.environ:
            return 1
        return 2

    @staticmethod
    def stop():
        def inner():
            return 3
        return inner
"""

LIST = """\
# a comment
runner/worker/leases/lease.py :: Keeper.renew  # only a bug gets here
    return 2
runner/worker/leases/lease.py :: <module>  # import-time fallback
    import os
"""


def measured(*gaps: tuple[Gap, int]) -> Measured:
    found = Measured(gaps=list(gaps))
    found.statements.update({"jobs": 10, "checkpoint": 10, "runner": 10})
    found.missing.update({"runner": len(gaps)})
    return found


def test_each_line_belongs_to_its_innermost_function_or_class():
    owners = functions_by_line(SOURCE)

    assert MODULE not in owners.values()
    assert 1 not in owners  # module level
    assert owners[3] == "Keeper"
    assert owners[6] == owners[7] == "Keeper.renew"
    assert owners[9] == owners[10] == "Keeper.stop"  # the decorator line too
    assert owners[12] == "Keeper.stop.inner"
    assert owners[13] == "Keeper.stop"


def test_the_list_reads_back_as_written():
    groups = read_list(LIST)

    assert groups == [
        Group(
            "runner/worker/leases/lease.py", "Keeper.renew", "only a bug gets here", ["return 2"]
        ),
        Group("runner/worker/leases/lease.py", MODULE, "import-time fallback", ["import os"]),
    ]
    assert read_list(write_list(groups)) == groups


@pytest.mark.parametrize(
    "text", ["    return 2\n", "runner/worker/leases/lease.py Keeper.renew  # why\n"]
)
def test_a_list_it_cannot_read_is_an_error_naming_the_line(text: str):
    with pytest.raises(ValueError, match="line 1"):
        read_list(text)


def test_a_run_whose_gaps_are_all_listed_passes(capsys: pytest.CaptureFixture[str]):
    gaps = (
        (Gap("runner/worker/leases/lease.py", "Keeper.renew", "return 2"), 7),
        (Gap("runner/worker/leases/lease.py", MODULE, "import os"), 1),
    )

    assert check(read_list(LIST), measured(*gaps)) == 0

    out = capsys.readouterr().out
    assert "runner/       80.0 %  (2 of 10 lines not run)" in out
    assert "every uncovered line is listed (2 in all)" in out


def test_an_unlisted_gap_fails_and_says_where_it_is(capsys: pytest.CaptureFixture[str]):
    gaps = [
        (Gap("runner/worker/leases/lease.py", "Keeper.renew", "return 2"), 7),
        (Gap("runner/worker/leases/lease.py", MODULE, "import os"), 1),
        (Gap("runner/worker/leases/lease.py", "Keeper.renew", "return 2"), 9),
    ]  # the same text twice

    assert check(read_list(LIST), measured(*gaps)) == 1

    out = capsys.readouterr().out
    assert "1 uncovered line(s) not in" in out
    assert "runner/worker/leases/lease.py:9 Keeper.renew: return 2" in out


def test_listed_lines_covered_now_only_remind(capsys: pytest.CaptureFixture[str]):
    assert check(read_list(LIST), measured()) == 0

    out = capsys.readouterr().out
    assert "2 listed line(s) are covered now" in out
    assert "runner/worker/leases/lease.py <module>: import os" in out
    assert "runner/worker/leases/lease.py Keeper.renew: return 2" in out


def test_a_group_without_a_reason_fails(capsys: pytest.CaptureFixture[str]):
    groups = read_list("runner/worker/leases/lease.py :: Keeper.renew  #\n    return 2\n")
    gaps = [(Gap("runner/worker/leases/lease.py", "Keeper.renew", "return 2"), 7)]

    assert check(groups, measured(*gaps)) == 1

    assert "Keeper.renew says no reason" in capsys.readouterr().out


def test_rewriting_keeps_reasons_drops_covered_lines_and_adds_new_groups():
    gaps = [
        (Gap("checkpoint/store.py", "CheckpointStore.ensure", "self._ready = True"), 80),
        (Gap("runner/worker/leases/lease.py", "Keeper.renew", "return 2"), 7),
        (Gap("runner/worker/leases/lease.py", "Keeper.renew", "return 1"), 6),
    ]

    groups = updated(read_list(LIST), gaps)

    assert groups == [
        Group("checkpoint/store.py", "CheckpointStore.ensure", "", ["self._ready = True"]),
        Group(
            "runner/worker/leases/lease.py",
            "Keeper.renew",
            "only a bug gets here",
            ["return 2", "return 1"],
        ),
    ]
    listed = Counter(Gap(g.path, g.function, t) for g in groups for t in g.lines)
    assert listed == Counter(gap for gap, _ in gaps)
