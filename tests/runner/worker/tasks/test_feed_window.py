"""The feeder's pure decisions (runner/worker/tasks/feed.py): the window beside jobs of other
priorities, and what a chunk's message carries of its record."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from checkpoint.errors import BadRecord
from checkpoint.records import JobRecord, TaskRecord
from checkpoint.tasks.task_records import PlannedChunk
from runner.worker.tasks.feed import as_planned, window_beside

NOW = datetime(2026, 11, 27, tzinfo=UTC)


def _job(priority: int, state: str = "running", job_type: str = "m:A", **more: Any) -> JobRecord:
    fields: dict[str, Any] = {
        "job_id": f"j{priority}-{state}",
        "job_type": job_type,
        "queue": "q",
        "state": state,
        "total": None,
        "created_on": None,
        "updated_on": None,
        "error": None,
        "etag": "",
        "properties": {},
        "priority": priority,
        **more,
    }
    return JobRecord(**fields)


def test_alone_or_first_a_job_feeds_its_whole_window():
    job = _job(3)
    assert window_beside(job, [job], 256) == 256
    assert window_beside(job, [job, _job(1), _job(3)], 256) == 256  # equal is no higher


@pytest.mark.parametrize("state", ["planning", "running"])
def test_beside_a_higher_job_under_way_it_feeds_an_eighth(state: str):
    assert window_beside(_job(0), [_job(1, state)], 256) == 32
    assert window_beside(_job(0), [_job(1, state)], 7) == 1  # at least one: never starved


@pytest.mark.parametrize(
    "higher",
    [
        _job(5, "finalizing"),
        _job(5, "done"),
        _job(5, "cancelled"),
        _job(5, paused_on=NOW),
        _job(5, cancelled_on=NOW),
        _job(5, job_type="m:B"),
    ],
    ids=["finalizing", "done", "cancelled", "paused", "failing", "other-type"],
)
def test_a_higher_job_not_taking_workers_of_its_type_changes_nothing(higher: JobRecord):
    assert window_beside(_job(0), [higher], 256) == 256


def _chunk(**changes: Any) -> TaskRecord:
    fields: dict[str, Any] = {
        "job_id": "j",
        "kind": "chunk",
        "index": 7,
        "state": "waiting",
        "attempt": 0,
        "owner": None,
        "message_id": None,
        "lease_until": None,
        "error": None,
        "updated_on": None,
        "etag": "e1",
        "properties": {"payload": b"\x01"},
        **changes,
    }
    return TaskRecord(**fields)


def test_a_chunk_never_claimed_travels_with_its_record():
    assert as_planned(7, _chunk()) == PlannedChunk(7, "e1", b"\x01")


@pytest.mark.parametrize(
    "found",
    [
        None,
        BadRecord("garbled"),
        _chunk(state="done"),
        _chunk(attempt=1),
        _chunk(message_id="m"),
        _chunk(properties={"payload": b"\x01", "progress": b"\x02"}),
        _chunk(properties={"payload_blob": "j/chunk/7/payload-x"}),
        _chunk(properties={"payload": b""}),
    ],
    ids=["missing", "unreadable", "done", "claimed", "delivered", "resumable", "spilled", "empty"],
)
def test_any_other_chunk_is_read_by_the_worker(found: TaskRecord | BadRecord | None):
    assert as_planned(7, found) == PlannedChunk(7)
