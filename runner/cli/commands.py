"""The ``runner`` command line.

Every command takes ``--storage``: an Azure Storage connection string, an account URL,
or a directory for the embedded store (default ``$RUNNER_STORAGE``, then ``./.runner``).
See ``docs/storage.md`` and ``docs/cli.md``. Exit codes: 0 success, 1 the command
failed, 2 bad usage (or a command whose extra is not installed), 3 ``start`` stopped
but chunks outlived the stop timeout, 130 ``start`` forced to exit by a second signal.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
import traceback
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import click

from checkpoint.backends import open_storage
from checkpoint.clock import SystemClock
from checkpoint.deletion import Deleted
from checkpoint.errors import BadRecord, ConfigurationError, MissingExtra, RunnerError
from checkpoint.location import parse_location
from checkpoint.records import ENDED_JOB_STATES, JOB_STATES, JobRecord
from checkpoint.service_targets import MAX_VISIBILITY_SECONDS
from checkpoint.store import CheckpointStore
from jobs import manage
from jobs.errors import InvalidParams
from jobs.retention import delete as delete_job
from jobs.retention import parse_age
from jobs.retention import purge as purge_jobs
from jobs.spark.settings import CONF_ENV, MASTER_ENV, REMOTE_ENV, check_remote
from jobs.submit import PRIORITY_RANGE, record_submission
from runner.cli.checking import check_location
from runner.cli.dashboard.command import dashboard
from runner.cli.json_form import to_json, utc
from runner.cli.lease_command import lease
from runner.cli.limit_command import limit
from runner.cli.options import storage_option
from runner.cli.pipeline_view import pipeline_jobs, pipeline_status, render_pipeline
from runner.cli.redrive import redrive_job, redrive_pipeline
from runner.cli.rejections import (
    purge_rejections,
    read_rejections,
    rejections_json,
    render_rejections,
)
from runner.cli.render import (
    render_job,
    render_poisoned,
    render_report,
    render_status,
    report_csv_row,
)
from runner.cli.selection import SHOWN_BY_DEFAULT, Listing
from runner.cli.snapshot import read_snapshot
from runner.cli.status import REPORT_COLUMNS, failure_report, poisoned_chunks
from runner.cli.suggest import suggests_job_ids
from runner.cli.watch import DEFAULT_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS, watch_status
from runner.worker.loop import (
    DEFAULT_CONCURRENCY,
    DEFAULT_POLL_MAX_SECONDS,
    DEFAULT_STOP_TIMEOUT_SECONDS,
    WorkerSettings,
)
from runner.worker.observing.logs import LOG_FORMATS, LogFormat
from runner.worker.observing.metrics_server import DEFAULT_HOST as DEFAULT_METRICS_HOST
from runner.worker.observing.metrics_server import MetricsAddress
from runner.worker.supervisor import (
    StartOptions,
    configure_logging,
    quiet_sdk_logs,
    run_workers,
)

#: Where ``runner start --metrics-port`` / ``--metrics-host`` default from.
METRICS_PORT_ENV = "RUNNER_METRICS_PORT"
METRICS_HOST_ENV = "RUNNER_METRICS_HOST"

LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="chunkrunner", prog_name="runner")
@click.option(
    "--log-level",
    type=LOG_LEVELS,
    default=None,
    help="Log at this level (DEBUG also shows an error's traceback). Default: WARNING; "
    "`start` logs at INFO.",
)
@click.option(
    "--storage",
    metavar="LOCATION",
    default=None,
    help="The storage of every command (each command takes --storage too).",
)
def cli(log_level: str | None, storage: str | None) -> None:
    """Chunked, resumable jobs on Azure Storage queues, tables and blobs."""
    if log_level:
        configure_logging(log_level.upper())
    else:
        quiet_sdk_logs("WARNING")


@cli.command(short_help="Show which storage LOCATION selects and check it answers.")
@storage_option
def check(storage: str | None) -> None:
    """Show which storage LOCATION selects (secrets hidden) and check it answers.

    Round-trips a message, a record and a blob through scratch resources it then
    deletes, and says whether a store is there; it never creates one.
    """
    location = parse_location(storage)
    click.echo(f"storage: {location.description}")
    for line in check_location(location):
        click.echo(line)
    click.echo("ok")


@cli.command()
@click.argument("job", metavar="JOB")
@click.option(
    "--params",
    "params_text",
    default=None,
    metavar="JSON|@FILE",
    help="The job's parameters as JSON, or @path to a JSON file. Default: null, for a "
    "job that takes none.",
)
@click.option(
    "--job-id",
    default=None,
    help="Your id for the job (submitting the same job under it again is a no-op).",
)
@click.option(
    "--delay",
    "delay_seconds",
    type=click.IntRange(0, MAX_VISIBILITY_SECONDS),
    default=0,
    show_default=True,
    help="Seconds before planning starts.",
)
@click.option(
    "--priority",
    type=click.IntRange(*PRIORITY_RANGE),
    default=0,
    show_default=True,
    help="Higher first: while a job of its type with a higher priority runs, this one "
    "gets an eighth of its share of the workers.",
)
@click.option(
    "--after",
    "after",
    multiple=True,
    metavar="JOB_ID",
    help="Run after this job (repeatable): recorded waiting, it plans nothing until "
    "every job named is done, then starts by itself (--delay counts from then). One "
    "failing blocks it; one cancelled or deleted cancels it.",
)
@click.option(
    "--pipeline",
    default=None,
    metavar="ID",
    help="The pipeline this job is a step of; kept in its record, shown by status.",
)
@storage_option
def submit(
    job: str,
    params_text: str | None,
    job_id: str | None,
    delay_seconds: int,
    priority: int,
    after: tuple[str, ...],
    pipeline: str | None,
    storage: str | None,
) -> None:
    """Submit a job; print its id alone on stdout. JOB is module:Class."""

    params = _json_params(params_text) if params_text is not None else None
    done = record_submission(
        job,
        params,
        job_id=job_id,
        delay_seconds=delay_seconds,
        priority=priority,
        after=after,
        pipeline=pipeline,
        storage=storage,
    )
    said = done.not_applied("--priority")
    if said is not None:
        click.echo(f"runner: warning: {said}", err=True)
    click.echo(done.job_id)


def _json_params(text: str) -> object:
    """The ``--params`` value; what is wrong with it is one ``runner: error:`` line."""
    source = "--params"
    if text.startswith("@"):
        source = f"--params file {text[1:]}"
        try:
            text = Path(text[1:]).read_text()
        except OSError as error:
            raise ConfigurationError(f"cannot read {source}: {error.strerror}") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{source} is not JSON: {error}") from error


@cli.command(short_help="Run workers serving the queues of these job types.")
@click.argument("jobs", nargs=-1, required=True, metavar="JOB [JOB ...]")
@click.option(
    "--workers", type=click.IntRange(1, 256), default=1, show_default=True, help="Worker processes."
)
@click.option(
    "--restart/--no-restart",
    default=True,
    show_default=True,
    help="With --workers N > 1: start a new worker (after a backoff of 1 s doubling to "
    "60 s) in place of one that dies.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Chunks run at once per worker process (threads).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0, 256),
    default=None,
    help="Messages received ahead of a free slot, leased while they wait "
    "[default: adapts to chunk length, keeping about 1 s of work waiting: none for "
    "long chunks, up to 64 for chunks of milliseconds].",
)
@click.option(
    "--burst",
    is_flag=True,
    help="Exit 0 once every job of these types has ended (or waits on other jobs) and "
    "their queues are empty.",
)
@click.option(
    "--stop-timeout",
    "stop_timeout_seconds",
    type=click.FloatRange(0),
    show_default=True,
    default=DEFAULT_STOP_TIMEOUT_SECONDS,
    help="On SIGTERM/SIGINT, seconds running chunks get to reach a checkpoint.",
)
@click.option(
    "--poll-max",
    "poll_max_seconds",
    type=click.FloatRange(0.01),
    show_default=True,
    default=DEFAULT_POLL_MAX_SECONDS,
    help="Longest wait between polls of empty queues.",
)
@click.option(
    "--spark-master",
    default=None,
    metavar="URL",
    help="Spark master for SparkChunkedJob workers, each its own driver (default: the "
    "job's spark_master, else local[*]); sets RUNNER_SPARK_MASTER.",
)
@click.option(
    "--spark-remote",
    default=None,
    metavar="sc://HOST:PORT",
    help="Spark Connect server: SparkChunkedJob workers become thin Connect clients of it, "
    "no JVM in the worker (default: the job's spark_remote); sets RUNNER_SPARK_REMOTE.",
)
@click.option(
    "--spark-conf",
    default=None,
    metavar="JSON",
    help='Extra Spark conf as a JSON object, e.g. \'{"spark.executor.memory": "4g"}\'; '
    "sets RUNNER_SPARK_CONF.",
)
@click.option(
    "--log-level",
    default=None,
    type=LOG_LEVELS,
    help="Log level of the workers. Default: runner's --log-level, else INFO.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    show_default=True,
    help="Log lines as text, or as one JSON object per line (for log collectors).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    envvar=METRICS_PORT_ENV,
    metavar="PORT",
    help="Serve Prometheus metrics of every worker process at http://HOST:PORT/metrics "
    f"(docs/metrics.md). Default: ${METRICS_PORT_ENV}, else none.",
)
@click.option(
    "--metrics-host",
    default=DEFAULT_METRICS_HOST,
    envvar=METRICS_HOST_ENV,
    metavar="HOST",
    help="The address the metrics listen on; 0.0.0.0 for every interface. Default: "
    f"${METRICS_HOST_ENV}, else {DEFAULT_METRICS_HOST} (this machine only).",
)
@storage_option
def start(
    jobs: tuple[str, ...],
    workers: int,
    restart: bool,
    concurrency: int,
    prefetch: int | None,
    burst: bool,
    stop_timeout_seconds: float,
    poll_max_seconds: float,
    spark_master: str | None,
    spark_remote: str | None,
    spark_conf: str | None,
    log_level: str | None,
    log_format: LogFormat,
    metrics_port: int | None,
    metrics_host: str,
    storage: str | None,
) -> None:
    """Run workers serving the queues of these job types (JOB is module:Class).

    First SIGTERM/SIGINT: stop taking work, let running chunks reach their next
    checkpoint, save it, release their messages. Second: exit at once.
    """

    # Through the environment: spawned worker processes inherit it, and jobs.spark
    # reads its settings from there, in one place.
    _set_spark_target(spark_master, spark_remote)
    if spark_conf:
        try:
            if not isinstance(json.loads(spark_conf), dict):
                raise ValueError("not an object")
        except ValueError as error:
            raise click.BadParameter(
                f"not a JSON object: {error}", param_hint="--spark-conf"
            ) from error
        os.environ[CONF_ENV] = spark_conf

    level = log_level or click.get_current_context().find_root().params["log_level"] or "INFO"
    configure_logging(level.upper(), log_format)
    settings = WorkerSettings(
        concurrency=concurrency,
        prefetch=prefetch,
        poll_max_seconds=poll_max_seconds,
        burst=burst,
        stop_timeout_seconds=stop_timeout_seconds,
    )
    metrics = MetricsAddress(metrics_port, metrics_host) if metrics_port is not None else None
    options = StartOptions(jobs, storage, settings, level.upper(), log_format, metrics)
    sys.exit(run_workers(options, workers, restart=restart))


def _set_spark_target(master: str | None, remote: str | None) -> None:
    """Where workers run their Spark work, in the environment: an option given here
    replaces whatever master or remote the environment named before."""
    if master and remote:
        raise click.UsageError(
            "--spark-master and --spark-remote exclude each other: a worker is either a "
            "Spark driver or a Spark Connect client"
        )
    if remote:
        try:
            os.environ[REMOTE_ENV] = check_remote(remote, "--spark-remote")
        except ConfigurationError as error:
            raise click.BadParameter(str(error), param_hint="--spark-remote") from error
        os.environ.pop(MASTER_ENV, None)
    if master:
        os.environ[MASTER_ENV] = master
        os.environ.pop(REMOTE_ENV, None)


@cli.command(short_help="Show jobs: state, chunk counts, running chunks, failures.")
@click.argument("job_id", required=False)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Machine-readable output: a list of the jobs shown (the active ones unless "
    "--all or --state).",
)
@click.option(
    "--watch",
    is_flag=True,
    help="Keep showing it, refreshed, with rates, ETAs and workers (Ctrl-C quits); "
    "without a terminal, one plain line per job per refresh.",
)
@click.option(
    "--interval",
    "interval_seconds",
    type=click.FloatRange(MIN_INTERVAL_SECONDS),
    default=DEFAULT_INTERVAL_SECONDS,
    show_default=True,
    help="Seconds between refreshes of --watch.",
)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(JOB_STATES),
    help="Only jobs in this state (repeatable); by default the jobs not ended.",
)
@click.option(
    "--all", "every", is_flag=True, help="Every job, ended ones too (by default only counted)."
)
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=None,
    help=f"At most this many jobs, newest first [default: {SHOWN_BY_DEFAULT}; with --json, all].",
)
@click.option(
    "--pipeline",
    default=None,
    metavar="ID",
    help="Every step of this pipeline, in the order they run (what each waits on, or "
    "why it is blocked).",
)
@storage_option
@suggests_job_ids
def status(
    job_id: str | None,
    as_json: bool,
    watch: bool,
    interval_seconds: float,
    states: tuple[str, ...],
    every: bool,
    limit: int | None,
    pipeline: str | None,
    storage: str | None,
) -> None:
    """Show jobs, newest first: state, chunk counts, running chunks (worker, lease,
    progress), failures.

    By default the jobs not ended (waiting, planning, running, finalizing), and one line
    counting the ended ones; --all shows every job, --state the jobs in a state,
    --pipeline the steps of a pipeline."""

    if watch and as_json:
        raise click.UsageError("--watch shows a live view; for JSON, run --json repeatedly")
    if pipeline is not None:
        if job_id or states or every or limit or watch:
            raise click.UsageError(
                "--pipeline shows one pipeline: not with JOB_ID or --state, --all, --limit, --watch"
            )
        _pipeline_status(pipeline, as_json, storage)
        return
    if (states or limit or every) and job_id:
        raise click.UsageError("--state, --all and --limit select from the list: not with JOB_ID")
    if states and every:
        raise click.UsageError("--all lists every state: give --all or --state, not both")
    if limit is None and not as_json:
        limit = SHOWN_BY_DEFAULT  # a page to read; a script asking for JSON gets them all
    listing = Listing(states=states, every=every, limit=limit)
    with open_storage(storage, create=False) as opened:
        store = CheckpointStore(opened)
        if watch:
            watch_status(store, job_id, interval_seconds, listing)
            return
        snapshot = read_snapshot(store, job_id, listing)
    if as_json:
        report = list(snapshot.jobs)
        click.echo(json.dumps(to_json(report if not job_id else report[0]), indent=2))
    else:
        text = render_status(
            snapshot.jobs, sys.stdout.isatty(), snapshot.counts, listing, now=store.clock.now()
        )
        click.echo(text)


def _pipeline_status(pipeline: str, as_json: bool, storage: str | None) -> None:
    with open_storage(storage, create=False) as opened:
        store = CheckpointStore(opened)
        now = store.clock.now()
        found = pipeline_status(store, pipeline, now)
    if as_json:
        click.echo(json.dumps(to_json(found), indent=2))
        return
    color = sys.stdout.isatty()
    click.echo(render_pipeline(found, lambda step: render_job(step, color, now)))


_PIPELINE_OPTION = click.option(
    "--pipeline",
    default=None,
    metavar="ID",
    help="Every step of this pipeline not yet ended, instead of one JOB_ID.",
)


@cli.command(short_help="Cancel a job: nothing more of it runs.")
@click.argument("job_id", required=False)
@click.option("--reason", default="", help="Why, kept on the job and shown by status.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_PIPELINE_OPTION
@storage_option
@suggests_job_ids
def cancel(
    job_id: str | None, reason: str, as_json: bool, pipeline: str | None, storage: str | None
) -> None:
    """Cancel a job: running chunks stop at their next checkpoint (within 2 s, whatever
    their lease), waiting ones are dropped unrun, finalize does not run; the jobs waiting
    to run after it are cancelled too. Repeating it is harmless; cancelling a job that
    has ended is an error."""
    _controlled(
        [
            manage.cancel(one, reason, storage=storage)
            for one in _targets(job_id, pipeline, storage)
        ],
        as_json,
    )


@cli.command(short_help="Pause a job: no new chunk of it starts until resumed.")
@click.argument("job_id", required=False)
@click.option(
    "--drain", is_flag=True, help="Let running chunks finish instead of handing them back."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_PIPELINE_OPTION
@storage_option
@suggests_job_ids
def pause(
    job_id: str | None, drain: bool, as_json: bool, pipeline: str | None, storage: str | None
) -> None:
    """Pause a job: no new chunk starts; running chunks save their state and hand their
    messages back within 2 s (no attempt spent), or finish with --drain. Nothing is
    poisoned while paused; waiting messages are parked for a quarter of the pause (5 min
    to 1 h), about 4 storage requests per waiting chunk per park. `runner resume`
    continues from the checkpoints."""
    _controlled(
        [
            manage.pause(one, drain=drain, storage=storage)
            for one in _targets(job_id, pipeline, storage)
        ],
        as_json,
    )


@cli.command(short_help="Resume a paused job from its checkpoints.")
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_PIPELINE_OPTION
@storage_option
@suggests_job_ids
def resume(job_id: str | None, as_json: bool, pipeline: str | None, storage: str | None) -> None:
    """Resume a paused job from its checkpoints (its waiting chunks come back within
    5 s, however long it was paused): its parked messages are made visible at once, one
    storage request per parked chunk, and looked for again 2 s later."""
    _controlled(
        [manage.resume(one, storage=storage) for one in _targets(job_id, pipeline, storage)],
        as_json,
    )


def _targets(job_id: str | None, pipeline: str | None, storage: str | None) -> list[str]:
    """The job a control command acts on: JOB_ID, or each step of --pipeline not ended
    (in the order they run)."""
    if (job_id is None) == (pipeline is None):
        raise click.UsageError("give a JOB_ID or --pipeline ID (one of them)")
    if pipeline is None:
        assert job_id is not None
        return [job_id]
    with open_storage(storage, create=False) as opened:
        found, _ = pipeline_jobs(CheckpointStore(opened), pipeline)
    return [job.job_id for job in found if not job.ended]


def _controlled(jobs: list[JobRecord], as_json: bool) -> None:
    """What a control command did: a JSON object per job (a list for several), or a
    line per job."""
    if as_json:
        shown = [_control_fields(job) for job in jobs]
        click.echo(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2))
        return
    for job in jobs:
        click.echo(_control_line(job))


def _control_fields(job: JobRecord) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "state": job.state,
        "paused": job.paused_on is not None,
        "paused_on": utc(job.paused_on),
        "drain": job.drain,
        "cancelled_on": utc(job.cancelled_on),
        "cancel_reason": job.cancel_reason,
    }


def _control_line(job: JobRecord) -> str:
    if job.cancelled_on is not None:
        reason = f": {job.cancel_reason}" if job.cancel_reason else ""
        return f"{job.job_id}: {job.state}, cancelled on {utc(job.cancelled_on)}{reason}"
    if job.paused_on is not None:
        drain = ", running chunks finish" if job.drain else ""
        return f"{job.job_id}: paused since {utc(job.paused_on)}{drain}"
    return f"{job.job_id}: {job.state}"


@cli.command(short_help="List a job's failed and poisoned chunks with their errors.")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV with a header row.")
@click.option(
    "--full", is_flag=True, help="Tracebacks whole, with the engine's frames above your code."
)
@storage_option
@suggests_job_ids
def report(job_id: str, as_json: bool, as_csv: bool, full: bool, storage: str | None) -> None:
    """Every failed (retrying) or poisoned chunk of a job, with a payload summary,
    attempts, last error and traceback (from your code's first frame)."""
    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    with open_storage(storage, create=False) as opened:
        store = CheckpointStore(opened)
        store.get_job(job_id)
        entries = failure_report(store, job_id)
        if as_csv:
            writer = csv.DictWriter(sys.stdout, fieldnames=REPORT_COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(map(report_csv_row, entries))
        elif as_json:
            for entry in entries:
                click.echo(json.dumps(entry))
        else:
            click.echo(render_report(job_id, entries, full))


@cli.group(short_help="Poisoned chunks and rejected submissions: list, redrive, purge.")
def poison() -> None:
    """Inspect and re-run poisoned chunks; list and purge the submissions the intake
    queues rejected."""


@poison.command("list", short_help="List a job's poisoned chunks, or rejected submissions.")
@click.argument("job_id", required=False)
@click.option(
    "--queue",
    "job_queue",
    metavar="QUEUE",
    default=None,
    help="With no JOB_ID: only the submissions rejected by QUEUE's intake "
    "(QUEUE-intake). Default: every intake's.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@storage_option
@suggests_job_ids
def poison_list(
    job_id: str | None, job_queue: str | None, as_json: bool, storage: str | None
) -> None:
    """List a job's poisoned chunks with their last error; with no JOB_ID, the
    submissions the intake queues rejected, with their reasons (the oldest 32 of each
    queue)."""

    if job_id is not None and job_queue is not None:
        raise click.UsageError("--queue lists rejected submissions: give it without a JOB_ID")
    with open_storage(storage, create=False) as opened:
        if job_id is None:
            found_rejected = read_rejections(opened.queues, job_queue)
            if as_json:
                click.echo(json.dumps(rejections_json(found_rejected), indent=2))
            else:
                click.echo(render_rejections(found_rejected))
            return
        store = CheckpointStore(opened)
        store.get_job(job_id)
        found = poisoned_chunks(store, job_id)
    click.echo(json.dumps(to_json(found), indent=2) if as_json else render_poisoned(job_id, found))


@poison.command("purge", short_help="Delete the submissions the intake queues rejected.")
@click.option(
    "--queue",
    "job_queue",
    metavar="QUEUE",
    default=None,
    help="Only those rejected by QUEUE's intake (QUEUE-intake). Default: every intake's.",
)
@click.option(
    "--older-than",
    metavar="AGE",
    default=None,
    callback=lambda ctx, param, value: _age(ctx, param, value) if value else None,
    help="Only those rejected longer ago than this: a whole number with s, m, h or d.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@storage_option
def poison_purge(
    job_queue: str | None,
    older_than: timedelta | None,
    dry_run: bool,
    as_json: bool,
    storage: str | None,
) -> None:
    """Delete the submissions the intake queues rejected (a job's poisoned chunks go
    with `poison redrive` or `delete`)."""

    with open_storage(storage, create=False) as opened:
        budget = CheckpointStore(opened).budget()
        counts = purge_rejections(
            opened.queues, budget, job_queue, older_than, now=_now(), dry_run=dry_run
        )
    if as_json:
        shown = [{"queue": q, "deleted": n, "dry_run": dry_run} for q, n in counts.items()]
        click.echo(json.dumps(shown, indent=2))
        return
    verb = "would delete" if dry_run else "deleted"
    for name, count in counts.items():
        click.echo(f"{name}: {verb} {count} rejected submission(s)")
    suffix = " (dry run)" if dry_run else ""
    click.echo(f"{verb} {sum(counts.values())} rejected submission(s){suffix}")


@poison.command("redrive", short_help="Re-run a job's poisoned chunks with fresh attempts.")
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--pipeline",
    default=None,
    metavar="ID",
    help="Every failed step of this pipeline, in the order they run, instead of one JOB_ID.",
)
@storage_option
@suggests_job_ids
def poison_redrive(
    job_id: str | None, as_json: bool, pipeline: str | None, storage: str | None
) -> None:
    """Re-run a job's poisoned chunks (fresh attempts), and those a failure past its
    tolerated_failures dropped; the job can then finish, and the jobs after it start.
    Running it again finishes a redrive that died midway. Nothing done runs again."""
    if (job_id is None) == (pipeline is None):
        raise click.UsageError("give a JOB_ID or --pipeline ID (one of them)")
    with open_storage(storage, create=False) as opened:
        store = CheckpointStore(opened)
        if pipeline is None:
            assert job_id is not None
            outcomes = [redrive_job(store, opened.queues, job_id)]
        else:
            outcomes = redrive_pipeline(store, opened.queues, pipeline)
    if as_json:
        shown = to_json(outcomes if pipeline is not None else outcomes[0])
        click.echo(json.dumps(shown, indent=2))
    else:
        for outcome in outcomes:
            click.echo("\n".join(outcome.lines()))
    left = sum(len(outcome.unreadable) for outcome in outcomes)
    if left:
        of = job_id if pipeline is None else f"pipeline {pipeline}"
        raise BadRecord(
            f"{left} record(s) of {of} cannot be read and were left as they are (see "
            "above); mend or delete them by hand, then redrive again"
        )


@cli.command()
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Delete a job that has not ended: cancel it first.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@storage_option
@suggests_job_ids
def delete(job_id: str, force: bool, as_json: bool, storage: str | None) -> None:
    """Delete an ended job's records, blobs and messages."""

    deleted = delete_job(job_id, force=force, storage=storage)
    click.echo(json.dumps(_deleted_json(deleted), indent=2) if as_json else _deleted_line(deleted))


def _now() -> datetime:
    """Now, from which ages are counted (a test moves it)."""
    return SystemClock().now()


def _age(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    try:
        return parse_age(value)
    except ConfigurationError as error:
        raise click.BadParameter(str(error)) from error


@cli.command(short_help="Delete the ended jobs last updated longer ago than AGE.")
@click.option(
    "--older-than",
    required=True,
    metavar="AGE",
    callback=_age,
    help="Jobs last updated longer ago than this: a whole number with s, m, h or d (7d).",
)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(ENDED_JOB_STATES),
    help="Only jobs in this state (repeatable). Default: done, failed and cancelled.",
)
@click.option("--dry-run", is_flag=True, help="Show which jobs would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@storage_option
def purge(
    older_than: timedelta,
    states: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    storage: str | None,
) -> None:
    """Delete the ended jobs last updated longer ago than AGE, as `delete` does."""

    found = purge_jobs(
        older_than, states=states or ENDED_JOB_STATES, dry_run=dry_run, storage=storage
    )
    if as_json:
        click.echo(json.dumps([_deleted_json(deleted) for deleted in found], indent=2))
        return
    for deleted in found:
        click.echo(_deleted_line(deleted))
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {len(found)} job(s)" + (" (dry run)" if dry_run else ""))


def _deleted_line(deleted: Deleted) -> str:
    if deleted.dry_run:
        updated = utc(deleted.updated_on) or "never"
        return f"would delete {deleted.job_id} ({deleted.state}, updated {updated})"
    return (
        f"deleted {deleted.job_id} ({deleted.state}): {deleted.records} record(s), "
        f"{deleted.blobs} blob(s), {deleted.messages} message(s)"
    )


def _deleted_json(deleted: Deleted) -> dict[str, object]:
    return {
        "job_id": deleted.job_id,
        "state": deleted.state,
        "updated_on": utc(deleted.updated_on),
        "dry_run": deleted.dry_run,
        "records": deleted.records,
        "blobs": deleted.blobs,
        "messages": deleted.messages,
    }


cli.add_command(dashboard)
cli.add_command(lease)
cli.add_command(limit)


def main() -> None:
    """Console entry point: every error becomes one clear line and exit code 1; the
    traceback is shown too with ``--log-level debug``."""
    try:
        cli.main(prog_name="runner", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as usage:
        usage.show()
        sys.exit(usage.exit_code)
    except InvalidParams as error:  # the job's own validate said no: bad usage
        _fail(str(error), exit_code=2)
    except MissingExtra as error:  # the command is not installed here: as if unknown
        _fail(str(error), exit_code=2)
    except RunnerError as error:
        _fail(str(error))
    except OSError as error:  # a path that cannot be made, read or written
        _fail(f"{error.strerror or error}: {error.filename}" if error.filename else str(error))
    except Exception as error:  # noqa: BLE001 - a bug of ours: still one line by default
        _fail(f"unexpected {type(error).__name__}: {error} (--log-level debug shows where)")


def _fail(line: str, exit_code: int = 1) -> NoReturn:
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        traceback.print_exc()
    click.echo(f"runner: error: {line}", err=True)
    sys.exit(exit_code)
