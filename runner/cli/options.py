"""Options every ``runner`` command shares: ``--storage``, given after the command or
before it (:mod:`runner.cli.commands` and the commands in modules of their own, such as
``runner dashboard``, take it from here)."""

from __future__ import annotations

import click

STORAGE_HELP = (
    "Azure Storage connection string (AccountName=... or UseDevelopmentStorage=true), "
    "account URL (https://<account>.blob.core.windows.net, DefaultAzureCredential), "
    "or a directory for the embedded store. Default: $RUNNER_STORAGE, then ./.runner"
)


def _storage(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A command's ``--storage``, else the one given before the command."""
    before = ctx.find_root().params.get("storage")
    if value is not None and before is not None and value != before:
        raise click.UsageError(
            "--storage is given before and after the command, differently; give it once"
        )
    return value if value is not None else before


storage_option = click.option(
    "--storage", metavar="LOCATION", default=None, callback=_storage, help=STORAGE_HELP
)
