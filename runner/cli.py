"""The ``runner`` command line.

Every command takes ``--storage``: an Azure Storage connection string, an account URL,
or a directory for the embedded store (default ``$RUNNER_STORAGE``, then ``./.runner``).
See ``docs/storage.md``. Exit codes: 0 success, 1 the command failed, 2 bad usage.
"""

from __future__ import annotations

import sys
import uuid

import click

from checkpoint.backends import open_storage
from checkpoint.location import parse_location
from checkpoint.storage import Storage
from jobs.errors import RunnerError

STORAGE_HELP = (
    "Azure Storage connection string (AccountName=... or UseDevelopmentStorage=true), "
    "account URL (https://<account>.blob.core.windows.net, DefaultAzureCredential), "
    "or a directory for the embedded store. Default: $RUNNER_STORAGE, then ./.runner"
)

storage_option = click.option("--storage", metavar="LOCATION", default=None, help=STORAGE_HELP)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Chunked, resumable jobs on Azure Storage queues, tables and blobs."""


@cli.command()
@storage_option
def check(storage: str | None) -> None:
    """Show which storage LOCATION selects (secrets hidden) and check it answers.

    Round-trips a message, a record and a blob through scratch resources it then deletes.
    """
    location = parse_location(storage)
    click.echo(f"storage: {location.description}")
    with open_storage(location) as opened:
        for line in _round_trip(opened):
            click.echo(line)
    click.echo("ok")


def _round_trip(storage: Storage) -> list[str]:
    """Touch each service once through scratch resources; return what was done."""
    tag = uuid.uuid4().hex[:10]
    queue, table, container = f"runner-check-{tag}", f"runnercheck{tag}", f"runner-check-{tag}"
    done = []
    storage.queues.create_queue(queue)
    try:
        storage.queues.send(queue, b"ping")
        (message,) = storage.queues.receive(queue, visibility_seconds=5)
        assert message.pop_receipt is not None  # a receive always grants one
        storage.queues.delete(queue, message.id, message.pop_receipt)
        done.append("queue: send, receive, delete")
    finally:
        storage.queues.delete_queue(queue)
    storage.records.create_table(table)
    try:
        etag = storage.records.insert(table, "check", "row", {"value": 1})
        storage.records.replace(table, "check", "row", {"value": 2}, etag=etag)
        done.append("records: insert, conditional replace")
    finally:
        storage.records.delete_table(table)
    storage.blobs.create_container(container)
    try:
        storage.blobs.put(container, "check/blob", b"ping")
        storage.blobs.get(container, "check/blob")
        done.append("blobs: put, get")
    finally:
        storage.blobs.delete_container(container)
    return done


def main() -> None:
    """Console entry point: our errors become one clear line and exit code 1."""
    try:
        cli.main(prog_name="runner", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as usage:
        usage.show()
        sys.exit(usage.exit_code)
    except RunnerError as error:
        click.echo(f"runner: error: {error}", err=True)
        sys.exit(1)
