"""The ``runner dashboard`` command, registered on the ``runner`` group by
:mod:`runner.cli.commands`.

Its server (:mod:`runner.cli.dashboard.serve`, with Starlette, Jinja2 and uvicorn) is
imported only when the command runs, so no other command pays for loading them, and
they are an extra, ``dashboard``: without it this command says so in one line.
"""

from __future__ import annotations

import importlib

import click

from checkpoint.errors import MissingExtra
from runner.cli.options import storage_option
from runner.cli.watch import DEFAULT_INTERVAL_SECONDS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
#: The shortest refresh: every viewer's page, and the one shared read of the store.
MIN_REFRESH_SECONDS = 0.5
#: The extra holding the server's packages (pyproject.toml), and what its absence says.
EXTRA = "dashboard"
EXTRA_PACKAGES = ("starlette", "jinja2", "uvicorn")
MISSING_EXTRA = (
    "`runner dashboard` needs the 'dashboard' extra (Starlette, Jinja2, uvicorn; no "
    "module named {module!r}): `make venv` installs it (pip install -e '.[dashboard]' "
    "in a clone)"
)


@click.command(short_help="Serve the status as web pages, refreshed live.")
@click.option(
    "--host",
    default=DEFAULT_HOST,
    show_default=True,
    help="Address to listen on. Only this machine can reach 127.0.0.1; 0.0.0.0 lets "
    "anyone who reaches this machine see every job.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to listen on (0: a free one, printed at start).",
)
@click.option(
    "--refresh",
    "refresh_seconds",
    type=click.FloatRange(MIN_REFRESH_SECONDS),
    default=DEFAULT_INTERVAL_SECONDS,
    show_default=True,
    help="Seconds between refreshes of the pages; every viewer shares one read of the "
    "store per refresh.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Offer cancel, pause, resume and redrive on a job's page, each needing the "
    "token printed at start. Default: read-only.",
)
@storage_option
def dashboard(
    host: str, port: int, refresh_seconds: float, allow_actions: bool, storage: str | None
) -> None:
    """Serve the status as web pages, refreshed live: jobs, a job's chunks page by
    page, workers, poisoned chunks.

    Read-only unless --allow-actions. It reads what `runner status` reads, and each
    refresh is one read of the store shared by every viewer. Ctrl-C stops it. Needs
    the dashboard extra (Starlette, Jinja2, uvicorn).
    """
    check_extra()
    from runner.cli.dashboard import serve  # Starlette and uvicorn: for this command only

    listening = serve.prepare(storage, host, port, refresh_seconds, allow_actions)
    try:
        serve.run(listening, click.echo)
    finally:
        listening.close()


def check_extra() -> None:
    """Raise MissingExtra, one line, unless the extra's packages can be imported.

    Checked by name before the server is imported: Starlette imported without Jinja2,
    say, fails with an ImportError that names no module, and a module of ours failing
    to import is a broken install, not a missing extra.
    """
    for package in EXTRA_PACKAGES:
        try:
            importlib.import_module(package)
        except ImportError as missing:
            module = (missing.name or package).split(".")[0]
            raise MissingExtra(MISSING_EXTRA.format(module=module), extra=EXTRA) from missing
