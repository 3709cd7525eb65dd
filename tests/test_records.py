"""A record's state is parsed against the Literal type it is declared with: every state
of the type is read back as itself (garbled ones: tests/test_bad_records.py)."""

from __future__ import annotations

from typing import get_args

import pytest

from checkpoint.records import JobRecord, JobState, TaskRecord, TaskState
from checkpoint.storage import Record


@pytest.mark.parametrize("state", get_args(TaskState))
def test_every_task_state_is_read(state: str) -> None:
    record = Record("p", "c0000007", {"state": state, "attempt": 0}, "e1")
    assert TaskRecord.from_record("job-x", "chunk", 7, record).state == state


@pytest.mark.parametrize("state", get_args(JobState))
def test_every_job_state_is_read(state: str) -> None:
    record = Record("p", "job-x", {"job_type": "m:C", "queue": "q", "state": state}, "e1")
    assert JobRecord.from_record(record).state == state
