"""Only ``submit`` and ``start`` create a store; every other command refuses a location
without one and creates nothing (docs/cli.md, "Choosing the storage"), on both backends.
``runner check`` says whether a store is there and leaves none behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from checkpoint.backends import open_storage, require_store
from checkpoint.errors import StoreNotFound
from jobs import manage
from jobs.retention import delete, purge
from jobs.submit import submit
from runner.cli import checking
from runner.cli.commands import cli
from tests import azurite as azurite_process
from tests.conftest import started_azurite
from tests.runner.cli.invoke import one_error_line, run_runner
from tests.runner.world import Verdicts

#: Every command that reads or changes what is there, with the arguments it needs.
READ_ONLY_COMMANDS = [
    ["status"],
    ["status", "some-job"],
    ["report", "some-job"],
    ["cancel", "some-job"],
    ["pause", "some-job"],
    ["resume", "some-job"],
    ["poison", "list", "some-job"],
    ["poison", "redrive", "some-job"],
    ["delete", "some-job"],
    ["purge", "--older-than", "1d"],
]


@pytest.mark.parametrize("command", READ_ONLY_COMMANDS, ids=" ".join)
def test_a_read_only_command_refuses_a_missing_embedded_store_and_creates_nothing(
    tmp_path, command
):
    typo = tmp_path / "x" / "typo"
    result = CliRunner().invoke(cli, [*command, "--storage", str(typo)])
    assert isinstance(result.exception, StoreNotFound), result.output
    assert f"no store at {typo}" in str(result.exception)
    assert not (tmp_path / "x").exists()


def test_run_in_the_wrong_directory_status_says_so_in_one_line_and_leaves_no_runner(tmp_path):
    line = one_error_line(run_runner(tmp_path, "status"))
    assert line == (
        f"runner: error: no store at {tmp_path / '.runner'}: `runner submit` or "
        "`runner start` creates one (is --storage right?)"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_python_api_refuses_a_missing_store_too(tmp_path):
    where = str(tmp_path / "nowhere")
    for call in (
        lambda: manage.cancel("j", storage=where),
        lambda: manage.pause("j", storage=where),
        lambda: manage.resume("j", storage=where),
        lambda: delete("j", storage=where),
        lambda: purge(timedelta(days=1), storage=where),
    ):
        with pytest.raises(StoreNotFound):
            call()
    assert not Path(where).exists()


def test_submit_creates_the_store_the_others_then_use(tmp_path):
    where = str(tmp_path / "store")
    job_id = submit(Verdicts, {"payloads": []}, storage=where)
    result = CliRunner().invoke(cli, ["status", job_id, "--json", "--storage", where])
    assert result.exit_code == 0, result.output
    assert '"state": "planning"' in result.output


def test_check_of_a_new_embedded_location_leaves_no_store_or_directory(tmp_path):
    deep = tmp_path / "a" / "b"
    result = CliRunner().invoke(cli, ["check", "--storage", str(deep)])
    assert result.exit_code == 0, result.output
    assert f"store: none at {deep} yet; `runner submit` or `runner start` creates one" in (
        result.output
    )
    assert "blobs: put, get" in result.output
    assert list(tmp_path.iterdir()) == []


def test_check_of_an_existing_directory_keeps_what_was_there(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = CliRunner().invoke(cli, ["check", "--storage", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]


def test_check_of_a_store_says_it_is_found(tmp_path):
    submit(Verdicts, {"payloads": []}, storage=str(tmp_path))
    result = CliRunner().invoke(cli, ["check", "--storage", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "store: found" in result.output
    with open_storage(str(tmp_path), create=False) as opened:
        require_store(opened)  # still there, whole


# --------------------------------------------------------------------------- Azure


@pytest.fixture(scope="module")
def fresh_azurite() -> Iterator[azurite_process.Azurite]:
    """An Azurite of its own: an account with no tables yet (the session's has some)."""
    yield from started_azurite()


@pytest.mark.azurite
def test_an_azure_account_without_tables_is_no_store_until_a_submit(fresh_azurite):
    account = fresh_azurite.connection_string
    # Given an account nothing was submitted to: read-only commands refuse it
    result = CliRunner().invoke(cli, ["status", "--storage", account])
    assert isinstance(result.exception, StoreNotFound)
    assert "(no 'runnerjobs' table)" in str(result.exception)
    assert "AccountKey=***" in str(result.exception)
    # check answers, says there is no store, and makes none
    checked = CliRunner().invoke(cli, ["check", "--storage", account])
    assert checked.exit_code == 0, checked.output
    assert "store: none at azure:" in checked.output
    with pytest.raises(StoreNotFound):
        open_storage(account, create=False)
    # Then a submit makes the store, which the others read
    job_id = submit(Verdicts, {"payloads": []}, storage=account)
    listed = CliRunner().invoke(cli, ["status", "--storage", account])
    assert listed.exit_code == 0 and job_id in listed.output
    assert "store: found" in CliRunner().invoke(cli, ["check", "--storage", account]).output


def test_check_keeps_a_store_that_a_submit_made_meanwhile(tmp_path, monkeypatch):
    where = tmp_path / "store"
    round_trip = checking.round_trip

    def submit_meanwhile(storage):
        submit(Verdicts, {"payloads": []}, job_id="meanwhile", storage=storage)
        return round_trip(storage)

    monkeypatch.setattr(checking, "round_trip", submit_meanwhile)
    result = CliRunner().invoke(cli, ["check", "--storage", str(where)])
    assert result.exit_code == 0, result.output
    assert f"store: none at {where} yet" in result.output  # as it was when checked
    with open_storage(str(where), create=False) as opened:
        require_store(opened)
