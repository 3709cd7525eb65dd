"""The jobs page's tabs and pages (runner/cli/dashboard/job_list.py), as pure functions
of the query and the catalogue's counts."""

from __future__ import annotations

import pytest

from checkpoint.errors import ConfigurationError
from runner.cli.dashboard.job_list import (
    JOBS_PER_PAGE,
    JobsQuery,
    pages,
    shown_range,
    tab_count,
    tabs,
)
from runner.cli.selection import Listing
from runner.cli.status_types import JobCounts

COUNTS = JobCounts(
    by_state={"planning": 1, "running": 2, "finalizing": 0, "done": 120, "failed": 3},
    unreadable=1,
    matched=120,
)


def test_a_query_is_a_tab_and_a_page_and_lists_fifty_jobs_of_it():
    assert JobsQuery.from_params({}) == JobsQuery("active", 0)
    assert JobsQuery.from_params({"state": "done", "page": "2"}).listing() == Listing(
        states=("done",), page=2, page_size=JOBS_PER_PAGE
    )
    assert JobsQuery("all").listing() == Listing(every=True, page_size=JOBS_PER_PAGE)
    assert JobsQuery("active", 3).url(page=3) == "/?page=3"
    assert JobsQuery("active", 3).url() == "/"
    assert JobsQuery("active").url("done") == "/?state=done"


@pytest.mark.parametrize(
    "params", [{"state": "sideways"}, {"page": "x"}, {"page": "-1"}, {"page": "1" * 10}]
)
def test_a_tab_or_page_not_understood_is_refused_in_one_line(params: dict[str, str]):
    with pytest.raises(ConfigurationError) as refused:
        JobsQuery.from_params(params)
    assert "\n" not in str(refused.value)


def test_tabs_count_the_catalogue_and_a_tab_of_one_active_state_is_added_when_asked():
    shown = {tab: (count, chosen) for tab, count, _, chosen in tabs(JobsQuery(), COUNTS)}
    assert shown == {
        "active": (4, True),
        "done": (120, False),
        "failed": (3, False),
        "cancelled": (0, False),
        "all": (127, False),
    }
    running = [tab for tab, *_ in tabs(JobsQuery("running"), COUNTS)]
    assert running == ["active", "running", "done", "failed", "cancelled", "all"]
    assert tab_count("running", COUNTS) == 2
    assert tabs(JobsQuery(), None) == []


def test_pages_link_first_previous_next_last_where_there_is_such_a_page():
    query = JobsQuery("done", 1)
    assert dict(pages(query, COUNTS)) == {
        "first": "/?state=done",
        "previous": "/?state=done",
        "next": "/?state=done&page=2",
        "last": "/?state=done&page=2",
    }
    assert pages(JobsQuery("done"), JobCounts({}, 0, matched=50)) == []
    assert shown_range(query, COUNTS, 50) == "jobs 51-100 of 120"
    assert shown_range(query, None, 50) == ""
    assert pages(query, None) == []
