"""One format for times in every command's output: ISO 8601 in UTC ending in ``Z``, to
the microsecond, as ``runner status`` prints them (``2030-01-01T00:00:03.000000Z``).

Every view of a populated store is gathered (status, its JSON, report, poison list
(which has no time), cancel, pause, purge, ``--watch`` on a terminal and piped, the
dashboard's pages, log lines of both formats), and each time in it is checked.
"""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console
from starlette.testclient import TestClient

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.deletion import Deleted
from checkpoint.store import CheckpointStore
from runner.cli import commands
from runner.cli.dashboard.app import DashboardSettings, build_app
from runner.cli.snapshot import read_snapshot
from runner.cli.status_types import WatchFrame
from runner.cli.watch_lines import plain_lines
from runner.cli.watch_view import render_watch
from runner.worker.observing.logs import JsonFormatter, TextFormatter
from tests.runner.cli.dashboard.stores import Populated, populate

#: The one format.
UTC_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
#: Anything that looks like a wall-clock time, in any of the forms seen before.
ANY_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}| UTC)?"
)


@pytest.fixture
def populated(tmp_path: Path) -> tuple[str, Populated]:
    location = str(tmp_path / "store")
    with open_storage(location) as storage:
        clock = FakeClock()
        ids = populate(CheckpointStore(storage, clock), clock)
    return location, ids


def _cli(location: str, *args: str) -> str:
    done = CliRunner().invoke(commands.cli, [*args, "--storage", location])
    assert done.exit_code == 0, done.output
    return done.output


def _not_in_one_format(text: str) -> list[str]:
    return [found for found in ANY_TIME.findall(text) if not UTC_TIME.fullmatch(found)]


def test_every_command_shows_times_in_one_format(populated: tuple[str, Populated]):
    location, ids = populated
    said = {
        "status": _cli(location, "status"),
        "status JOB": _cli(location, "status", ids.running),
        "status --json": _cli(location, "status", "--json"),
        "report": _cli(location, "report", ids.running),
        "report --json": _cli(location, "report", ids.running, "--json"),
        "poison list": _cli(location, "poison", "list", ids.running),
        "poison list --json": _cli(location, "poison", "list", ids.running, "--json"),
        "pause": _cli(location, "pause", ids.paused),
        "cancel": _cli(location, "cancel", ids.cancelled),
        "purge --dry-run": commands._deleted_line(  # the line of each job it would delete
            Deleted(ids.cancelled, "cancelled", FakeClock().now(), dry_run=True)
        ),
    }
    with open_storage(location) as storage:
        snapshot = read_snapshot(CheckpointStore(storage))
    frame = WatchFrame(snapshot)
    terminal = io.StringIO()
    Console(file=terminal, width=200).print(render_watch(frame))
    said["watch"] = terminal.getvalue()
    said["watch piped"] = "\n".join(plain_lines(frame, set(), True))
    # Then every time any of them shows is in the one format, and each shows some
    found = {name: ANY_TIME.findall(text) for name, text in said.items()}
    assert {name: _not_in_one_format(text) for name, text in said.items()} == {
        name: [] for name in said
    }
    assert [name for name, times in found.items() if not times] == [
        "poison list",
        "poison list --json",  # a poisoned chunk has no next try
    ]
    assert json.loads(said["status --json"])  # still JSON


def test_the_dashboard_shows_times_in_one_format(populated: tuple[str, Populated]):
    location, ids = populated
    with open_storage(location) as storage:
        store = CheckpointStore(storage)
        settings = DashboardSettings(storage.description, 2.0, None, ("*",))
        client = TestClient(build_app(store, settings, FakeClock().monotonic))
        pages = {
            path: client.get(path).text
            for path in ("/", f"/jobs/{ids.running}", f"/jobs/{ids.paused}", "/workers")
        }
    for path, page in pages.items():
        assert _not_in_one_format(page) == [], path
    assert UTC_TIME.search(pages[f"/jobs/{ids.paused}"])  # its created and paused times


@pytest.mark.parametrize("formatter", [TextFormatter(), JsonFormatter()])
def test_log_lines_stamp_times_in_one_format(formatter: logging.Formatter):
    record = logging.LogRecord("runner", logging.INFO, __file__, 1, "started", None, None)
    line = formatter.format(record)
    assert ANY_TIME.findall(line) and _not_in_one_format(line) == []
