"""``runner lease`` (runner/cli/lease_command.py) and the lease ``runner status`` shows per
job, in text and JSON, on both backends: rows written by the workers' own code
(:class:`~runner.worker.leases.sizes.LeaseSizes`), pinned, released and forgotten by the
command; bad input is one line, exit 1, and writes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.lease_book import LeaseBook
from checkpoint.retries import STANDALONE, Budget
from checkpoint.storage import Record
from checkpoint.store import CheckpointStore
from jobs.job import ChunkedJob
from runner.cli import commands
from runner.cli.lease_view import lease_status
from runner.worker.leases.sizes import LeaseSizes
from tests.backends import Backend
from tests.runner.cli.invoke import one_error_line, run_runner
from tests.runner.cli.test_json_output import broken_rules


def adaptive_class() -> type[ChunkedJob]:
    """A job class of its own type (its own row: Azurite's table is shared)."""
    name = f"Adaptive{uuid.uuid4().hex[:10]}"
    return type(name, (ChunkedJob,), {"queue": name.lower()})


@pytest.fixture
def location(backend: Backend, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The backend's store as a ``--storage`` value, its tables there."""
    CheckpointStore(backend.storage).ensure()
    if backend.name == "embedded":
        return str(tmp_path / "store")
    return str(request.getfixturevalue("azurite").connection_string)


def runner(location: str, *args: str) -> Result:
    result = CliRunner().invoke(commands.cli, [*args, "--storage", location])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def learned(backend: Backend, cls: type[ChunkedJob]) -> LeaseSizes:
    """A worker's sizes for ``cls`` after a renewal 8 s late and a lost lease,
    reported to the type's row (its clock now: the last hour is the real one)."""
    sizes = LeaseSizes(LeaseBook(backend.storage.records), [cls], FakeClock(datetime.now(UTC)))
    sizes.renewed(cls.job_type(), 8.0)  # 1.5 x the 10 s bucket: a 50 s lease
    sizes.lost(cls.job_type(), 10)  # the row: twice the 10 s lost, or the 50 s needed
    sizes.exchange()
    return sizes


def test_a_type_its_workers_learned_is_listed_and_shown(backend: Backend, location: str):
    # Given a type whose worker reported a late renewal and a lost lease
    cls = adaptive_class()
    job_type = cls.job_type()
    learned(backend, cls)

    # When the leases are listed, then its line says the lease, how and from what
    listed = runner(location, "lease").output.splitlines()
    line = f"{job_type}  50 s (learned, bounds 10-600 s)  lateness p99.9 10 s of 1 renewal"
    assert f"{line}  1 lost in the last hour" in listed
    # ... and so does the type alone, in text and JSON
    assert runner(location, "lease", job_type).output.startswith(line)
    assert json.loads(runner(location, "lease", job_type, "--json").output) == {
        "job_type": job_type,
        "state": "learned",
        "lease_seconds": 50,
        "learned_seconds": 50,
        "pinned_seconds": None,
        "low_seconds": 10,
        "high_seconds": 600,
        "lateness_percentile_seconds": 10.0,
        "lateness_samples": 1,
        "lost_last_hour": 1,
        "error": None,
    }
    listed_json = json.loads(runner(location, "lease", "--json").output)
    assert broken_rules(listed_json) == []  # the one JSON convention of every --json
    assert [one["lease_seconds"] for one in listed_json if one["job_type"] == job_type] == [50]


def test_a_pin_reaches_the_workers_until_released_and_a_forget_starts_again(
    backend: Backend, location: str
):
    cls = adaptive_class()
    job_type = cls.job_type()
    sizes = learned(backend, cls)

    # A pin: every worker gives it at its next read of the row
    said = runner(location, "lease", job_type, "--pin", "45").output
    assert said.startswith(f"{job_type}  45 s (pinned; learned 50 s, bounds 10-600 s)")
    sizes.exchange()  # (the fake clock stands still: read now, as after 15 s)
    assert sizes.seconds(cls) == 50  # not read yet: the read is due every 15 s
    other = LeaseSizes(LeaseBook(backend.storage.records), [cls], FakeClock())
    other.exchange()
    assert other.seconds(cls) == 45
    shown = json.loads(runner(location, "lease", job_type, "--json").output)
    assert (shown["state"], shown["lease_seconds"], shown["pinned_seconds"]) == ("pinned", 45, 45)

    # Released: what was learned applies again
    said = runner(location, "lease", job_type, "--release").output
    assert said.startswith(f"{job_type}  50 s (learned, bounds 10-600 s)")
    fresh = LeaseSizes(LeaseBook(backend.storage.records), [cls], FakeClock())
    fresh.exchange()
    assert fresh.seconds(cls) == 50

    # Forgotten: no row, so a new worker starts from the lower bound
    said = runner(location, "lease", job_type, "--forget").output
    assert said == f"{job_type}: forgotten; its workers start again from the lower bound\n"
    fresh = LeaseSizes(LeaseBook(backend.storage.records), [cls], FakeClock())
    fresh.exchange()
    assert fresh.seconds(cls) == 10
    result = CliRunner().invoke(commands.cli, ["lease", job_type, "--storage", location])
    assert result.exit_code == 1
    assert str(result.exception).startswith(f"no lease learned or pinned for {job_type!r}")


def test_a_pin_before_any_worker_learned_creates_the_row(backend: Backend, location: str):
    job_type = adaptive_class().job_type()
    shown = json.loads(runner(location, "lease", job_type, "--pin", "604800", "--json").output)
    assert (shown["lease_seconds"], shown["learned_seconds"]) == (604800, 10)
    assert json.loads(runner(location, "lease", job_type, "--forget", "--json").output) == {
        "job_type": job_type,
        "forgotten": True,
    }


def test_an_unreadable_row_is_shown_as_unreadable_with_its_reason(backend: Backend, location: str):
    # Given a type whose row was garbled (by hand, or another version)
    cls = adaptive_class()
    job_type = cls.job_type()
    where = (layout.LEASES_TABLE, layout.LEASES_PARTITION, job_type)
    backend.storage.records.upsert(*where, {"lease_seconds": 30})
    store = CheckpointStore(backend.storage)
    job_id = f"lease-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, job_type, cls.queue, None)

    # Then the list, the type and its jobs' status say so, and why, without failing
    why = f"unreadable: learned lease of {job_type}: no lateness, lost, low_seconds, high_seconds"
    assert f"{job_type}  {why}" in runner(location, "lease").output.splitlines()
    shown = json.loads(runner(location, "lease", job_type, "--json").output)
    assert shown["state"] == "unreadable" and shown["lease_seconds"] is None
    assert shown["error"] == why.removeprefix("unreadable: ")
    assert f"  lease {why}" in runner(location, "status", job_id).output.splitlines()
    status = json.loads(runner(location, "status", job_id, "--json").output)
    assert status["lease"]["state"] == "unreadable"
    # ... and a pin writes a readable row over it
    said = runner(location, "lease", job_type, "--pin", "30").output
    assert said.startswith(f"{job_type}  30 s (pinned; learned 10 s")


def test_a_row_the_backend_cannot_decode_is_unreadable_with_the_backends_reason():
    # An embedded row that is not msgpack any more: the backend says why, in Record.unreadable
    row = Record(layout.LEASES_PARTITION, "m:C", {}, "etag", unreadable="not msgpack")
    shown = lease_status(row, datetime.now(UTC))
    assert (shown.state, shown.error) == ("unreadable", "learned lease of m:C: not msgpack")


def test_status_shows_the_lease_of_a_jobs_type_and_none_for_a_type_without_a_row(
    backend: Backend, location: str
):
    cls, fixed = adaptive_class(), adaptive_class()
    learned(backend, cls)
    store = CheckpointStore(backend.storage)
    job_id, other_id = (f"lease-{uuid.uuid4().hex[:8]}" for _ in range(2))
    store.create_job(job_id, cls.job_type(), cls.queue, None)
    store.create_job(other_id, fixed.job_type(), fixed.queue, None)

    text = runner(location, "status", job_id).output.splitlines()
    assert text[-1] == (
        "  lease 50 s (learned, bounds 10-600 s)  lateness p99.9 10 s of 1 renewal  "
        "1 lost in the last hour"
    )
    shown = json.loads(runner(location, "status", job_id, "--json").output)
    assert list(shown)[-1] == "lease" and shown["lease"]["lease_seconds"] == 50
    assert "  lease " not in runner(location, "status", other_id).output
    assert json.loads(runner(location, "status", other_id, "--json").output)["lease"] is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["lease", "m:C", "--pin", "0"],
            "--pin must be a whole number of seconds from 1 to 604800",
        ),
        (["lease", "m:C", "--pin", "604801"], "from 1 to 604800, not 604801"),
        (["lease", "m:C", "--pin", "1.5"], "from 1 to 604800, not '1.5'"),
        (["lease", "m:C", "--pin", "5", "--release"], "give one of --pin, --release and --forget"),
        (["lease", "--forget"], "name the job type: runner lease JOB_TYPE --forget"),
        (["lease", "orders", "--pin", "5"], "JOB_TYPE must be module:Class"),
        (["lease", "a/b:C"], "JOB_TYPE must be module:Class"),
        (["lease", "m:Nothing"], "no lease learned or pinned for 'm:Nothing'"),
        (["lease", "m:Nothing", "--release"], "no lease learned or pinned for 'm:Nothing'"),
        (["lease", "m:Nothing", "--forget"], "no lease learned or pinned for 'm:Nothing'"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(tmp_path: Path, args: list[str], says: str):
    store = tmp_path / "store"
    with open_storage(str(store)) as storage:
        CheckpointStore(storage).ensure()
        pin = Budget(STANDALONE, FakeClock())
        LeaseBook(storage.records).forget("m:C", pin)
    result = CliRunner().invoke(commands.cli, [*args, "--storage", str(store)])
    assert result.exit_code == 1 and says in str(result.exception), result.output
    assert runner(str(store), "lease").output.startswith("no learned or pinned leases")


def test_a_bad_lease_command_run_as_a_user_runs_it_is_one_error_line(tmp_path: Path):
    line = one_error_line(run_runner(tmp_path, "lease", "m:C", "--pin", "soon", "--storage", "s"))
    assert line == (
        "runner: error: --pin must be a whole number of seconds from 1 to 604800, not 'soon'"
    )
    line = one_error_line(run_runner(tmp_path, "lease", "m:C", "--pin", "60", "--storage", "s"))
    assert line.startswith("runner: error: no store at ")  # a mistyped --storage: nothing made
    assert not (tmp_path / "s").exists()
