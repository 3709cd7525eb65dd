"""``runner limit`` (runner/cli/limit_command.py) and the limits ``runner status`` shows
per job, in text and JSON; bad input is one line, exit 1, and writes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import SystemClock
from checkpoint.limits.book import RUNNING_ROW, LimitBook
from checkpoint.limits.rates import parse_rate
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook, WorkerRecord
from jobs.submit import submit
from runner.cli import commands
from runner.cli.limit_view import limit_line, limit_status, read_limits
from tests.backends import Backend
from tests.runner.cli.invoke import one_error_line, run_runner
from tests.runner.worker.test_loop import TwoAtOnce


def runner(store: Path, *args: str) -> Result:
    if not store.exists():  # made as `runner submit` or `runner start` make it
        with open_storage(str(store)) as opened:
            CheckpointStore(opened).ensure()
    result = CliRunner().invoke(commands.cli, [*args, "--storage", str(store)])
    assert result.exit_code == 0, result.output
    return result


def test_setting_a_limit_where_there_is_no_store_creates_nothing(tmp_path: Path):
    # A mistyped --storage: one line, exit 1, and no store left behind
    line = one_error_line(run_runner(tmp_path, "limit", "orders-db", "50/s", "--storage", "sotre"))
    assert line.startswith("runner: error: no store at ")
    assert not (tmp_path / "sotre").exists()


def test_limits_are_set_by_hand_listed_and_cleared(tmp_path: Path):
    store = tmp_path / "store"
    said = runner(store, "limit", "orders-db", "50/s").output
    assert said == "orders-db  rate 50/s  (set by hand)  50.0/50.0 tokens\n"
    runner(store, "limit", "migrate-orders", "--running", "20")
    runner(store, "limit", "migrate-orders", "6000/min")
    listed = runner(store, "limit").output.splitlines()
    assert listed == [
        "migrate-orders  rate 6000/min  (set by hand)  100.0/100.0 tokens",
        "migrate-orders  running 20  (set by hand)  0/20 running",
        "orders-db  rate 50/s  (set by hand)  50.0/50.0 tokens",
    ]
    shown = json.loads(runner(store, "limit", "migrate-orders", "--json").output)
    assert [(one["kind"], one["value"], one["set_by"]) for one in shown] == [
        ("rate", "6000/min", "hand"),
        ("running", "20", "hand"),
    ]
    assert shown[0]["rate_per_second"] == 100.0 and shown[1]["max_running"] == 20
    assert runner(store, "limit", "orders-db", "--clear").output.startswith("orders-db: cleared")
    assert json.loads(runner(store, "limit", "--json").output)[-1]["name"] == "migrate-orders"


def test_no_limits_at_all_says_so(tmp_path: Path):
    runner(tmp_path / "store", "limit", "x", "1/s")
    runner(tmp_path / "store", "limit", "x", "--clear")
    assert runner(tmp_path / "store", "limit").output == "no limits\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["limit", "x", "5"], "RATE must be a count per unit, like '200/s'"),
        (["limit", "x", "--running", "0"], "--running must be a whole number >= 1, not '0'"),
        (["limit", "--clear"], "name the limit"),
        (["limit", "a/b", "5/s"], "limit name 'a/b' is not valid"),
        (["limit", "x", "5/s", "--clear"], "--clear takes no RATE or --running"),
        (["limit", "nothing"], "no limit named 'nothing'; set one with RATE or --running"),
        (["limit", "nothing", "--clear"], "no limit named 'nothing'"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(tmp_path: Path, args: list[str], says: str):
    runner(tmp_path / "store", "limit", "other", "1/s")  # a store to look in
    result = CliRunner().invoke(commands.cli, [*args, "--storage", str(tmp_path / "store")])
    assert result.exit_code == 1 and says in str(result.exception)


def test_a_bad_limit_command_run_as_a_user_runs_it_is_one_error_line(tmp_path: Path):
    line = one_error_line(run_runner(tmp_path, "limit", "x", "fast", "--storage", "s"))
    assert line == (
        "runner: error: RATE must be a count per unit, like '200/s', '6000/min' or '1/h' "
        "(count > 0), not 'fast'"
    )
    assert not (tmp_path / "s").exists()  # nothing written


def test_status_shows_a_jobs_own_limits_and_the_resources_its_class_names(tmp_path: Path):
    # Given a job of a type with max_running, a resource its class names (as its
    # worker said at start), and another limit of nobody's
    with open_storage(str(tmp_path / "store")) as storage:
        job_id = submit(TwoAtOnce, {"chunks": 1, "seconds": 0}, storage=storage)
        store = CheckpointStore(storage, SystemClock())
        book = LimitBook(storage.records, store.clock)
        book.define_running(TwoAtOnce.queue, 2, TwoAtOnce.job_type(), store.budget())
        book.define_rate("st-db", parse_rate("5/s"), TwoAtOnce.job_type(), store.budget())
        book.set_rate("unrelated", parse_rate("1/s"), store.budget())
    # When status is asked, then the job shows its two, in text and JSON
    text = runner(tmp_path / "store", "status", job_id).output
    assert f"  limit {TwoAtOnce.queue}  running 2  (set by {TwoAtOnce.job_type()})  0/2" in text
    assert "  limit st-db  rate 5/s" in text and "unrelated" not in text
    shown = json.loads(runner(tmp_path / "store", "status", job_id, "--json").output)
    assert [(one["name"], one["kind"]) for one in shown["limits"]] == [
        (TwoAtOnce.queue, "running"),
        ("st-db", "rate"),
    ]
    assert shown["limits"][0]["running"] == 0 and shown["limits"][0]["named_by"] == [
        TwoAtOnce.job_type()
    ]


def test_a_limit_that_cannot_be_read_is_logged_and_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    runner(tmp_path / "store", "limit", "good", "1/s")
    runner(tmp_path / "store", "limit", "garbled", "--running", "2")
    with open_storage(str(tmp_path / "store")) as storage:
        storage.records.upsert(layout.LIMITS_TABLE, "garbled", RUNNING_ROW, {"holders": "{"})
    assert runner(tmp_path / "store", "limit").output.startswith("good  rate 1/s")
    assert "a limit cannot be read: running limit 'garbled'" in caplog.text


def _beat(store: CheckpointStore, worker_id: str, tasks: tuple[str, ...], **changes: Any) -> None:
    now = store.clock.now()
    fields: dict[str, Any] = {
        "worker_id": worker_id,
        "host": "vm",
        "pid": 1,
        "queues": ("slow",),
        "job_types": ("m:Slow",),
        "concurrency": 2,
        "tasks": tasks,
        "running": len(tasks),
        "state": "serving",
        "started_on": now,
        "seen_on": now,
        "beat_seconds": 5.0,
    }
    WorkerBook(store.storage.records).beat(WorkerRecord(**{**fields, **changes}), store.budget())


def test_a_running_limit_counts_the_chunks_running_before_it_was_set(backend: Backend):
    # Given two chunks of a job running (as their worker's heartbeat says) when
    # `runner limit NAME --running 1` is set: they hold no slot, taken before there
    # was a limit to take from
    store = CheckpointStore(backend.storage, backend.clock or SystemClock())
    name, job_id = f"slow-{uuid.uuid4().hex[:8]}", f"slow-job-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "m:Slow", name, None)
    other = f"other-{uuid.uuid4().hex[:8]}"
    store.create_job(other, "m:Other", f"{name}-other", None)
    tag = uuid.uuid4().hex[:6]
    _beat(store, f"vm:1:{tag}", (f"{job_id}#0", f"{job_id}:plan", f"{other}#0"))
    _beat(store, f"vm:2:{tag}", (f"{job_id}#1", "no-such-job#3"))
    gone_at = store.clock.now() - timedelta(minutes=5)
    _beat(store, f"vm:3:{tag}", (f"{job_id}#2",), seen_on=gone_at)  # dead: not running
    book = LimitBook(store.storage.records, store.clock)
    book.set_running(name, 1, store.budget())
    # When the limits are read, then the limit counts both chunks, over its 1
    now = store.clock.now()
    shown = [one for one in read_limits(store, now) if one.name == name]
    assert [(one.kind, one.running, one.max_running) for one in shown] == [("running", 2, 1)]
    assert limit_line(shown[0]) == f"{name}  running 1  (set by hand)  2/1 running (over)"
    # And a chunk admitted under a slot, not yet in a heartbeat, counts too
    book.take_slots(name, f"vm:4:{tag}", 1, 30.0, store.budget())
    assert [one.running for one in read_limits(store, now) if one.name == name] == [2]
    _beat(store, f"vm:1:{tag}", ())
    _beat(store, f"vm:2:{tag}", ())
    assert [one.running for one in read_limits(store, now) if one.name == name] == [1]
    assert limit_line(limit_status(book.get(name, store.budget()), now)[0]).endswith(
        "  1/1 running"
    )


def test_runner_limit_shows_the_chunks_running_over_the_limit(tmp_path: Path):
    with open_storage(str(tmp_path / "store")) as storage:
        store = CheckpointStore(storage, SystemClock())
        store.create_job("slow-1", "m:Slow", "slow", None)
        _beat(store, "vm:1:abcd", ("slow-1#0", "slow-1#1"))
    said = runner(tmp_path / "store", "limit", "slow", "--running", "1").output
    assert said == "slow  running 1  (set by hand)  2/1 running (over)\n"
    shown = json.loads(runner(tmp_path / "store", "limit", "--json").output)
    assert [(one["name"], one["running"], one["max_running"]) for one in shown] == [("slow", 2, 1)]
