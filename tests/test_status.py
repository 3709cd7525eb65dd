"""What ``runner status`` reports of running chunks: the state itself for tools
(``--json``), a short text for people."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from checkpoint.store import CheckpointStore
from runner.render import render_status
from runner.status import PROGRESS_CHARS, job_status


def _running_job(store: CheckpointStore, states: list[Any]) -> str:
    job_id = f"st-{uuid.uuid4().hex[:10]}"
    job, _ = store.create_job(job_id, "tests:Job", "status-q", {})
    store.add_chunks(job_id, 0, list(range(len(states))))
    store.update_job(job, state="running", total=len(states))
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

    running = {chunk["index"]: chunk for chunk in report["running"]}
    assert running[0]["progress"] == state and not running[0]["progress_omitted"]
    assert running[1]["progress"] == 42
    assert running[2]["progress"] is None and not running[2]["progress_omitted"]
    assert running[0]["progress_text"] == repr(state)
    assert "progress 42" in render_status([report])


@pytest.mark.parametrize(
    "state",
    [
        b"\x00raw bytes",
        {"when": datetime(2030, 1, 1, tzinfo=UTC)},
        {1: "int keys"},
        ["x" * 5000],
    ],
    ids=["bytes", "datetime", "int-keys", "too-large"],
)
def test_a_state_json_cannot_hold_exactly_is_omitted_not_mangled(store: CheckpointStore, state):
    job_id = _running_job(store, [state])

    (chunk,) = job_status(store, store.get_job(job_id), datetime.now(UTC))["running"]

    assert chunk["progress"] is None and chunk["progress_omitted"] is True
    assert chunk["progress_text"]  # people still see something
    assert len(chunk["progress_text"]) <= PROGRESS_CHARS
