"""Which jobs a view lists (runner/cli/selection.py) and what listing them reads
(:func:`runner.cli.snapshot.read_listed`): the active jobs by default, the ended ones
counted from the catalogue's three columns, only the jobs shown read in full.

On Azurite the session's store holds other tests' jobs too, so what a listing should
say is taken from a full scan of the same store (the oracle), not written down.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.errors import BadRecord
from checkpoint.job_records import CatalogueEntry
from checkpoint.records import ENDED_JOB_STATES, JOB_STATES, JobRecord
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from runner.cli.selection import Listing, select_jobs
from runner.cli.snapshot import read_listed, read_snapshot
from runner.cli.status_types import JobStatus
from tests.backends import Backend

T0 = datetime(2026, 11, 28, 12, tzinfo=UTC)


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


def _job(store: CheckpointStore, state: str) -> str:
    job_id = f"sel-{state}-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "tests:Job", "sel-q", {"rows": 1})
    if state != "planning":
        store.change_job(job_id, lambda job: {"state": state})
    return job_id


def _oracle(store: CheckpointStore) -> list[tuple[str, JobRecord | BadRecord]]:
    return store.scan_jobs()


@pytest.mark.parametrize("given", ["default", "done"])
def test_a_listing_reads_in_full_only_the_jobs_it_shows(backend: Backend, given: str):
    # Given ended jobs of each kind, active ones and a garbled one
    counted = CountedRecords(backend.storage.records)
    storage = Storage(
        backend.storage.queues, counted, backend.storage.blobs, backend.storage.description
    )
    store = CheckpointStore(storage)
    mine = [_job(store, state) for state in (*ENDED_JOB_STATES, "done", "running", "planning")]
    garbled = f"sel-bad-{uuid.uuid4().hex[:8]}"
    storage.records.upsert(layout.JOBS_TABLE, layout.JOBS_PARTITION, garbled, {"state": "x"})
    every = _oracle(store)
    listing = Listing() if given == "default" else Listing(states=("done",))
    counted.calls.clear()

    # When the listing is read
    listed, counts = read_listed(store, listing)

    # Then it holds the jobs in its states, newest first (unreadable ones by default) ...
    wanted = set(listing.wanted)
    readable = [(job_id, job) for job_id, job in every if isinstance(job, JobRecord)]
    expected = {job_id for job_id, job in readable if job.state in wanted}
    if given == "default":
        expected |= {job_id for job_id, job in every if isinstance(job, BadRecord)}
    shown = [job.job_id for job in listed]
    assert set(shown) == expected
    assert (garbled in shown) == (given == "default")
    assert set(mine) & set(shown) == {j for j in mine if j.split("-")[1] in wanted}
    created = [job.created_on or T0 for job in listed if isinstance(job, JobStatus)]
    assert created == sorted(created, reverse=True)
    # ... counts every job by state, the ended ones too ...
    states = Counter(job.state for _, job in every if isinstance(job, JobRecord))
    assert dict(counts.by_state) == {state: states[state] for state in JOB_STATES}
    assert counts.unreadable == sum(isinstance(job, BadRecord) for _, job in every)
    # ... and reads one job record per job shown, the others only in the catalogue
    catalogue = ("query", layout.JOBS_PARTITION)
    assert counted.calls[catalogue] == 1
    assert counted.calls[("get", layout.JOBS_PARTITION)] == len(shown)
    storage.records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, garbled, etag="*")


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
    running = _job(store, "running")
    scan = store.scan_catalogue
    ghost = f"sel-gone-{uuid.uuid4().hex[:8]}"
    entry = CatalogueEntry(ghost, "running", datetime.now(UTC) + timedelta(days=1))
    monkeypatch.setattr(store, "scan_catalogue", lambda: [*scan(), (ghost, entry)])

    listed, counts = read_listed(store, Listing(states=("running",)))

    shown = [job.job_id for job in listed]
    assert running in shown and ghost not in shown
    assert counts.matched == len(shown) + 1
