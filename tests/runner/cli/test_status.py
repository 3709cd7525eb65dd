"""What ``runner status`` reports of running chunks: the state itself for tools
(``--json``), a short text for people; of a cancelled job, and of a retry that is due."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.clock import FakeClock
from checkpoint.storage import ANY_ETAG
from checkpoint.store import CheckpointStore
from jobs import manage
from runner.cli.json_form import VALUE_JSON_BYTES, to_json, user_value, utc
from runner.cli.render import render_status
from runner.cli.status import PROGRESS_CHARS, job_status
from tests.backends import Backend


def _waiting_job(store: CheckpointStore, chunks: int) -> str:
    job_id = f"st-{uuid.uuid4().hex[:10]}"
    job, _ = store.create_job(job_id, "tests:Job", "status-q", {})
    store.add_chunks(job_id, 0, list(range(chunks)))
    store.update_job(job, state="running", total=chunks)
    return job_id


def _running_job(store: CheckpointStore, states: list[Any], waiting: int = 0) -> str:
    job_id = _waiting_job(store, len(states) + waiting)
    for index, state in enumerate(states):
        task = store.get_task(job_id, "chunk", index)
        store.write_task(
            task, {"state": "running", "owner": "w:1:ab", "attempt": 1}, {"progress": state}
        )
    return job_id


@pytest.fixture
def store(backend) -> CheckpointStore:
    return CheckpointStore(backend.storage)


def test_a_plain_state_is_given_as_itself(store: CheckpointStore):
    state = {"batch": 3, "of": 8, "files": ["a.csv", "b.csv"], "ratio": 0.5, "ok": True}
    job_id = _running_job(store, [state, 42, None])

    report = job_status(store, store.get_job(job_id), datetime.now(UTC))

    running = {chunk["index"]: chunk for chunk in to_json(report)["running"]}
    assert running[0]["progress"] == state and not running[0]["progress_omitted"]
    assert running[1]["progress"] == 42
    assert running[2]["progress"] is None and not running[2]["progress_omitted"]
    # The text people see is JSON, as runner report shows a payload, not a Python repr
    assert running[0]["progress_text"] == json.dumps(state, ensure_ascii=False)
    assert "progress 42" in render_status([report])


@pytest.mark.parametrize(
    "state",
    [
        b"\x00raw bytes",
        {"when": datetime(2030, 1, 1, tzinfo=UTC)},
        {1: "int keys"},
        [float("nan"), float("inf")],
    ],
    ids=["bytes", "datetime", "int-keys", "nan"],
)
def test_a_state_json_cannot_hold_is_given_tagged_not_mangled(store: CheckpointStore, state):
    job_id = _running_job(store, [state])

    (chunk,) = to_json(job_status(store, store.get_job(job_id), datetime.now(UTC)))["running"]

    assert chunk["progress"] == user_value(state) and chunk["progress_omitted"] is False
    assert chunk["progress"] != state  # each of these needs a $-tag
    assert len(chunk["progress_text"]) <= PROGRESS_CHARS


def test_a_state_over_the_json_limit_is_omitted(store: CheckpointStore):
    job_id = _running_job(store, [["x" * VALUE_JSON_BYTES]])

    (chunk,) = to_json(job_status(store, store.get_job(job_id), datetime.now(UTC)))["running"]

    assert chunk["progress"] is None and chunk["progress_omitted"] is True
    assert chunk["progress_text"]  # people still see something
    assert len(chunk["progress_text"]) <= PROGRESS_CHARS


# --------------------------------------------------------------------------- failures


def _retrying(store: CheckpointStore, job_id: str, index: int, retry_at: datetime) -> None:
    task = store.get_task(job_id, "chunk", index)
    changes = {
        "state": "retrying",
        "attempt": 1,
        "max_attempts": 5,
        "retryable": True,
        "retry_at": retry_at,
        "error_type": "ValueError",
        "error_message": "row 130",
    }
    store.write_task(task, changes)


def test_a_cancelled_job_has_nothing_waiting_and_nothing_to_retry(backend: Backend):
    # Given a job of 8 chunks, chunk 1 failed and due again in 30 s, cancelled
    clock = backend.clock or FakeClock()
    store = CheckpointStore(backend.storage, clock)
    job_id = _waiting_job(store, 8)
    _retrying(store, job_id, 1, clock.now() + timedelta(seconds=30))
    manage.cancel(job_id, "wrong input", storage=backend.storage, clock=clock)

    # When status is read a minute later
    clock.advance(60)
    typed = job_status(store, store.get_job(job_id), clock.now())
    status = to_json(typed)

    # Then the 7 chunks never claimed are cancelled, not waiting, and chunk 1 has no
    # next try (its message is deleted unrun when it surfaces)
    assert status["chunks"]["waiting"] == 0 and status["chunks"]["cancelled"] == 7
    (failed,) = status["failed"]
    assert failed["retry_at"] is None and failed["retry_due"] is False
    text = render_status([typed])
    assert "running 0  cancelled 7  failed 1  poisoned 0" in text
    assert "failed  chunk #1 attempt 1 of 5, not retried (cancelled): ValueError" in text
    assert "next try" not in text


def test_a_running_jobs_unclaimed_chunks_are_waiting_not_cancelled(store: CheckpointStore):
    job_id = _running_job(store, [None], waiting=2)

    typed = job_status(store, store.get_job(job_id), datetime.now(UTC))
    status = to_json(typed)

    assert (status["chunks"]["waiting"], status["chunks"]["cancelled"]) == (2, 0)
    assert "running 1  waiting 2  failed 0  poisoned 0" in render_status([typed])


def test_a_retry_that_is_due_says_it_waits_for_a_worker(store: CheckpointStore):
    # Given a chunk whose retry fell due 65 s ago, its message not yet received
    now = datetime.now(UTC)
    job_id = _running_job(store, [None, None])
    _retrying(store, job_id, 1, now - timedelta(seconds=65))

    typed = job_status(store, store.get_job(job_id), now)
    status = to_json(typed)

    (failed,) = status["failed"]
    assert failed["retry_due"] is True
    assert failed["retry_at"] == utc(now - timedelta(seconds=65))
    assert (
        f"failed  chunk #1 attempt 1 of 5, next try due since {failed['retry_at']} "
        "(waiting for a worker): ValueError: row 130"
    ) in render_status([typed])


def test_a_garbled_planning_record_is_shown_unreadable_and_the_rest_still_counted(
    store: CheckpointStore, backend: Backend
):
    # Given a running job whose planning record another version garbled
    job_id = _running_job(store, [1], waiting=1)
    store.ensure_task(job_id, "plan")
    backend.storage.records.merge(
        layout.TASKS_TABLE,
        layout.control_partition(job_id),
        layout.PLAN_ROW,
        {"attempt": "x"},
        etag=ANY_ETAG,
    )

    # When its status is read, then the record is one unreadable line, no traceback
    report = to_json(job_status(store, store.get_job(job_id), datetime.now(UTC)))
    assert [(bad["kind"], bad["index"]) for bad in report["unreadable"]] == [("plan", 0)]
    assert "attempt 'x' is not a whole number" in report["unreadable"][0]["problem"]
    # and the chunks are counted as before
    assert report["chunks"]["running"] == 1 and report["chunks"]["waiting"] == 1
