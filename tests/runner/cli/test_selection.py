"""Which jobs a view lists (runner/cli/selection.py) and what listing them reads
(:func:`runner.cli.snapshot.read_listed`): the active jobs by default, chosen and the
ended ones counted from the catalogue's index (its three columns for ``--all`` or an
ended state), only the jobs shown read in full.

On Azurite the session's store holds other tests' jobs too, so what a listing should
say is taken from a full scan of the same store (the oracle), not written down.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.catalogue.job_index import COUNTS_ROW, CatalogueEntry, active_row, zero_counts
from checkpoint.errors import BadRecord, NotFound
from checkpoint.records import ENDED_JOB_STATES, JOB_STATES, JobRecord
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from runner.cli.selection import Listing, select_jobs
from runner.cli.snapshot import read_listed, read_snapshot
from runner.cli.status_types import JobStatus
from tests.azurite import Azurite
from tests.backends import Backend


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``):
    a listing reads every active job of its store in full."""
    return own_azurite


T0 = datetime(2026, 11, 28, 12, tzinfo=UTC)
_OLDEST = datetime.min.replace(tzinfo=UTC)
#: Jobs a listing of the session's shared Azurite shows (its newest).
LIMIT_ON_A_SHARED_STORE = 30


class CountedRecords:
    """Records that count each call by method name and partition."""

    def __init__(self, records: Any):
        self._records = records
        self.calls: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._records, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if len(args) >= 2:
                self.calls[(name, args[1])] += 1
            return method(*args, **kwargs)

        return call


def _entry(job_id: str, state: str, minutes: int, updated: int | None = None) -> Any:
    at = T0 + timedelta(minutes=minutes)
    changed = None if updated is None else T0 + timedelta(minutes=updated)
    return (job_id, CatalogueEntry(job_id, state, at, changed))  # type: ignore[arg-type]


def test_a_default_listing_is_the_active_jobs_newest_first_then_the_unreadable():
    found = [
        _entry("old-run", "running", 1),
        _entry("done-1", "done", 2),
        ("garbled", BadRecord("job 'garbled': state is missing")),
        _entry("new-plan", "planning", 3),
        _entry("failed-1", "failed", 4),
    ]

    chosen, counts = select_jobs(found, Listing())

    assert chosen == ["new-plan", "old-run", "garbled"]
    assert dict(counts.by_state) == {
        "waiting": 0,
        "planning": 1,
        "running": 1,
        "finalizing": 0,
        "done": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert (counts.unreadable, counts.matched, counts.total) == (1, 3, 5)


def test_a_listing_by_state_leaves_out_the_unreadable_and_every_lists_all():
    found = [
        _entry("a", "done", 1),
        ("garbled", BadRecord("job 'garbled': bad")),
        _entry("b", "running", 2),
        _entry("c", "done", 3),
    ]

    assert select_jobs(found, Listing(states=("done",)))[0] == ["c", "a"]
    assert select_jobs(found, Listing(every=True))[0] == ["c", "b", "a", "garbled"]
    assert select_jobs(found, Listing(every=True, limit=2))[0] == ["c", "b"]


def test_pages_cut_what_matched_and_count_all_of_it():
    found = [_entry(f"j{n:02d}", "done", n) for n in range(7)]

    pages = [select_jobs(found, Listing(states=("done",), page=n, page_size=3)) for n in range(3)]

    assert [chosen for chosen, _ in pages] == [
        ["j06", "j05", "j04"],
        ["j03", "j02", "j01"],
        ["j00"],
    ]
    assert {counts.matched for _, counts in pages} == {7}


def test_recent_ended_adds_the_ended_jobs_changed_last_to_a_default_listing():
    found = [
        _entry("run", "running", 0),
        _entry("early", "done", 1, updated=50),
        _entry("late", "failed", 2, updated=10),
        _entry("latest", "cancelled", 3, updated=60),
    ]

    assert select_jobs(found, Listing(recent_ended=2))[0] == ["run", "latest", "early"]
    assert select_jobs(found, Listing(states=("running",), recent_ended=2))[0] == ["run"]


def test_a_limit_cuts_the_listed_jobs_not_the_recent_ended_a_watch_adds():
    # A watched list cut to its newest active job still shows the jobs just ended, and
    # counts what the cut left out (matched: the active jobs, not the ended added)
    found = [
        _entry("old-run", "running", 0),
        _entry("new-run", "running", 5),
        _entry("ended", "done", 1, updated=50),
    ]

    chosen, counts = select_jobs(found, Listing(limit=1, recent_ended=2))

    assert chosen == ["new-run", "ended"]
    assert counts.matched == 2


def _job(store: CheckpointStore, state: str) -> str:
    job_id = f"sel-{state}-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "tests:Job", "sel-q", {"rows": 1})
    if state != "planning":
        store.change_job(job_id, lambda job: {"state": state})
    return job_id


def _oracle(store: CheckpointStore) -> list[tuple[str, JobRecord | BadRecord]]:
    return store.scan_jobs()


def _counted_store(backend: Backend) -> tuple[CheckpointStore, CountedRecords]:
    counted = CountedRecords(backend.storage.records)
    storage = Storage(
        backend.storage.queues, counted, backend.storage.blobs, backend.storage.description
    )
    return CheckpointStore(storage), counted


def _with_index(store: CheckpointStore) -> None:
    """The session's Azurite may hold job records written by hand before any job was
    created (a store without the index): give it its counts row, as a new store has."""
    store.ensure()
    try:
        store.storage.records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW)
    except NotFound:
        store.storage.records.insert(
            layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, zero_counts()
        )


@pytest.mark.parametrize("given", ["done", "all", "no index"])
def test_a_scanned_listing_reads_in_full_only_the_jobs_it_shows(backend: Backend, given: str):
    # Given ended jobs of each kind, active ones and a garbled one
    store, counted = _counted_store(backend)
    _with_index(store)
    mine = [_job(store, state) for state in (*ENDED_JOB_STATES, "done", "running", "planning")]
    garbled = f"sel-bad-{uuid.uuid4().hex[:8]}"
    records = store.storage.records
    records.upsert(layout.JOBS_TABLE, layout.JOBS_PARTITION, garbled, {"state": "x"})
    every = _oracle(store)
    listing = {"done": Listing(states=("done",)), "all": Listing(every=True)}.get(given, Listing())
    if backend.name == "azurite":
        # The session's store holds every other test's jobs: each shown is read in full,
        # so the list is cut to its newest (the oracle says which those are).
        listing = replace(listing, limit=LIMIT_ON_A_SHARED_STORE)
    kept = records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW)
    if given == "no index":  # a store made by an earlier version
        records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, etag="*")
    counted.calls.clear()

    # When the listing is read
    try:
        listed, counts = read_listed(store, listing)
    finally:
        records.upsert(layout.JOBS_TABLE, layout.JOBS_PARTITION, COUNTS_ROW, kept.properties)

    # Then it holds the jobs in its states, newest first (unreadable ones unless a
    # state is asked for) ...
    wanted = set(listing.wanted)
    readable = [(job_id, job) for job_id, job in every if isinstance(job, JobRecord)]
    readable.sort(key=lambda found: (found[1].created_on or _OLDEST, found[0]), reverse=True)
    expected = [job_id for job_id, job in readable if job.state in wanted]
    if given != "done":
        expected += sorted(job_id for job_id, job in every if isinstance(job, BadRecord))
    expected = expected[: listing.limit]
    shown = [job.job_id for job in listed]
    assert shown == expected
    if listing.limit is None:
        assert (garbled in shown) == (given != "done")
        assert set(mine) & set(shown) == {j for j in mine if j.split("-")[1] in wanted}
    created = [job.created_on or T0 for job in listed if isinstance(job, JobStatus)]
    assert created == sorted(created, reverse=True)
    # ... counts every job by state, the ended ones too ...
    states = Counter(job.state for _, job in every if isinstance(job, JobRecord))
    assert dict(counts.by_state) == {state: states[state] for state in JOB_STATES}
    assert counts.unreadable == sum(isinstance(job, BadRecord) for _, job in every)
    # ... and reads one job record per job shown, the others only in the catalogue
    # (a store without the index: after one query finding no index)
    catalogue = ("query", layout.JOBS_PARTITION)
    assert counted.calls[catalogue] == (2 if given == "no index" else 1)
    assert counted.calls[("get", layout.JOBS_PARTITION)] == len(shown)
    records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, garbled, etag="*")


@pytest.mark.parametrize("states", [(), ("running",)])
def test_a_listing_of_active_jobs_reads_the_index_and_only_the_jobs_it_shows(
    backend: Backend, states: tuple[str, ...]
):
    # Given ended jobs of each kind, active ones and a job record written by hand
    store, counted = _counted_store(backend)
    _with_index(store)
    mine = {state: _job(store, state) for state in (*ENDED_JOB_STATES, "running", "planning")}
    by_hand = f"sel-hand-{uuid.uuid4().hex[:8]}"
    records = store.storage.records
    records.upsert(layout.JOBS_TABLE, layout.JOBS_PARTITION, by_hand, {"state": "running"})
    index = store.read_index()
    assert index is not None
    counted.calls.clear()

    # When the listing is read
    listed, counts = read_listed(store, Listing(states=states))

    # Then it holds the active jobs the index lists (not one written by hand), in the
    # states asked for, newest first ...
    shown = [job.job_id for job in listed]
    wanted = set(states or ("planning", "running", "finalizing"))
    assert {mine[state] for state in wanted if state in mine} <= set(shown)
    assert not {mine[state] for state in ENDED_JOB_STATES} & set(shown)
    assert by_hand not in shown
    assert all(job.state in wanted for job in listed if isinstance(job, JobStatus))
    created = [job.created_on or T0 for job in listed if isinstance(job, JobStatus)]
    assert created == sorted(created, reverse=True)
    # ... counts the ended jobs as the index does ...
    assert {state: counts.by_state[state] for state in ENDED_JOB_STATES} == index.ended
    # ... reading one range query, and one job record per job shown
    assert counted.calls[("query", layout.JOBS_PARTITION)] == 1
    # (other tests' jobs on the session's shared Azurite may end or go between the
    # index's read and their own: read, not shown; a few, never the store's every job)
    gets = counted.calls[("get", layout.JOBS_PARTITION)]
    assert len(shown) <= gets <= len(shown) + 10
    records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, by_hand, etag="*")


def test_an_active_row_left_by_a_writer_that_kept_no_index_is_not_listed(backend: Backend):
    # Given a job ended as an earlier version ends it: its record merged, its active
    # row left behind
    store = CheckpointStore(backend.storage)
    _with_index(store)
    job_id = _job(store, "running")
    partition = (layout.JOBS_TABLE, layout.JOBS_PARTITION)
    store.storage.records.merge(*partition, job_id, {"state": "done"}, etag="*")

    listed, _ = read_listed(store, Listing())

    assert job_id not in [job.job_id for job in listed]
    store.storage.records.delete(*partition, active_row(job_id), etag="*")


def test_a_watched_listing_shows_the_last_jobs_ended_from_the_index(backend: Backend):
    store = CheckpointStore(backend.storage)
    _with_index(store)
    ended = [_job(store, "done"), _job(store, "failed")]

    listed, _ = read_listed(store, Listing(recent_ended=5))

    shown = [job.job_id for job in listed]
    assert set(ended) <= set(shown)
    assert shown.index(ended[1]) < shown.index(ended[0])  # the last ended first


def test_a_snapshot_of_a_list_carries_the_counts_and_of_one_job_none(backend: Backend):
    store = CheckpointStore(backend.storage)
    job_id = _job(store, "done")

    listed = read_snapshot(store)
    one = read_snapshot(store, job_id)

    assert listed.counts is not None and listed.counts.by_state["done"] >= 1
    assert job_id not in [job.job_id for job in listed.jobs]
    assert one.counts is None and [job.job_id for job in one.jobs] == [job_id]


def test_a_job_deleted_since_the_catalogue_was_read_is_left_out(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
):
    store = CheckpointStore(backend.storage)
    running = _job(store, "done")
    scan = store.scan_catalogue
    ghost = f"sel-gone-{uuid.uuid4().hex[:8]}"
    entry = CatalogueEntry(ghost, "done", datetime.now(UTC) + timedelta(days=1))
    monkeypatch.setattr(store, "scan_catalogue", lambda: [*scan(), (ghost, entry)])

    listed, counts = read_listed(store, Listing(states=("done",)))

    shown = [job.job_id for job in listed]
    assert running in shown and ghost not in shown
    assert counts.matched == len(shown) + 1
