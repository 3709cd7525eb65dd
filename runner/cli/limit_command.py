"""``runner limit``: list the limits shared by every worker, or set one while jobs run.

``runner limit`` lists them all; ``runner limit NAME`` shows one; ``runner limit NAME
100/s`` sets a rate and ``runner limit NAME --running 20`` a running limit, both by hand
(class values no longer change them); ``runner limit NAME --clear`` removes them, so
the workers' class values apply again. A job type's own limits are named after its
queue. Bad input is one ``runner: error:`` line and exit 1; nothing is written then.
"""

from __future__ import annotations

import json

import click

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError
from checkpoint.limits.book import LimitBook
from checkpoint.limits.rates import check_limit_name, parse_rate
from checkpoint.store import CheckpointStore
from runner.cli.json_form import to_json
from runner.cli.limit_view import limit_status, read_limits, render_limits, running_chunks
from runner.cli.options import storage_option
from runner.cli.status_types import LimitStatus


@click.command("limit", short_help="List or set rate and running limits shared by all workers.")
@click.argument("name", required=False)
@click.argument("rate", required=False)
@click.option(
    "--running", metavar="N", default=None, help="Set the most chunks running at once (>= 1)."
)
@click.option("--clear", is_flag=True, help="Remove NAME's limits: class values apply again.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@storage_option
def limit(
    name: str | None,
    rate: str | None,
    running: str | None,
    clear: bool,
    as_json: bool,
    storage: str | None,
) -> None:
    """List the limits shared by every worker, or set NAME's: RATE is chunks (or units
    of a resource) started per second, minute or hour ("100/s", "6000/min", "1/h").
    A job type's own limits are named after its queue."""
    _check(name, rate, running, clear)
    # Only submit and start create a store: a mistyped --storage must not leave a store
    # holding a limit that no worker reads.
    with open_storage(storage, create=False) as opened:
        store = CheckpointStore(opened)
        store.ensure()
        limits, budget, now = (
            LimitBook(opened.records, store.clock),
            store.budget(),
            store.clock.now(),
        )
        if name is None:
            _show(read_limits(store, now), as_json)
            return
        if clear:
            if not limits.clear(name, budget):
                raise ConfigurationError(f"no limit named {name!r}")
            _show((), as_json, f"{name}: cleared; class values apply again")
            return
        if rate is not None:
            limits.set_rate(name, parse_rate(rate, "RATE", ConfigurationError), budget)
        if running is not None:
            limits.set_running(name, int(running), budget)
        limit = limits.get(name, budget)
        chunks = running_chunks(store, now) if limit.running is not None else None
        found = tuple(limit_status(limit, now, chunks))
        if not found:
            raise ConfigurationError(f"no limit named {name!r}; set one with RATE or --running")
        _show(found, as_json)


def _check(name: str | None, rate: str | None, running: str | None, clear: bool) -> None:
    """Refuse bad input before anything is read or written."""
    if name is None and (running is not None or clear):
        raise ConfigurationError("name the limit: runner limit NAME --running N | --clear")
    if name is not None:
        check_limit_name(name, "limit name", ConfigurationError)
    if clear and (rate is not None or running is not None):
        raise ConfigurationError("--clear takes no RATE or --running")
    if rate is not None:
        parse_rate(rate, "RATE", ConfigurationError)
    if running is not None and not (running.isdigit() and int(running) >= 1):
        raise ConfigurationError(f"--running must be a whole number >= 1, not {running!r}")


def _show(limits: tuple[LimitStatus, ...], as_json: bool, said: str = "") -> None:
    if as_json:
        click.echo(json.dumps(to_json(list(limits)), indent=2))
    else:
        click.echo(said or render_limits(limits))
