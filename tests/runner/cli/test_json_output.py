"""Every ``--json`` output keeps one convention (docs/cli.md, "JSON output";
runner/cli/json_form.py): snake_case keys, times in UTC ending in ``Z`` under keys ending in
``_on``, ``_at`` or ``_until``, durations in ``*_seconds``, fractions 0-1 in
``*_fraction``, and the user's values as JSON, tagged where JSON cannot hold them.

The commands run in this process (click's runner): status, poison list and report against
a job worked by the worker's own code, on both backends (the :class:`World` of
tests/runner/worker/tasks/test_task_lifecycle.py); cancel, pause, resume, delete and purge on an
embedded store.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.records import CHECKPOINT_ON
from checkpoint.storage import ANY_ETAG
from checkpoint.store import CheckpointStore
from runner.cli import commands as cli
from runner.cli.json_form import user_value, utc
from runner.cli.render import render_report
from runner.cli.status import REPORT_COLUMNS, failure_report
from tests.azurite import Azurite
from tests.runner.world import Verdicts, World


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``):
    ``status --json`` reads every active job of its store in full."""
    return own_azurite


SNAKE_CASE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
UTC_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
ANY_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::[\d.]+)?(?:Z|[+-]\d{2}:?\d{2})?")
TIME_KEYS = ("_on", "_at", "_until")
#: Keys whose values are the user's own: any keys inside, tags where JSON falls short.
USER_VALUE_KEYS = {"progress", "payload"}
TAGS = {"$bytes", "$datetime", "$float", "$map"}


def broken_rules(value: Any, key: str = "") -> list[str]:
    """Where ``value`` (a command's JSON, decoded) breaks the convention."""
    if isinstance(value, dict):
        found = []
        for name, item in value.items():
            if not SNAKE_CASE.fullmatch(name):
                found.append(f"{key}.{name}: key is not snake_case")
            check = _broken_user_value if name in USER_VALUE_KEYS else broken_rules
            found += check(item, f"{key}.{name}" if key else name)
        return found
    if isinstance(value, list):
        return [problem for item in value for problem in broken_rules(item, key)]
    return _broken_scalar(value, key)


def _broken_scalar(value: Any, key: str) -> list[str]:
    name = key.rsplit(".", 1)[-1]
    if name.endswith(TIME_KEYS):
        ok = value is None or (isinstance(value, str) and UTC_TIME.fullmatch(value))
        return [] if ok else [f"{key}: {value!r} is not a UTC time ending in Z"]
    if isinstance(value, str) and ANY_TIME.fullmatch(value):
        return [f"{key}: a time under a key not ending in {TIME_KEYS}"]
    if name.endswith("_seconds"):
        ok = value is None or (isinstance(value, int | float) and not isinstance(value, bool))
        return [] if ok else [f"{key}: {value!r} is not a number of seconds"]
    if name.endswith("_fraction"):
        ok = value is None or (isinstance(value, int | float) and 0 <= value <= 1)
        return [] if ok else [f"{key}: {value!r} is not a fraction 0-1"]
    return []


def _broken_user_value(value: Any, key: str) -> list[str]:
    if isinstance(value, list):
        return [problem for item in value for problem in _broken_user_value(item, key)]
    if not isinstance(value, dict):
        return []
    if len(value) == 1 and next(iter(value)).startswith("$"):
        ((tag, inner),) = value.items()
        if tag not in TAGS:
            return [f"{key}: unknown tag {tag}"]
        if tag == "$map":
            return [p for pair in inner for p in _broken_user_value(pair, key)]
        return [] if isinstance(inner, str) else [f"{key}: {tag} holds {inner!r}"]
    return [p for item in value.values() for p in _broken_user_value(item, key)]


#: Chunk 0's payload: bytes and a datetime, which JSON cannot hold as they are.
POISONED_PAYLOAD = {"act": "fail", "raw": b"\x00\xff", "when": datetime(2030, 1, 2, tzinfo=UTC)}
#: Chunk 2's state while it runs.
RUNNING_STATE = {"rows": b"\x01", 7: "seven"}


def _job_with_each_kind_of_failure(world: World) -> str:
    """Chunk 0 poisoned at once by an error that will not get better, chunk 1 failed
    once and retrying, chunk 2 running, chunk 3 waiting."""
    job_id = world.job([POISONED_PAYLOAD, {"act": "fail"}, {"act": "ok"}, {"act": "ok"}])
    world.monkeypatch.setattr(Verdicts, "non_retryable", (ValueError,))
    world.send(job_id, index=0)
    world.deliver()
    world.monkeypatch.setattr(Verdicts, "non_retryable", ())
    world.send(job_id, index=1)
    world.deliver()
    changes = {
        "state": "running",
        "owner": "vm:1:abcd",
        "attempt": 1,
        "lease_until": world.clock.now() + timedelta(seconds=30),
        CHECKPOINT_ON: world.clock.now(),
    }
    world.store.write_task(world.task(job_id, index=2), changes, {"progress": RUNNING_STATE})
    return job_id


def _run(world: World, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    storage = world.backend.storage
    monkeypatch.setattr(cli, "open_storage", lambda location, **_: contextlib.nullcontext(storage))
    done = CliRunner().invoke(cli.cli, list(args))
    assert done.exit_code == 0, done.output
    return done.output


def test_status_poison_list_and_report_keep_one_json_convention(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    job_id = _job_with_each_kind_of_failure(world)

    status = json.loads(_run(world, monkeypatch, "status", job_id, "--json"))
    every_job = json.loads(_run(world, monkeypatch, "status", "--json"))
    poisoned = json.loads(_run(world, monkeypatch, "poison", "list", job_id, "--json"))
    report_lines = _run(world, monkeypatch, "report", job_id, "--json").splitlines()
    report = [json.loads(line) for line in report_lines]

    # Each output keeps the rules
    for output in (status, every_job, poisoned, report):
        assert broken_rules(output) == []
    # The failures have one shape everywhere: status's, poison list's, the report's
    assert poisoned == status["poisoned"]
    assert set(status["failed"][0]) == set(poisoned[0]) <= set(REPORT_COLUMNS)
    assert [set(entry) for entry in report] == [set(REPORT_COLUMNS)] * 2
    # The user's values are JSON, not a Python repr: bytes, datetimes, int keys tagged
    entry = {e["index"]: e for e in report}
    assert entry[0]["payload"] == {
        "act": "fail",
        "raw": {"$bytes": "AP8="},
        "when": {"$datetime": "2030-01-02T00:00:00.000000Z"},
    }
    assert entry[1]["payload"] == {"act": "fail"}
    (running,) = status["running"]
    assert running["progress"] == {"$map": [["rows", {"$bytes": "AQ=="}], [7, "seven"]]}
    # Whether trying again could help, and when the next try is
    assert (entry[0]["state"], entry[0]["retryable"], entry[0]["retry_at"]) == (
        "poisoned",
        False,
        None,
    )
    assert (entry[1]["state"], entry[1]["retryable"]) == ("retrying", True)
    assert entry[1]["retry_at"] == status["failed"][0]["retry_at"] is not None
    assert status["created_on"] == utc(world.job_record(job_id).created_on)


def test_the_report_says_when_a_failure_was_not_retryable(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    job_id = _job_with_each_kind_of_failure(world)

    text = _run(world, monkeypatch, "report", job_id)
    as_csv = _run(world, monkeypatch, "report", job_id, "--csv")
    poisoned = _run(world, monkeypatch, "poison", "list", job_id)
    status = _run(world, monkeypatch, "status", job_id)

    assert "chunk #0 poisoned after attempt 1 of 2 (not retryable)" in text
    assert "  payload: " + json.dumps(user_value(POISONED_PAYLOAD)) in text
    assert "chunk #1 retrying after attempt 1 of 2, next try at " in text
    assert "(not retryable)" not in text.split("chunk #1", 1)[1]
    assert "  chunk #0 after 1 attempt(s) (not retryable): ValueError: bad row 0" in poisoned
    assert "  poisoned chunk #0 after 1 attempt(s) (not retryable): ValueError" in status
    rows = list(csv.DictReader(io.StringIO(as_csv)))
    assert list(rows[0]) == list(REPORT_COLUMNS)
    assert rows[0]["payload"] == json.dumps(user_value(POISONED_PAYLOAD))
    said = (rows[0]["retryable"], rows[0]["retry_at"], rows[1]["retryable"])
    assert said == ("false", "", "true")


def test_the_report_gives_no_payload_for_planning_and_says_when_it_cannot_read_one(
    world: World,
):
    # Given a job whose planning is retrying and whose chunk 1's record was hand-edited
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    failure = {"state": "retrying", "attempt": 1, "error_type": "OSError", "error_message": "x"}
    world.set_task(job_id, "plan", **failure, retry_at=world.clock.now())
    world.backend.storage.records.merge(
        layout.TASKS_TABLE,
        layout.shard_partition(job_id, layout.shard_of(1)),
        layout.chunk_row(1),
        {**failure, "payload": "typed by hand"},
        etag=ANY_ETAG,
    )

    entries = list(failure_report(world.store, job_id))

    assert [(e["kind"], e["payload"], e["payload_omitted"]) for e in entries] == [
        ("plan", None, False),
        ("chunk", None, True),
    ]
    assert entries[0]["retry_due"] is True and entries[0]["retryable"] is None
    text = render_report(job_id, entries)
    assert "planning retrying after attempt 1, next try due since " in text
    assert "chunk #1 retrying after attempt 1\n  payload: (not shown: unreadable" in text


def test_each_way_to_be_poisoned_says_whether_trying_again_could_help(world: World):
    # Given chunk 0 claimed as often as it may be, its last attempt having said its error
    # would not get better, and chunk 1 whose payload was typed by hand
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    world.set_task(job_id, state="running", attempt=2, retryable=False)
    world.backend.storage.records.merge(
        layout.TASKS_TABLE,
        layout.shard_partition(job_id, layout.shard_of(1)),
        layout.chunk_row(1),
        {"payload": "typed by hand"},
        etag=ANY_ETAG,
    )

    # When each is delivered
    for index in (0, 1):
        world.send(job_id, index=index)
        world.deliver()

    # Then chunk 0 ran out of attempts (its error was one to retry), chunk 1 cannot be
    # read, which no retry mends
    entries = {e["index"]: e for e in failure_report(world.store, job_id)}
    assert (entries[0]["state"], entries[0]["retryable"], entries[0]["max_attempts"]) == (
        "poisoned",
        True,
        2,
    )
    assert (entries[1]["state"], entries[1]["retryable"]) == ("poisoned", False)


def test_cancel_pause_resume_delete_and_purge_keep_it_too(tmp_path: Path):
    storage = str(tmp_path / "store")
    with open_storage(storage) as opened:
        store = CheckpointStore(opened)
        for job_id in ("json-1", "json-2"):
            job, _ = store.create_job(job_id, "tests:Job", "json-q", {})
            store.update_job(job, state="running", total=0)

    def run(*args: str) -> Any:
        done = CliRunner().invoke(cli.cli, [*args, "--json", "--storage", storage])
        assert done.exit_code == 0, done.output
        return json.loads(done.output)

    outputs = [
        run("pause", "json-1"),
        run("resume", "json-1"),
        run("cancel", "json-1"),
        run("delete", "json-1"),
        run("purge", "--older-than", "1s", "--dry-run"),
    ]

    for output in outputs:
        assert broken_rules(output) == []
    assert UTC_TIME.fullmatch(outputs[2]["cancelled_on"])
    assert UTC_TIME.fullmatch(outputs[3]["updated_on"])


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (b"\x00\xff", {"$bytes": "AP8="}),
        (datetime(2030, 1, 1, 12, tzinfo=UTC), {"$datetime": "2030-01-01T12:00:00.000000Z"}),
        (float("nan"), {"$float": "nan"}),
        (float("-inf"), {"$float": "-inf"}),
        ({1: "a", "b": 2}, {"$map": [[1, "a"], ["b", 2]]}),
        ({"$bytes": "a user's own key"}, {"$map": [["$bytes", "a user's own key"]]}),
        ({"$x": 1, "y": (2, 3)}, {"$x": 1, "y": [2, 3]}),
        ([1, "a", None, True, 0.5], [1, "a", None, True, 0.5]),
    ],
    ids=["bytes", "datetime", "nan", "-inf", "int-key", "tag-like-key", "plain", "list"],
)
def test_a_users_value_is_json_tagged_where_json_falls_short(value: Any, shown: Any):
    assert user_value(value) == shown
    assert broken_rules({"payload": shown}) == []


def test_the_rules_catch_what_they_check():
    # Guards the checker against passing vacuously
    assert broken_rules({"createdOn": None}) == [".createdOn: key is not snake_case"]
    assert broken_rules({"updated_on": "2030-01-01T00:00:00+00:00"})
    assert broken_rules({"when": "2030-01-01T00:00:00.000000Z"})
    assert broken_rules({"beat_seconds": "5"}) and broken_rules({"x_fraction": 1.5})
    assert broken_rules({"payload": {"$pickle": "..."}})
    assert broken_rules({"payload": {"$bytes": 7}})
    assert utc(datetime(2030, 1, 1, 13, tzinfo=UTC).astimezone()) == "2030-01-01T13:00:00.000000Z"


def test_the_reports_tracebacks_start_at_the_users_code_and_full_keeps_all(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    # Given a chunk that failed in the job's own code, run by the worker's own code
    job_id = _job_with_each_kind_of_failure(world)
    stored = json.loads(_run(world, monkeypatch, "report", job_id, "--json").splitlines()[0])
    engine = [line for line in stored["traceback"].splitlines() if "/runner/worker/" in line]
    assert engine  # what the worker stored holds the engine's frames

    # When the report is read as text, then its traceback starts at the job's frames,
    # the engine's counted in one line; --full and --json keep them all
    text = _run(world, monkeypatch, "report", job_id)
    chunk_0 = text.split("chunk #0", 1)[1].split("chunk #1", 1)[0]
    lines = chunk_0.splitlines()
    at = lines.index("    Traceback (most recent call last):")
    engine_frames = [line for line in engine if line.strip().startswith("File ")]
    assert lines[at + 1] == (
        f"      [{len(engine_frames)} engine frame(s) above your code left out: runner report "
        "--full shows them]"
    )
    assert lines[at + 2].startswith('      File "') and "tests/runner/world.py" in lines[at + 2]
    assert not any(frame.strip() in chunk_0 for frame in engine)
    full = _run(world, monkeypatch, "report", job_id, "--full")
    assert all(frame.strip() in full for frame in engine)
