"""``jobs.submit``: record a job and enqueue its planning; returns at once."""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from checkpoint import checks, codec, layout
from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError, JobNotFound
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.service_targets import MAX_VISIBILITY_SECONDS
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs import dependencies
from jobs.errors import InvalidParams, JobIdTaken, UnknownPredecessor
from jobs.job import ChunkedJob, check_runnable
from jobs.registry import load_job_class

log = logging.getLogger(__name__)

#: Characters of the first submission's params an error shows.
SHOWN_PARAMS_CHARS = 120
#: Bounds of a job's priority (any whole number between would do; these keep it short).
PRIORITY_RANGE = (-1_000_000, 1_000_000)


def new_job_id(job_class: type[ChunkedJob], now_text: str) -> str:
    """``<queue>-<UTC yyyymmdd-HHMMSS>-<6 hex>``: sortable by time, unique."""
    return f"{job_class.queue}-{now_text}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Submitted:
    """What a submit did: ``job_id``, and ``kept_priority`` when the job existed already
    with another priority than the ``asked_priority`` (the existing one stands);
    ``created``: False when it existed already; ``state``: the job's state then."""

    job_id: str
    asked_priority: int = 0
    kept_priority: int | None = None
    created: bool = True
    state: str = "planning"

    def not_applied(self, option: str = "priority") -> str | None:
        """One line saying what was kept and what not applied, or None if nothing was
        left out. ``option`` names the setting as the caller's user wrote it."""
        if self.kept_priority is None:
            return None
        return (
            f"job {self.job_id!r} exists already: kept its params and priority "
            f"{self.kept_priority}; the new {option} {self.asked_priority} was not applied"
        )


def submit(
    job: type[ChunkedJob] | str,
    params: Any,
    *,
    job_id: str | None = None,
    delay_seconds: int = 0,
    priority: int = 0,
    after: Sequence[str] = (),
    pipeline: str | None = None,
    storage: Storage | str | None = None,
) -> str:
    """Submit a job: record it and enqueue its planning (``split`` runs on a worker).

    Args:
        job: the ChunkedJob subclass, or its ``module:Class`` name.
        params: the job's parameters (msgpack-able); given to ``split``, ``process``
            (as ``chunk.params``) and ``finalize``.
        job_id: your id for the job; submitting an existing id again returns it
            without creating a duplicate. Default: generated.
        delay_seconds: planning starts after this long (0-604800).
        priority: higher first: while a job of its type with a higher priority is
            planning or running, a job feeds its chunks to the queue an eighth of its
            window at a time, so the higher one gets most of the workers and the lower
            one is not starved (docs/semantics.md §22). Default 0; negative is lower.
            A submit under an existing id keeps the first submission's, with a
            warning logged when this one asked for another.
        after: ids of jobs this one runs after: it is recorded ``waiting`` and plans
            nothing until every one of them is ``done`` (then within a poll, started
            by the worker that finished the last; ``delay_seconds`` counts from
            then). One of them failing leaves it blocked; cancelled or deleted, it
            is cancelled too (docs/semantics.md §23). Each must exist.
        pipeline: the pipeline this job is a step of (``runner status --pipeline``).
        storage: a Storage, a ``--storage`` value, or None for ``$RUNNER_STORAGE`` /
            ``./.runner``.

    Returns:
        The job id.

    Raises:
        InvalidParams: the class's ``validate`` refused ``params`` (nothing recorded).
        JobIdTaken: ``job_id`` is a job of another class, other params, or runs after
            other jobs or in another pipeline.
        JobNotFound: a job named in ``after`` does not exist (nothing recorded; the
            error is a ``jobs.errors.UnknownPredecessor``, naming it in ``job_id``).
    """
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
    said = done.not_applied()
    if said is not None:
        log.warning("%s", said)
    return done.job_id


def record_submission(
    job: type[ChunkedJob] | str,
    params: Any,
    *,
    job_id: str | None = None,
    delay_seconds: int = 0,
    priority: int = 0,
    after: Sequence[str] = (),
    pipeline: str | None = None,
    storage: Storage | str | None = None,
) -> Submitted:
    """:func:`submit`, saying what it did instead of logging it (``runner submit``
    prints it its own way)."""
    job_class = load_job_class(job) if isinstance(job, str) else job
    check_runnable(job_class)
    validate_params(job_class, params)
    _check_order(delay_seconds, priority)
    after = _job_ids(after, "after")
    if pipeline is not None:
        _job_ids([pipeline], "pipeline")
    opened = storage if isinstance(storage, Storage) else open_storage(storage)
    try:
        store = CheckpointStore(opened)
        return record_job(
            store,
            job_class,
            params,
            store.budget(),
            job_id=job_id,
            delay_seconds=delay_seconds,
            priority=priority,
            after=after,
            pipeline=pipeline,
        )
    finally:
        if opened is not storage:
            opened.close()


def _check_order(delay_seconds: int, priority: int) -> None:
    """A submit's ``delay_seconds`` and ``priority``, refused in one line if out of range."""
    # The delay is the planning message's visibility: at most Azure's 7 days.
    checks.whole(
        delay_seconds,
        "delay_seconds",
        lowest=0,
        highest=MAX_VISIBILITY_SECONDS,
        unit="seconds",
        error=ConfigurationError,
    )
    low, high = PRIORITY_RANGE
    checks.whole(priority, "priority", lowest=low, highest=high, error=ConfigurationError)


def record_job(
    store: CheckpointStore,
    job_class: type[ChunkedJob],
    params: Any,
    budget: Budget,
    *,
    job_id: str | None = None,
    delay_seconds: int = 0,
    priority: int = 0,
    after: tuple[str, ...] = (),
    pipeline: str | None = None,
) -> Submitted:
    """Record a job whose class, params and settings were checked already, by
    :func:`record_submission` or by a caller of its own: its notes, its record, its
    queues and its planning message, each store call within ``budget``. Idempotent by
    ``job_id``: a submission made again, or retried after a write applied with its
    answer lost, finds the job it recorded.

    Raises:
        UnknownPredecessor: a job named in ``after`` does not exist (nothing recorded).
        JobIdTaken: ``job_id`` is another job (see :func:`submit`).
    """
    store.ensure(budget)  # the notes below go before the job's record
    for before in after:
        _must_exist(store, before, budget)
    job_id = job_id or new_job_id(job_class, store.clock.now().strftime("%Y%m%d-%H%M%S"))
    if job_id in after:
        raise ConfigurationError(f"job {job_id!r} cannot run after itself")
    # Noted before the job is recorded: a job's hand-off then cannot miss it
    # (jobs.dependencies).
    for before in after:
        store.dependents.note(before, job_id, budget)
    if pipeline is not None:
        store.pipeline_steps.note(pipeline, job_id, budget)
    record, created = store.create_job(
        job_id,
        job_class.job_type(),
        job_class.queue,
        params,
        priority=priority,
        queue_count=job_class.queues,
        after=after,
        pipeline=pipeline,
        delay_seconds=delay_seconds,
        budget=budget,
    )
    done = Submitted(job_id, priority, state=record.state)
    if not created:
        _same_submission(store, record, job_class.job_type(), params)
        _same_order(record, after, pipeline)
        log.info("job %s exists already (state %s), submitted alike", job_id, record.state)
        done = replace(done, created=False)
        if record.priority != priority:
            done = replace(done, kept_priority=record.priority)
    queues = store.storage.queues
    if record.state in ("planning", "waiting"):
        # The record's queues, not the class's: a re-submit of a job submitted
        # when its class had another count must find the queues its job uses.
        for name in record.every_queue:
            budget.call(functools.partial(queues.create_queue, name))
    if record.state == "waiting":
        # Its predecessors may all be done already (or one cancelled): settled
        # here, as a hand-off that ran before this job was recorded did not.
        dependencies.settle_waiting(store, queues, record, budget)
    elif record.state == "planning":
        # Also on a re-submit: if the first submit died before sending, this is the
        # plan message; if not, the duplicate is dropped unrun when received.
        dependencies.send_planning(queues, record, delay_seconds, budget)
    return done


def validate_params(job_class: type[ChunkedJob], params: Any) -> None:
    """The class's ``validate``, its refusal as one InvalidParams line naming the class
    (any other exception it raises goes through as it is)."""
    try:
        job_class().validate(params)
    except (ValueError, TypeError, LookupError) as refused:
        # A ValueError says what is wrong in its own words; a KeyError's text alone
        # ("'numbers'") would not, so its kind goes with it.
        said = str(refused) if isinstance(refused, ValueError) else _with_kind(refused)
        raise InvalidParams(f"{job_class.job_type()} refused its params: {said}") from refused


def _with_kind(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _same_submission(store: CheckpointStore, job: JobRecord, job_type: str, params: Any) -> None:
    """A submit under an existing id is idempotent only when it asks for the same job:
    anything else would be silently dropped, so it is refused."""
    if job.job_type != job_type:
        raise _taken(job, f"exists already as {job.job_type}, not {job_type}")
    first = store.params(job)
    # Compared as stored: msgpack makes a tuple a list, as the job would see it.
    if codec.decode(codec.encode(params, "params"), "params") != first:
        shown = repr(first)
        if len(shown) > SHOWN_PARAMS_CHARS:
            shown = shown[: SHOWN_PARAMS_CHARS - 3] + "..."
        raise _taken(job, f"exists already with other params ({shown})")


def _job_ids(ids: Sequence[str], what: str) -> tuple[str, ...]:
    """Job ids as given, each once, in their order; a bad one refused in one line."""
    if isinstance(ids, str):
        ids = [ids]
    kept: list[str] = []
    for job_id in ids:
        try:
            layout.check_job_id(job_id)
        except ConfigurationError as bad:
            raise ConfigurationError(f"{what}: {bad}") from None
        if job_id not in kept:
            kept.append(job_id)
    return tuple(kept)


def _must_exist(store: CheckpointStore, job_id: str, budget: Budget) -> None:
    try:
        store.get_job(job_id, budget)
    except JobNotFound:
        raise UnknownPredecessor(
            job_id,
            f"cannot run after {job_id!r}: no such job in {store.storage.description} "
            "(submit it first; nothing was recorded)",
        ) from None


def _same_order(job: JobRecord, after: tuple[str, ...], pipeline: str | None) -> None:
    """A submit under an existing id must name the same jobs to run after (in any order)
    and the same pipeline: a job's place in a pipeline never changes."""
    if set(job.after) != set(after):
        was = ", ".join(job.after) or "no job"
        raise _taken(job, f"exists already, to run after {was}")
    if job.pipeline != pipeline:
        raise _taken(job, f"exists already in pipeline {job.pipeline!r}")


def _taken(job: JobRecord, clash: str) -> JobIdTaken:
    return JobIdTaken(
        f"job {job.job_id!r} {clash}; submit under another --job-id, or `runner delete "
        f"{job.job_id}` (--force if it has not ended) and submit again",
        clash=f"job {job.job_id!r} {clash}",
    )
