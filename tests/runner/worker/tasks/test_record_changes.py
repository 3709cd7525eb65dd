"""Typed task record changes write the properties the records have always held."""

from __future__ import annotations

from datetime import UTC, datetime

from checkpoint.records import Progress
from runner.worker.tasks.record_changes import TaskChanges
from runner.worker.tasks.verdict import Verdict

NOW = datetime(2026, 11, 22, 1, 50, tzinfo=UTC)


def test_a_claim_writes_its_fields_by_their_stored_names() -> None:
    claim = TaskChanges(
        state="running",
        owner="w1",
        message_id="m1",
        attempt=2,
        started_on=NOW,
        spark_session="",
        lease_until=NOW,
        lease_on_record=False,
    )
    assert claim.properties() == {
        "state": "running",
        "owner": "w1",
        "message_id": "m1",
        "attempt": 2,
        "started_on": NOW,
        "spark_session": "",
        "lease_until": NOW,
        "lease_on_record": False,
    }


def test_fields_left_none_are_not_written_and_empty_ones_clear() -> None:
    assert TaskChanges().properties() == {}
    assert TaskChanges(state="waiting", owner="", attempt=0).properties() == {
        "state": "waiting",
        "owner": "",
        "attempt": 0,
    }


def test_a_poisoned_mark_keeps_its_verdict_error_and_checkpoint_marks() -> None:
    mark = TaskChanges(
        state="poisoned",
        owner="",
        verdict=Verdict("failed", retryable=True, max_attempts=3),
        error=(ValueError("bad row"), "trace"),
    ).plus(TaskChanges(checkpoint_on=NOW, how_far=Progress(0.5, 1, 2)))
    assert mark.properties() == {
        "state": "poisoned",
        "owner": "",
        "retryable": True,
        "max_attempts": 3,
        "error_type": "ValueError",
        "error_message": "bad row",
        "error_traceback": "trace",
        "checkpoint_on": NOW,
        "progress_fraction": 0.5,
        "progress_of": "1/2",
    }


def test_added_changes_win_where_both_set_a_field() -> None:
    assert TaskChanges(state="done", owner="w").plus(TaskChanges(owner="")).owner == ""
