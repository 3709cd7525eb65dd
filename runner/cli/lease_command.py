"""``runner lease``: the lease each adaptive job type's workers give its messages, and an
operator's pin on it.

``runner lease`` lists every job type's shared row (:mod:`checkpoint.lease_book`);
``runner lease JOB_TYPE`` shows one; ``--pin SECONDS`` fixes it for every worker while
jobs run, ``--release`` goes back to what the workers learned, ``--forget`` deletes
the row (the workers start again from the class's lower bound). The workers read the row
every :data:`~runner.worker.leases.sizes.READ_EVERY_SECONDS`, so a change reaches them
within that. Bad input is one ``runner: error:`` line and exit 1; nothing is written then.
"""

from __future__ import annotations

import json
import re

import click

from checkpoint import checks
from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError
from checkpoint.lease_book import LeaseBook
from checkpoint.service_targets import MAX_VISIBILITY_SECONDS
from checkpoint.store import CheckpointStore
from runner.cli.json_form import to_json
from runner.cli.lease_view import learned_status, lease_line, read_lease, read_leases, render_leases
from runner.cli.options import storage_option
from runner.cli.status_types import LeaseStatus
from runner.worker.leases.learned import pin_lease
from runner.worker.leases.sizes import READ_EVERY_SECONDS

#: ``module:Class``, as ``ChunkedJob.job_type()`` names a type (a dotted module, a
#: qualified class name).
JOB_TYPE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")

HELP = f"""Show the lease the workers give each job type's messages, or pin one.

A class that sets no lease_seconds has its lease sized by its workers from how
late their renewals land and the leases they lose, one value shared by all of
them. Without JOB_TYPE, every such type: the lease now (pinned or learned), its
bounds, the lateness percentile it came from and its renewals, the leases lost
in the last hour. --pin, --release and --forget reach every worker within
{READ_EVERY_SECONDS:g} s, while jobs run (a class that fixes lease_seconds keeps it)."""


@click.command("lease", short_help="Show the lease of each job type, or pin one.", help=HELP)
@click.argument("job_type", metavar="[JOB_TYPE]", required=False)
@click.option(
    "--pin",
    metavar="SECONDS",
    default=None,
    help=f"Give JOB_TYPE's messages this lease, whole seconds 1-{MAX_VISIBILITY_SECONDS}.",
)
@click.option("--release", is_flag=True, help="Remove the pin: the learned lease applies again.")
@click.option(
    "--forget",
    is_flag=True,
    help="Delete JOB_TYPE's row: its workers start again from the lower bound.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@storage_option
def lease(
    job_type: str | None,
    pin: str | None,
    release: bool,
    forget: bool,
    as_json: bool,
    storage: str | None,
) -> None:
    """``runner lease`` (its help is :data:`HELP`)."""
    seconds = _check(job_type, pin, release, forget)
    # Only submit and start create a store: a mistyped --storage must not leave a store
    # holding a pin that no worker reads.
    with open_storage(storage, create=False) as opened:
        store = CheckpointStore(opened)
        store.ensure()
        book, budget, now = LeaseBook(opened.records), store.budget(), store.clock.now()
        if job_type is None:
            _show(read_leases(store, now), as_json)
            return
        if forget:
            if not book.forget(job_type, budget):
                raise ConfigurationError(_none_for(job_type))
            forgotten = {"job_type": job_type, "forgotten": True}
            said = f"{job_type}: forgotten; its workers start again from the lower bound"
            click.echo(json.dumps(forgotten, indent=2) if as_json else said)
            return
        if seconds is None:  # shown or released: there must be a row
            found = read_lease(store, job_type, now)
            if found is None:
                raise ConfigurationError(_none_for(job_type))
            if not release:
                _show(found, as_json)
                return
        _show(learned_status(pin_lease(book, job_type, seconds, budget), now), as_json)


def _check(job_type: str | None, pin: str | None, release: bool, forget: bool) -> int | None:
    """Refuse bad input before anything is read or written; the pin's seconds."""
    changes = [
        name
        for name, given in (("--pin", pin), ("--release", release), ("--forget", forget))
        if given
    ]
    if len(changes) > 1:
        raise ConfigurationError(
            f"give one of --pin, --release and --forget, not {' and '.join(changes)}"
        )
    if job_type is None and changes:
        raise ConfigurationError(f"name the job type: runner lease JOB_TYPE {changes[0]}")
    if job_type is not None and not JOB_TYPE.fullmatch(job_type):
        raise ConfigurationError(
            f"JOB_TYPE must be module:Class, as `runner lease` lists them, not {job_type!r}"
        )
    if pin is None:
        return None
    value: object = int(pin) if pin.isascii() and pin.isdigit() else pin
    return checks.whole(
        value,
        "--pin",
        lowest=1,
        highest=MAX_VISIBILITY_SECONDS,
        unit="seconds",
        error=ConfigurationError,
    )


def _none_for(job_type: str) -> str:
    return (
        f"no lease learned or pinned for {job_type!r} (its workers write one as they renew; "
        "`runner lease` lists those there are)"
    )


def _show(leases: LeaseStatus | tuple[LeaseStatus, ...], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(to_json(leases), indent=2))
    elif isinstance(leases, LeaseStatus):
        click.echo(lease_line(leases))
    else:
        click.echo(render_leases(leases))
