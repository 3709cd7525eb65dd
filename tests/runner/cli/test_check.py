"""`runner check`: says which storage was selected, secrets hidden, and that it answers."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from runner.cli.commands import cli


def test_check_embedded_directory(tmp_path):
    result = CliRunner().invoke(cli, ["check", "--storage", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    assert f"storage: embedded:{tmp_path / 'store'}" in result.output
    assert "queue: send, receive, delete" in result.output
    assert result.output.rstrip().endswith("ok")


def test_check_azurite_hides_the_key(azurite):
    result = CliRunner().invoke(cli, ["check", "--storage", azurite.connection_string])
    assert result.exit_code == 0, result.output
    assert "AccountKey=***" in result.output
    assert "Eby8vdM02" not in result.output
    assert "blobs: put, get" in result.output


def test_check_uses_environment_variable(tmp_path):
    store = tmp_path / "from-env"
    result = CliRunner().invoke(cli, ["check"], env={"RUNNER_STORAGE": str(store)})
    assert result.exit_code == 0, result.output
    assert f"embedded:{store}" in result.output


def test_bad_location_is_one_clear_line_and_exit_2():
    # Given a connection string without AccountName, through the real console entry point
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from runner.cli.commands import main; main()",
            "check",
            "--storage",
            "DefaultEndpointsProtocol=https;AccountKey=c2VjcmV0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then one line on stderr names the problem, without the key: bad usage, exit 2
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "runner: error:" in result.stderr and "AccountName" in result.stderr
    assert "c2VjcmV0" not in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_azure_is_reported_not_a_traceback():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from runner.cli.commands import main; main()",
            "check",
            "--storage",
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=c2VjcmV0;"
            "QueueEndpoint=http://127.0.0.1:9/devstoreaccount1;"
            "TableEndpoint=http://127.0.0.1:9/devstoreaccount1;"
            "BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "runner: error:" in result.stderr and "Traceback" not in result.stderr
    assert "c2VjcmV0" not in result.stderr
