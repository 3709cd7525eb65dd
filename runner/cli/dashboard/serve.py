"""``runner dashboard`` itself: open the store, listen, print where, serve until a
signal.

The socket is bound here, before anything is served, so a port in use or an address
that cannot be had is one ``runner: error:`` line (and so is a location with no store,
from :func:`checkpoint.backends.open_storage`). The first SIGINT or SIGTERM stops
serving after the requests in progress, and the command exits 0.
"""

from __future__ import annotations

import errno
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

import uvicorn

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from runner.cli.dashboard.actions import new_token
from runner.cli.dashboard.app import DashboardSettings, build_app

#: Host names a dashboard on loopback answers to (any other Host header gets 400).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class Listening:
    """A dashboard ready to serve: its store, its socket, its address, its token."""

    storage: Storage
    sock: socket.socket
    url: str
    settings: DashboardSettings

    def close(self) -> None:
        self.sock.close()
        self.storage.close()


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (0: a free port). Raises
    ConfigurationError, one line, if it cannot be had."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as error:
        raise ConfigurationError(f"cannot listen on {host!r}: {error.strerror}") from error
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as error:
        sock.close()
        why = "the port is in use (another dashboard? choose one with --port)"
        if error.errno != errno.EADDRINUSE:
            why = error.strerror or str(error)
        raise ConfigurationError(f"cannot listen on {host}:{port}: {why}") from error
    return sock


def prepare(
    storage: str | None,
    host: str,
    port: int,
    refresh_seconds: float,
    allow_actions: bool,
) -> Listening:
    """Open the store (it must be there) and listen; nothing is served yet."""
    opened = open_storage(storage, create=False)
    try:
        sock = listen(host, port)
    except BaseException:
        opened.close()
        raise
    shown = f"[{host}]" if ":" in host else host
    loopback = host in LOOPBACK_NAMES or host.startswith("127.")
    settings = DashboardSettings(
        storage=opened.description,
        refresh_seconds=refresh_seconds,
        token=new_token() if allow_actions else None,
        allowed_hosts=(*LOOPBACK_NAMES, host) if loopback else ("*",),
    )
    return Listening(opened, sock, f"http://{shown}:{sock.getsockname()[1]}/", settings)


def run(listening: Listening, say: Callable[[str], None]) -> None:
    """Say where the dashboard is (and the token), then serve until a signal."""
    settings = listening.settings
    store = CheckpointStore(listening.storage)
    config = uvicorn.Config(
        build_app(store, settings),
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        server_header=False,
    )
    server = uvicorn.Server(config)
    # Stopping is set up before the lines that invite it: a signal that comes before
    # uvicorn has put in its own handlers still ends the server, at its first look.
    with _signals_stop(server):
        mode = "actions on" if settings.token else "read-only"
        say(f"dashboard of {settings.storage} at {listening.url} ({mode})")
        if settings.token:
            say(f"action token: {settings.token}")
        say("Ctrl-C stops it")
        server.run(sockets=[listening.sock])


@contextmanager
def _signals_stop(server: uvicorn.Server) -> Iterator[None]:
    """SIGINT and SIGTERM tell ``server`` to exit, and nothing more. uvicorn handles
    them itself while it serves, then raises the one it got again for the handler that
    was there before: this one, so the command exits 0."""

    def stop(number: int, frame: FrameType | None) -> None:
        server.should_exit = True

    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
