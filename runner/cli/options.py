"""Options every ``runner`` command shares: ``--storage``, given after the command or
before it (:mod:`runner.cli.commands` and the commands in modules of their own, such as
``runner dashboard``, take it from here)."""

from __future__ import annotations

import click

from checkpoint.errors import ConfigurationError
from checkpoint.location import parse_location

STORAGE_HELP = (
    "Azure Storage connection string (AccountName=... or UseDevelopmentStorage=true), "
    "account URL (https://<account>.blob.core.windows.net, DefaultAzureCredential), "
    "or a directory for the embedded store. Default: $RUNNER_STORAGE, then ./.runner"
)


class BadLocation(click.ClickException):
    """A ``--storage`` (or ``$RUNNER_STORAGE``) text that cannot be a location: bad usage,
    exit 2, shown as the one ``runner: error:`` line every error is (never the value:
    it may hold a secret)."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        click.echo(f"runner: error: {self.format_message()}", err=True)


def _storage(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A command's ``--storage``, else the one given before the command; parsed here,
    before the command runs, so a malformed one is refused before anything is done."""
    before = ctx.find_root().params.get("storage")
    if value is not None and before is not None and value != before:
        raise click.UsageError(
            "--storage is given before and after the command, differently; give it once"
        )
    chosen = value if value is not None else before
    try:
        parse_location(chosen)
    except ConfigurationError as error:
        raise BadLocation(str(error)) from None
    return chosen


storage_option = click.option(
    "--storage", metavar="LOCATION", default=None, callback=_storage, help=STORAGE_HELP
)
