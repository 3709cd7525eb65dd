"""The typed status (runner/cli/status_types.py) and its one JSON form
(:func:`runner.cli.json_form.to_json`): a rich snapshot built by hand, its JSON compared
key by key and in order with the form docs/cli.md documents for ``status --json``, and
the text view drawn from the same values."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.cli.json_form import to_json
from runner.cli.render import render_poisoned, render_status
from runner.cli.status_types import (
    ChunkCounts,
    FailedTask,
    JobStatus,
    LeaseStatus,
    LimitStatus,
    RunningChunk,
    Snapshot,
    Unreadable,
    UnreadableJob,
    WorkerStatus,
)
from tests.runner.cli.test_json_output import broken_rules

NOW = datetime(2026, 11, 25, 17, 20, 0, 500000, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def _failed(index: int, state: str, retry_at: datetime | None, retryable: bool) -> FailedTask:
    return FailedTask(
        kind="chunk",
        index=index,
        attempt=2,
        state=state,
        max_attempts=5,
        retryable=retryable,
        retry_at=retry_at,
        retry_due=False,
        error_type="ValueError",
        error_message=f"row {index}",
        traceback=f"Traceback (most recent call last):\nValueError: row {index}\n",
    )


WORKER = WorkerStatus(
    worker_id="vm:11234:1cc4",
    host="vm",
    pid=11234,
    queues=("copy-rows",),
    job_types=("example:CopyRows",),
    concurrency=2,
    running=1,
    tasks=("copy-rows-1#0",),
    state="serving",
    gone=False,
    started_on=_at(-60),
    seen_on=_at(-2),
    seen_ago_seconds=2.0,
    beat_seconds=5.0,
)

#: A paused job with a running chunk, a failed one, a poisoned one, and a record that
#: cannot be read.
RICH = JobStatus(
    job_id="copy-rows-1",
    job_type="example:CopyRows",
    queue="copy-rows",
    queues=("copy-rows",),
    state="running",
    error=None,
    paused=True,
    paused_on=_at(-10),
    drain=False,
    cancelled_on=None,
    cancel_reason=None,
    created_on=_at(-70),
    updated_on=_at(-10),
    last_progress_at=_at(-1),
    planning_done=True,
    chunks=ChunkCounts(total=8, done=4, running=1, waiting=0, failed=1, poisoned=1, cancelled=0),
    progress_fraction=0.55,
    chunks_per_second=0.1,
    eta_seconds=35.0,
    running=(
        RunningChunk(
            index=0,
            worker="vm:11234:1cc4",
            attempt=1,
            lease_until=_at(30),
            lease_expired=False,
            progress={"$bytes": "AQ=="},
            progress_omitted=False,
            progress_text="b'\\x01'",
            progress_fraction=0.4,
            progress_done=40,
            progress_total=100,
            checkpoint_on=_at(-1),
            started_on=_at(-20),
        ),
    ),
    failed=(_failed(1, "retrying", _at(40), True),),
    poisoned=(_failed(2, "poisoned", None, False),),
    finalize=None,
    unreadable=(Unreadable(kind="chunk", index=7, problem="chunk 7 of job 'copy-rows-1': x"),),
    workers=(WORKER,),
    limits=(
        LimitStatus(
            name="copy-rows",
            kind="running",
            value="20",
            set_by="hand",
            rate_per_second=None,
            tokens=None,
            burst=None,
            max_running=20,
            running=3,
            named_by=(),
        ),
    ),
    lease=LeaseStatus(
        job_type="example:CopyRows",
        state="pinned",
        lease_seconds=120,
        learned_seconds=42,
        pinned_seconds=120,
        low_seconds=10,
        high_seconds=600,
        lateness_percentile_seconds=20.0,
        lateness_samples=3400,
        lost_last_hour=2,
    ),
)


def _failed_json(index: int, state: str, retry_at: str | None, retryable: bool) -> dict[str, Any]:
    return {
        "kind": "chunk",
        "index": index,
        "attempt": 2,
        "state": state,
        "max_attempts": 5,
        "retryable": retryable,
        "retry_at": retry_at,
        "retry_due": False,
        "error_type": "ValueError",
        "error_message": f"row {index}",
        "traceback": f"Traceback (most recent call last):\nValueError: row {index}\n",
    }


#: ``RICH`` in the form docs/cli.md documents, keys in its order.
RICH_JSON = {
    "job_id": "copy-rows-1",
    "job_type": "example:CopyRows",
    "queue": "copy-rows",
    "queues": ["copy-rows"],
    "state": "running",
    "error": None,
    "paused": True,
    "paused_on": "2026-11-25T17:19:50.500000Z",
    "drain": False,
    "cancelled_on": None,
    "cancel_reason": None,
    "created_on": "2026-11-25T17:18:50.500000Z",
    "updated_on": "2026-11-25T17:19:50.500000Z",
    "last_progress_at": "2026-11-25T17:19:59.500000Z",
    "planning_done": True,
    "chunks": {
        "total": 8,
        "done": 4,
        "running": 1,
        "waiting": 0,
        "failed": 1,
        "poisoned": 1,
        "cancelled": 0,
    },
    "progress_fraction": 0.55,
    "chunks_per_second": 0.1,
    "eta_seconds": 35.0,
    "running": [
        {
            "index": 0,
            "worker": "vm:11234:1cc4",
            "attempt": 1,
            "lease_until": "2026-11-25T17:20:30.500000Z",
            "lease_expired": False,
            "progress": {"$bytes": "AQ=="},
            "progress_omitted": False,
            "progress_text": "b'\\x01'",
            "progress_fraction": 0.4,
            "progress_done": 40,
            "progress_total": 100,
            "checkpoint_on": "2026-11-25T17:19:59.500000Z",
            "started_on": "2026-11-25T17:19:40.500000Z",
        }
    ],
    "failed": [_failed_json(1, "retrying", "2026-11-25T17:20:40.500000Z", True)],
    "poisoned": [_failed_json(2, "poisoned", None, False)],
    "finalize": None,
    "unreadable": [{"kind": "chunk", "index": 7, "problem": "chunk 7 of job 'copy-rows-1': x"}],
    "workers": [
        {
            "worker_id": "vm:11234:1cc4",
            "host": "vm",
            "pid": 11234,
            "queues": ["copy-rows"],
            "job_types": ["example:CopyRows"],
            "concurrency": 2,
            "running": 1,
            "tasks": ["copy-rows-1#0"],
            "state": "serving",
            "gone": False,
            "started_on": "2026-11-25T17:19:00.500000Z",
            "seen_on": "2026-11-25T17:19:58.500000Z",
            "seen_ago_seconds": 2.0,
            "beat_seconds": 5.0,
        }
    ],
    "limits": [
        {
            "name": "copy-rows",
            "kind": "running",
            "value": "20",
            "set_by": "hand",
            "rate_per_second": None,
            "tokens": None,
            "burst": None,
            "max_running": 20,
            "running": 3,
            "named_by": [],
        }
    ],
    "priority": 0,
    "after": [],
    "waiting_on": [],
    "blocked": None,
    "pipeline": None,
    "redriving": False,
    "lease": {
        "job_type": "example:CopyRows",
        "state": "pinned",
        "lease_seconds": 120,
        "learned_seconds": 42,
        "pinned_seconds": 120,
        "low_seconds": 10,
        "high_seconds": 600,
        "lateness_percentile_seconds": 20.0,
        "lateness_samples": 3400,
        "lost_last_hour": 2,
        "error": None,
    },
}


def test_the_json_of_a_typed_job_is_the_documented_form_in_its_order():
    shown = to_json(RICH)

    assert shown == RICH_JSON
    # the same text, so the keys come in the documented order too
    assert json.dumps(shown, indent=2) == json.dumps(RICH_JSON, indent=2)
    assert broken_rules(shown) == []


def test_an_unreadable_job_is_four_keys_and_a_snapshot_holds_both_kinds():
    bad = UnreadableJob(
        job_id="bad-1",
        error="job 'bad-1': garbled",
        unreadable=(Unreadable(kind="job", index=0, problem="job 'bad-1': garbled"),),
    )
    snapshot = Snapshot(taken_on=NOW, jobs=(RICH, bad), workers=(WORKER,))

    shown = to_json(snapshot)

    assert list(shown) == ["taken_on", "jobs", "workers", "counts"]
    assert shown["taken_on"] == "2026-11-25T17:20:00.500000Z"
    assert shown["jobs"][0] == RICH_JSON
    assert json.dumps(shown["jobs"][1]) == json.dumps(
        {
            "job_id": "bad-1",
            "state": "unreadable",
            "error": "job 'bad-1': garbled",
            "unreadable": [{"kind": "job", "index": 0, "problem": "job 'bad-1': garbled"}],
        }
    )
    assert shown["workers"] == RICH_JSON["workers"]


def test_a_chunk_with_no_checkpoint_yet_says_so_in_text():
    fresh = replace(RICH.running[0], progress=None, progress_text="None")
    text = render_status([replace(RICH, running=(fresh,))])

    assert ", no checkpoint yet, 40% done (40/100)" in text
    assert "progress None" not in text


def test_the_text_view_reads_the_same_values():
    text = render_status([RICH])

    assert text.splitlines() == [
        "copy-rows-1  example:CopyRows  running (paused since 2026-11-25T17:19:50.500000Z; "
        "`runner resume` continues)",
        "  [################..............]  55%  4/8 done",
        "  running 1  waiting 0  failed 1  poisoned 1",
        "  running #0 on vm:11234:1cc4 attempt 1, lease until 2026-11-25T17:20:30.500000Z, "
        "progress b'\\x01', 40% done (40/100)",
        "  failed  chunk #1 attempt 2 of 5, next try at 2026-11-25T17:20:40.500000Z: "
        "ValueError: row 1",
        "  poisoned chunk #2 after 2 attempt(s) (not retryable): ValueError: row 2",
        "  unreadable: chunk 7 of job 'copy-rows-1': x",
        "  workers: vm:11234:1cc4 (1 running)",
        "  limit copy-rows  running 20  (set by hand)  3/20 running",
        "  lease 120 s (pinned; learned 42 s, bounds 10-600 s)  lateness p99.9 20 s of 3,400 "
        "renewals  2 lost in the last hour",
    ]
    assert render_poisoned("copy-rows-1", RICH.poisoned).splitlines()[1:] == [
        "  chunk #2 after 2 attempt(s) (not retryable): ValueError: row 2",
        "      Traceback (most recent call last):",
        "      ValueError: row 2",
    ]
