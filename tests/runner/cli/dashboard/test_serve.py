"""``runner dashboard`` itself (runner/cli/dashboard/serve.py, command.py): listening,
its one-line errors (a port in use, no store), what it prints, and a real process
serving pages until a signal ends it with exit 0."""

from __future__ import annotations

import signal
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError, StoreNotFound
from checkpoint.store import CheckpointStore
from runner.cli.dashboard import serve
from tests.e2e.dashboard import DashboardProcess
from tests.runner.cli.invoke import one_error_line, run_runner


def _store(tmp_path: Path) -> str:
    storage = str(tmp_path / "store")
    with open_storage(storage) as opened:
        store = CheckpointStore(opened)
        job, _ = store.create_job("served-1", "tests:Job", "served", {})
        store.add_chunks("served-1", 0, [0, 1, 2])
        store.update_job(job, state="running", total=3)
    return storage


@pytest.fixture
def taken() -> Iterator[socket.socket]:
    """A port someone else listens on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def test_listening_on_a_port_in_use_is_one_line(taken: socket.socket):
    port = taken.getsockname()[1]
    with pytest.raises(
        ConfigurationError, match=f"cannot listen on 127.0.0.1:{port}: the port is in use"
    ):
        serve.listen("127.0.0.1", port)


@pytest.mark.parametrize(
    "host, problem",
    [
        ("no-such-host.invalid", "cannot listen on 'no-such-host.invalid'"),
        ("192.0.2.1", "cannot listen on 192.0.2.1:0: "),
    ],
)
def test_an_address_that_cannot_be_had_is_one_line(host: str, problem: str):
    with pytest.raises(ConfigurationError, match=problem):
        serve.listen(host, 0)


def test_prepare_opens_the_store_and_listens_on_loopback(tmp_path: Path):
    listening = serve.prepare(_store(tmp_path), "127.0.0.1", 0, 2.0, allow_actions=False)
    try:
        port = listening.sock.getsockname()[1]
        assert listening.url == f"http://127.0.0.1:{port}/"
        settings = listening.settings
        assert settings.token is None and settings.refresh_seconds == 2.0
        assert settings.storage == f"embedded:{tmp_path / 'store'}"
        assert "localhost" in settings.allowed_hosts and "*" not in settings.allowed_hosts
    finally:
        listening.close()


def test_prepare_on_every_interface_answers_any_host_and_makes_a_token(tmp_path: Path):
    listening = serve.prepare(_store(tmp_path), "::", 0, 1.0, allow_actions=True)
    try:
        assert listening.url.startswith("http://[::]:")
        assert listening.settings.allowed_hosts == ("*",)
        token = listening.settings.token
        assert token and len(token) >= 40
    finally:
        listening.close()


def test_prepare_without_a_store_or_a_port_closes_what_it_opened(tmp_path: Path, taken):
    with pytest.raises(StoreNotFound):
        serve.prepare(str(tmp_path / "nothing"), "127.0.0.1", 0, 2.0, False)
    assert not (tmp_path / "nothing").exists()
    with pytest.raises(ConfigurationError, match="in use"):
        serve.prepare(_store(tmp_path), "127.0.0.1", taken.getsockname()[1], 2.0, False)


def test_the_command_says_a_port_in_use_or_no_store_in_one_line(tmp_path: Path, taken):
    port = str(taken.getsockname()[1])
    in_use = run_runner(tmp_path, "dashboard", "--port", port, "--storage", _store(tmp_path))
    assert "the port is in use (another dashboard? choose one with --port)" in one_error_line(
        in_use
    )
    missing = run_runner(tmp_path, "dashboard", "--storage", str(tmp_path / "none"))
    assert one_error_line(missing).startswith("runner: error: no store at ")


def test_the_command_refuses_a_refresh_below_its_least(tmp_path: Path):
    done = run_runner(tmp_path, "dashboard", "--refresh", "0.1")
    assert done.returncode == 2 and "--refresh" in done.stderr


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_command_serves_until_a_signal_then_exits_0(tmp_path: Path, number: int):
    storage = _store(tmp_path)
    dashboard = DashboardProcess(storage, "--allow-actions", "--refresh", "1")
    try:
        where, said_token, _ = dashboard.lines
        assert where == f"dashboard of embedded:{storage} at {dashboard.url} (actions on)"
        assert dashboard.token and said_token == f"action token: {dashboard.token}"
        with urllib.request.urlopen(dashboard.url, timeout=30) as answer:
            page = answer.read().decode()
        assert "served-1" in page and "actions on" in page
    finally:
        code, err = dashboard.stop(number)
    assert code == 0, err
    assert err == ""


def test_the_command_is_read_only_unless_told(tmp_path: Path):
    dashboard = DashboardProcess(_store(tmp_path))
    try:
        assert dashboard.lines[0].endswith("(read-only)") and len(dashboard.lines) == 2
        assert dashboard.token is None
    finally:
        dashboard.stop()
