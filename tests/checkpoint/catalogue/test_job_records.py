"""The job records' queries that must not grow with the jobs retained
(checkpoint/catalogue/job_records.py), on both backends."""

from __future__ import annotations

import uuid

from checkpoint import layout
from checkpoint.catalogue.job_records import UNDER_WAY_WHERE
from checkpoint.records import JOB_STATES
from checkpoint.storage import PropertyValue
from checkpoint.store import CheckpointStore


def test_the_under_way_range_holds_planning_and_running_only():
    low, high = (str(condition.value) for condition in UNDER_WAY_WHERE)
    assert sorted(s for s in JOB_STATES if low <= s <= high) == ["planning", "running"]


def test_the_jobs_under_way_above_a_priority_are_those_of_its_type_only(backend):
    # Given jobs of two types, priorities and states
    store = CheckpointStore(backend.storage)
    tag = uuid.uuid4().hex[:8]
    kind, other = f"tests:Above{tag}", f"tests:Other{tag}"
    for name, job_type, priority, state in [
        ("higher-running", kind, 5, "running"),
        ("higher-planning", kind, 2, "planning"),
        ("higher-done", kind, 5, "done"),
        ("higher-finalizing", kind, 5, "finalizing"),
        ("equal", kind, 1, "running"),
        ("lower", kind, -3, "running"),
        ("other-type", other, 9, "running"),
    ]:
        job, _ = store.create_job(f"{name}-{tag}", job_type, "q", {}, priority=priority)
        store.update_job(job, state=state)

    # When a job of priority 1 asks which jobs of its type are under way above it
    found = store.under_way_above(kind, 1)

    # Then only those planning or running with a higher priority are answered
    expected = [f"higher-planning-{tag}", f"higher-running-{tag}"]
    assert sorted(job.job_id for job in found) == expected
    assert store.under_way_above(kind, 5) == []
    assert {job.job_id for job in store.under_way_above(kind, -10)} == {
        f"{name}-{tag}" for name in ("higher-running", "higher-planning", "equal", "lower")
    }


def test_a_job_record_that_cannot_be_read_is_left_out_of_the_jobs_above(backend):
    # Given a record in the catalogue that matches the query but lacks its queue
    store = CheckpointStore(backend.storage)
    tag = uuid.uuid4().hex[:8]
    kind = f"tests:Garbled{tag}"
    good, _ = store.create_job(f"good-{tag}", kind, "q", {}, priority=3)
    store.update_job(good, state="running")
    fields: dict[str, PropertyValue] = {"job_type": kind, "priority": 3, "state": "running"}
    backend.storage.records.insert(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, f"garbled-{tag}", fields
    )

    # Then the jobs above are the readable ones only
    assert [job.job_id for job in store.under_way_above(kind, 0)] == [f"good-{tag}"]
