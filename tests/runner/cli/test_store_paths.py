"""An embedded store's path that cannot be used says why in one line, and a store this
process may read but not write (a read-only file system, another user's folder) serves
every command that only reads it; a command that writes says the store is read-only.

The read-only store is made for real, as root too (tests/unwritable.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError, StoreReadOnly
from checkpoint.store import CheckpointStore
from runner.cli.commands import cli
from tests.runner.cli.invoke import one_error_line, run_runner
from tests.unwritable import reachable_folder, unwritable


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


# --------------------------------------------------------------------------- paths

#: Params the quickstart's validate accepts (a folder that exists), so that a submit
#: gets as far as opening the store.
PARAMS = '{"input": "/tmp", "output": "/tmp/summary.json"}'
#: Commands that open a store, with what else they need.
COMMANDS = [
    ["submit", "samples.quickstart.wordcount:WordCount", "--params", PARAMS],
    ["status"],
    ["check"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_file_named_as_the_store_is_said_to_be_a_file(tmp_path, command):
    named = tmp_path / "squares.py"
    named.write_text("# the user's job module\n")

    result = _invoke(*command, "--storage", str(named))

    assert isinstance(result.exception, ConfigurationError), result.output
    assert str(result.exception) == (
        f"cannot open the embedded store at {named}: it is a file, not a folder"
    )
    assert named.read_text() == "# the user's job module\n"


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_store_under_a_file_names_the_file(tmp_path, command):
    named = tmp_path / "squares.py"
    named.write_text("")

    result = _invoke(*command, "--storage", str(named / "store"))

    assert isinstance(result.exception, ConfigurationError), result.output
    assert str(result.exception) == (
        f"cannot open the embedded store at {named / 'store'}: {named} is a file, not a folder"
    )


def test_a_file_as_the_store_is_one_line_from_the_command(tmp_path):
    (tmp_path / "squares.py").write_text("")

    line = one_error_line(run_runner(tmp_path, "status", "--storage", "squares.py"))

    assert line == (
        f"runner: error: cannot open the embedded store at {tmp_path / 'squares.py'}: "
        "it is a file, not a folder"
    )


def test_a_folder_that_cannot_be_made_for_another_reason_keeps_the_systems_error():
    with pytest.raises(FileNotFoundError):
        open_storage("/proc/no-store-here")


def test_a_store_in_a_folder_that_cannot_be_written_says_so():
    with reachable_folder() as folder:
        parent = folder / "shared"
        parent.mkdir()
        _invoke("status", "--storage", str(parent))  # imports what the command needs

        with unwritable(parent):
            result = _invoke(
                "submit",
                "samples.quickstart.wordcount:WordCount",
                "--params",
                PARAMS,
                "--storage",
                str(parent / "new" / "store"),
            )

        assert isinstance(result.exception, ConfigurationError), result.output
        assert str(result.exception) == (
            f"cannot create the embedded store at {parent / 'new' / 'store'}: permission "
            f"denied to make {parent / 'new'}"
        )
        assert not (parent / "new").exists()


# --------------------------------------------------------------------------- read-only


@pytest.fixture
def read_only_store() -> Iterator[tuple[Path, str]]:
    """A store holding one job with a poisoned chunk, and the job's id; every command
    is run once, writable, so that what it imports is imported before the store is
    made unwritable."""
    with reachable_folder() as folder:
        store_folder = folder / "store"
        job_id = f"ro-{uuid.uuid4().hex[:8]}"
        with open_storage(str(store_folder)) as opened:
            store = CheckpointStore(opened)
            job, _ = store.create_job(
                job_id, "samples.quickstart.wordcount:WordCount", "word-count", {}
            )
            store.add_chunks(job_id, 0, ["a", "b"])
            store.update_job(job, state="running", total=2)
        for command in READ_COMMANDS:
            assert _invoke(*_filled(command, job_id), "--storage", str(store_folder)).exit_code == 0
        _invoke("pause", "no-such-job", "--storage", str(store_folder))
        yield store_folder, job_id


#: Commands that only read the store.
READ_COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["status", "JOB"],
    ["report", "JOB"],
    ["report", "JOB", "--json"],
    ["poison", "list", "JOB"],
    ["limit"],
]
#: Commands that change it.
WRITE_COMMANDS = [
    ["cancel", "JOB"],
    ["pause", "JOB"],
    ["delete", "JOB", "--force"],
    ["submit", "samples.quickstart.wordcount:WordCount", "--params", PARAMS],
    ["limit", "word-count", "5/s"],
    ["check"],
    ["start", "samples.quickstart.wordcount:WordCount", "--burst"],
]


def _filled(command: list[str], job_id: str) -> list[str]:
    return [job_id if part == "JOB" else part for part in command]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_a_command_that_reads_works_on_a_store_it_cannot_write(read_only_store, command):
    store_folder, job_id = read_only_store
    writable = _invoke(*_filled(command, job_id), "--storage", str(store_folder)).output

    with unwritable(store_folder):
        result = _invoke(*_filled(command, job_id), "--storage", str(store_folder))

    assert result.exit_code == 0, (result.output, result.exception)
    assert result.output == writable


def test_status_json_of_a_store_it_cannot_write_shows_the_job(read_only_store):
    store_folder, job_id = read_only_store

    with unwritable(store_folder):
        result = _invoke("status", job_id, "--json", "--storage", str(store_folder))

    assert json.loads(result.output)["job_id"] == job_id


@pytest.mark.parametrize("command", WRITE_COMMANDS, ids=" ".join)
def test_a_command_that_writes_says_the_store_is_read_only(read_only_store, command):
    store_folder, job_id = read_only_store
    before = sorted((path.name, path.stat().st_size) for path in store_folder.iterdir())

    with unwritable(store_folder):
        result = _invoke(*_filled(command, job_id), "--storage", str(store_folder))

    assert isinstance(result.exception, StoreReadOnly), (result.output, result.exception)
    assert str(result.exception).startswith(
        f"the embedded store at {store_folder} is read-only to this process"
    )
    assert sorted((path.name, path.stat().st_size) for path in store_folder.iterdir()) == before
