"""A record's state is parsed against the Literal type it is declared with: every state
of the type is read back as itself (garbled ones:
tests/runner/worker/tasks/test_bad_records.py); a chunk's progress, a task's error fields,
and how records are named."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from checkpoint.errors import BadRecord
from checkpoint.records import (
    MAX_ERROR_CHARS,
    PROGRESS_FRACTION,
    PROGRESS_OF,
    JobRecord,
    JobState,
    Progress,
    TaskRecord,
    TaskState,
    error_properties,
    record_name,
)
from checkpoint.storage import Record


@pytest.mark.parametrize("state", get_args(TaskState))
def test_every_task_state_is_read(state: str) -> None:
    record = Record("p", "c0000007", {"state": state, "attempt": 0}, "e1")
    assert TaskRecord.from_record("job-x", "chunk", 7, record).state == state


@pytest.mark.parametrize("state", get_args(JobState))
def test_every_job_state_is_read(state: str) -> None:
    record = Record("p", "job-x", {"job_type": "m:C", "queue": "q", "state": state}, "e1")
    assert JobRecord.from_record(record).state == state


@pytest.mark.parametrize(
    ("stored", "read"), [(None, 0), (7, 7), (-3, -3), (5.0, 5)], ids=["none", "7", "-3", "5.0"]
)
def test_a_jobs_priority_is_read_as_a_whole_number(stored: Any, read: int) -> None:
    properties = {"job_type": "m:C", "queue": "q", "state": "running", "priority": stored}
    assert JobRecord.from_record(Record("p", "job-x", properties, "e1")).priority == read


@pytest.mark.parametrize("stored", [1.5, "high", True])
def test_a_garbled_priority_is_a_bad_record_naming_it(stored: Any) -> None:
    properties = {"job_type": "m:C", "queue": "q", "state": "running", "priority": stored}
    with pytest.raises(BadRecord, match="job 'job-x': priority .* is not a whole number"):
        JobRecord.from_record(Record("p", "job-x", properties, "e1"))


def test_error_fields_keep_the_start_of_the_message_and_the_end_of_the_traceback() -> None:
    error = ValueError("m" * MAX_ERROR_CHARS + "CUT")
    traceback_text = "CUT" + "t" * MAX_ERROR_CHARS

    fields = error_properties(error, traceback_text)

    assert fields["error_type"] == "ValueError"
    assert fields["error_message"] == "m" * MAX_ERROR_CHARS
    assert fields["error_traceback"] == "t" * MAX_ERROR_CHARS


def test_no_error_clears_the_fields_with_empty_strings() -> None:
    # A merge keeps a property set to None, so clearing writes empty strings
    assert error_properties(None) == {"error_type": "", "error_message": "", "error_traceback": ""}


def test_records_are_named_as_messages_say_them() -> None:
    assert record_name("j", "job") == "job 'j'"
    assert record_name("j", "chunk", 7) == "chunk 7 of job 'j'"
    assert record_name("j", "plan") == "plan of job 'j'"


@pytest.mark.parametrize(
    ("properties", "problem"),
    [
        ({PROGRESS_FRACTION: 1.5}, "progress_fraction 1.5 is not 0-1"),
        ({PROGRESS_FRACTION: "half"}, "progress_fraction 'half' is not 0-1"),
        (
            {PROGRESS_FRACTION: 0.5, PROGRESS_OF: "5 of 10"},
            "progress_of '5 of 10' is not done/total",
        ),
        ({PROGRESS_FRACTION: 0.5, PROGRESS_OF: "1/2/3"}, "progress_of '1/2/3' is not done/total"),
    ],
)
def test_garbled_progress_is_a_bad_record_naming_it(
    properties: dict[str, Any], problem: str
) -> None:
    with pytest.raises(BadRecord, match=f"^chunk 3 of job 'j': {problem}"):
        Progress.from_properties(properties, "chunk 3 of job 'j'")


def test_progress_reads_back_with_and_without_its_count() -> None:
    assert Progress.from_properties({}, "x") is None
    bare = Progress.from_properties({PROGRESS_FRACTION: 0.25, PROGRESS_OF: ""}, "x")
    counted = Progress.from_properties({PROGRESS_FRACTION: 0.5, PROGRESS_OF: "5/10"}, "x")

    assert bare == Progress(0.25) and str(bare) == "25%"
    assert counted == Progress(0.5, 5, 10) and str(counted).startswith("50% (5")


def test_a_job_record_without_a_queue_count_has_one_queue_and_one_with_names_them() -> None:
    one = Record("p", "job-x", {"job_type": "m:C", "queue": "q", "state": "running"}, "e1")
    four = Record("p", "job-y", {**one.properties, "queues": 4}, "e1")
    assert JobRecord.from_record(one).queues == ("q",)
    assert JobRecord.from_record(four).queues == ("q-0", "q-1", "q-2", "q-3")
    assert JobRecord.from_record(four).chunk_queue(32) == "q-1"


@pytest.mark.parametrize("count", [0, 65, "4"])
def test_a_garbled_queue_count_is_a_bad_record_naming_it(count: Any) -> None:
    properties = {"job_type": "m:C", "queue": "q", "state": "running", "queues": count}
    with pytest.raises(BadRecord, match="^job 'job-x': queues"):
        JobRecord.from_record(Record("p", "job-x", properties, "e1"))
