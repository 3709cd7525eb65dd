"""Which jobs ``runner status``, ``--watch`` and the dashboard list, and in what order:
newest first, filtered by state, cut to a number or a page.

By default a view lists the *active* jobs (those not ended) and counts the ended ones
(:class:`JobCounts`); ``--all`` lists every job. Such a view, or one of active states
only, is chosen from the catalogue's index (:mod:`checkpoint.catalogue.job_index`: a row per
active job and the ended jobs' counts, read in one range query), so a store of 10,000
ended jobs costs it what a store of ten does, and only the jobs shown are read in full.

``--all``, an ended state, or a store without the index (made by an earlier version)
choose on the job catalogue read by projection
(:meth:`checkpoint.store.CheckpointStore.scan_catalogue`: each job's state, creation
and update times, not its record): a row per job, so its time grows with the store
(BENCHMARKS.md, "Status views"). A catalogue entry that cannot be read has no state or
age to go by: it is listed, after the readable jobs, unless particular states are
asked for (the index lists an active job whose record cannot be read; ``--all`` lists
every one).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from checkpoint.catalogue.job_index import CatalogueEntry, JobIndex
from checkpoint.errors import BadRecord
from checkpoint.records import ENDED_JOB_STATES, JOB_STATES
from runner.cli.status_types import JobCounts

Found = tuple[str, CatalogueEntry | BadRecord]

#: The job states a default view lists (the others are counted).
ACTIVE_STATES = tuple(state for state in JOB_STATES if state not in ENDED_JOB_STATES)

_OLDEST = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Listing:
    """Which jobs a view lists.

    Attributes:
        states: only jobs in these states; empty: the active ones, or every job with
            ``every``.
        every: every job (``--all``), whatever its state.
        limit: at most this many, newest first (None: no limit).
        page: with ``page_size``, the page shown (0 first) of those chosen.
        page_size: jobs per page (None: one page of all).
        recent_ended: by default (no ``states``, not ``every``) list also this many
            ended jobs, those changed last (``--watch`` shows a job that just ended).
    """

    states: tuple[str, ...] = ()
    every: bool = False
    limit: int | None = None
    page: int = 0
    page_size: int | None = None
    recent_ended: int = 0

    @property
    def wanted(self) -> tuple[str, ...]:
        """The states listed (every state with ``every``)."""
        if self.states:
            return self.states
        return JOB_STATES if self.every else ACTIVE_STATES

    @property
    def lists_unreadable(self) -> bool:
        """Unreadable entries have no state: listed unless particular states are asked."""
        return not self.states


#: What a view lists when nothing is asked: the active jobs, the ended ones counted.
DEFAULT_LISTING = Listing()

#: Jobs a text view (``runner status``, ``--watch``) shows when no ``--limit`` is given,
#: newest first: each job shown costs about ten requests (its counts, running, retrying
#: and control tasks; more for a job of over 32 chunks), so a store of hundreds of
#: queued jobs would take a while to show on Azure. The dashboard shows the same number
#: a page; ``--json`` lists every one.
SHOWN_BY_DEFAULT = 50


def select_jobs(found: Sequence[Found], listing: Listing) -> tuple[list[str], JobCounts]:
    """The ids of the jobs ``listing`` shows, newest first (by ``created_on``, then job
    id; unreadable entries last), and the catalogue's counts."""
    readable = [(job_id, e) for job_id, e in found if isinstance(e, CatalogueEntry)]
    readable.sort(key=_created_then_id, reverse=True)
    wanted = set(listing.wanted)
    chosen = [job_id for job_id, entry in readable if entry.state in wanted]
    unreadable = sorted(job_id for job_id, e in found if isinstance(e, BadRecord))
    if listing.lists_unreadable:
        chosen += unreadable
    matched = len(chosen)
    if listing.limit is not None:
        chosen = chosen[: listing.limit]
    if listing.page_size is not None:
        start = listing.page * listing.page_size
        chosen = chosen[start : start + listing.page_size]
    left_out = matched - len(chosen)
    # After the cut: a watched list cut to its newest jobs still shows those just ended.
    if listing.recent_ended and not listing.states and not listing.every:
        chosen += _recent_ended(readable, listing.recent_ended)
    by_state = Counter(entry.state for _, entry in readable)
    counts = JobCounts(
        by_state={state: by_state[state] for state in JOB_STATES},
        unreadable=len(unreadable),
        matched=matched,
        left_out=left_out,
    )
    return chosen, counts


def reads_index(listing: Listing) -> bool:
    """Whether ``listing`` lists only active jobs (and the last few ended), so the
    catalogue's index can choose them: not ``--all``, no ended state asked for."""
    return not listing.every and set(listing.states) <= set(ACTIVE_STATES)


def select_indexed(index: JobIndex, listing: Listing) -> tuple[list[str], JobCounts]:
    """As :func:`select_jobs`, choosing among the index's active jobs (and the last
    ended, for ``recent_ended``), with the ended jobs counted by the index's counts."""
    recent = [(entry.job_id, entry) for entry in index.recent] if listing.recent_ended else []
    chosen, counts = select_jobs([*index.active, *recent], listing)
    return chosen, replace(counts, by_state={**counts.by_state, **index.ended})


def _recent_ended(readable: list[tuple[str, CatalogueEntry]], count: int) -> list[str]:
    """The ``count`` ended jobs changed last, newest change first."""
    ended = [(job_id, e) for job_id, e in readable if e.state in ENDED_JOB_STATES]
    ended.sort(key=lambda item: (item[1].updated_on or _OLDEST, item[0]), reverse=True)
    return [job_id for job_id, _ in ended[:count]]


def _created_then_id(item: tuple[str, CatalogueEntry]) -> tuple[datetime, str]:
    job_id, entry = item
    return entry.created_on or _OLDEST, job_id
