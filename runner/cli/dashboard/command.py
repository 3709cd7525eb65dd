"""The ``runner dashboard`` command, registered on the ``runner`` group by
:mod:`runner.cli.commands`.

Its server (:mod:`runner.cli.dashboard.serve`, with Starlette, Jinja2 and uvicorn) is
imported only when the command runs, so no other command pays for loading them.
"""

from __future__ import annotations

import click

from runner.cli.options import storage_option
from runner.cli.watch import DEFAULT_INTERVAL_SECONDS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
#: The shortest refresh: every viewer's page, and the one shared read of the store.
MIN_REFRESH_SECONDS = 0.5


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
    refresh is one read of the store shared by every viewer. Ctrl-C stops it.
    """
    from runner.cli.dashboard import serve  # Starlette and uvicorn: for this command only

    listening = serve.prepare(storage, host, port, refresh_seconds, allow_actions)
    try:
        serve.run(listening, click.echo)
    finally:
        listening.close()
