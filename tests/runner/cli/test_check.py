"""`runner check`: says which storage was selected, secrets hidden, and that it answers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from runner.cli.commands import cli
from tests.runner.cli.invoke import one_error_line, run_runner


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


#: An account with no credential: AccountName alone, on https endpoints of loopback
#: (a bearer token is refused over http) where nothing listens; nothing is ever sent.
NO_CREDENTIAL = "AccountName=nocredential;" + "".join(
    f"{service}Endpoint=https://127.0.0.1:9/nocredential;" for service in ("Blob", "Queue", "Table")
)


@pytest.fixture
def no_azure_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    """This environment without any Azure credential, DefaultAzureCredential trying only
    the environment's (no managed identity probe, no `az` run: offline and fast)."""
    for name in [n for n in os.environ if n.startswith(("AZURE_", "MSI_", "IDENTITY_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", "environmentcredential")


@pytest.mark.parametrize("command", [["check"], ["status"]])
def test_no_credential_is_one_line_without_the_sdks_list(tmp_path, no_azure_credential, command):
    # Given an account without key or SAS, and no Azure credential anywhere
    # When a command reads the store
    result = run_runner(tmp_path, *command, "--storage", NO_CREDENTIAL)
    # Then one line says so; the SDK's list of attempted credentials is not printed
    line = one_error_line(result)
    assert "no usable Azure credential" in line and "--log-level debug" in line
    # ... but with --log-level debug it is, for whoever needs it
    debug = run_runner(tmp_path, "--log-level", "debug", *command, "--storage", NO_CREDENTIAL)
    assert debug.returncode == 1
    assert "Attempted credentials" in debug.stderr


def test_no_credential_in_process_logs_nothing_of_the_sdk(caplog, no_azure_credential):
    result = CliRunner().invoke(cli, ["check", "--storage", NO_CREDENTIAL])

    assert result.exit_code == 1
    assert "no usable Azure credential" in str(result.exception)
    assert not [r for r in caplog.records if r.name.startswith("azure")]
