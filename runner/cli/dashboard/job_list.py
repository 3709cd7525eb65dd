"""The jobs page's list: which tab (a state, the active jobs, or all) and which page of
it, read from the query string, and the links to the other tabs and pages. The poison
page lists the poisoned tasks of the same tabs and pages (``path``), so it too reads a
page of jobs, never every job.

A tab is a :class:`runner.cli.selection.Listing` of :data:`JOBS_PER_PAGE` jobs, so a
refresh reads the catalogue's three columns and the page's jobs, never every job; the
counts on the tabs come from the same catalogue read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from checkpoint.errors import ConfigurationError
from checkpoint.records import ENDED_JOB_STATES, JOB_STATES
from runner.cli.selection import ACTIVE_STATES, Listing
from runner.cli.status_types import JobCounts

#: Jobs a page of the list shows.
JOBS_PER_PAGE = 50
#: The tabs always shown; a tab of one active state (``?state=running``) is shown when
#: asked for.
TABS = ("active", *ENDED_JOB_STATES, "all")
_KNOWN = {*TABS, *JOB_STATES}


@dataclass(frozen=True)
class JobsQuery:
    """``?state=`` (a tab: ``active``, the default, ``all`` or a job state) and
    ``?page=`` (0 first) of the page at ``path``."""

    tab: str = "active"
    page: int = 0
    path: str = "/"

    @classmethod
    def from_params(cls, params: Mapping[str, str], path: str = "/") -> JobsQuery:
        """Raises ConfigurationError (400) for a tab or page not understood."""
        tab = params.get("state") or "active"
        if tab not in _KNOWN:
            known = ", ".join((*TABS, *ACTIVE_STATES))
            raise ConfigurationError(f"no job list {tab!r}: state is one of {known}")
        page = params.get("page") or "0"
        if not page.isdigit() or len(page) > 9:
            raise ConfigurationError(f"page must be a whole number from 0, not {page!r}")
        return cls(tab, int(page), path)

    def listing(self) -> Listing:
        """The jobs of this tab and page."""
        if self.tab == "active":
            return Listing(page=self.page, page_size=JOBS_PER_PAGE)
        if self.tab == "all":
            return Listing(every=True, page=self.page, page_size=JOBS_PER_PAGE)
        return Listing(states=(self.tab,), page=self.page, page_size=JOBS_PER_PAGE)

    def url(self, tab: str | None = None, page: int = 0) -> str:
        params = {"state": tab or self.tab, "page": str(page)}
        params = {name: value for name, value in params.items() if value not in ("active", "0")}
        return self.path + (f"?{urlencode(params)}" if params else "")


#: The listing of the page shown when nothing is asked (and the workers page's read).
DEFAULT_JOBS = JobsQuery().listing()


def tab_count(tab: str, counts: JobCounts) -> int:
    """How many jobs the tab lists in all."""
    if tab == "all":
        return counts.total
    if tab == "active":
        return sum(counts.by_state.get(state, 0) for state in ACTIVE_STATES) + counts.unreadable
    return counts.by_state.get(tab, 0)


def tabs(query: JobsQuery, counts: JobCounts | None) -> list[tuple[str, int, str, bool]]:
    """``(tab, count, url, chosen)`` of each tab."""
    if counts is None:
        return []
    shown = TABS if query.tab in TABS else (*TABS[:1], query.tab, *TABS[1:])
    return [(tab, tab_count(tab, counts), query.url(tab), tab == query.tab) for tab in shown]


def pages(query: JobsQuery, counts: JobCounts | None) -> list[tuple[str, str | None]]:
    """The page links, ``(label, url)``; None where there is no such page."""
    if counts is None or counts.matched <= JOBS_PER_PAGE and not query.page:
        return []
    last = max(0, (counts.matched - 1) // JOBS_PER_PAGE)
    page = query.page
    return [
        ("first", query.url(page=0) if page else None),
        ("previous", query.url(page=min(page, last + 1) - 1) if page else None),
        ("next", query.url(page=page + 1) if page < last else None),
        ("last", query.url(page=last) if page != last else None),
    ]


def shown_range(query: JobsQuery, counts: JobCounts | None, shown: int) -> str:
    """``jobs 51-100 of 9,800``, or "" when the tab has one page."""
    if counts is None or not shown or counts.matched <= JOBS_PER_PAGE:
        return ""
    first = query.page * JOBS_PER_PAGE + 1
    return f"jobs {first:,}-{first + shown - 1:,} of {counts.matched:,}"
