"""The status of jobs and workers as typed values: what ``runner status`` reads
(:mod:`runner.cli.status`, :mod:`runner.cli.snapshot`) and every view of it shows.

The text view (:mod:`runner.cli.render`), ``--watch`` (:mod:`runner.cli.watch_view`,
:mod:`runner.cli.watch_lines`) and a dashboard read the same frozen values by attribute,
so a misspelt field is a type error, not a ``KeyError`` at the first refresh. Times are
``datetime`` here; ``--json`` is made from these values in one place,
:func:`runner.cli.json_form.to_json`: each field's name is its key, in field order, so the
fields below are declared in the order docs/cli.md shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal


@dataclass(frozen=True)
class ChunkCounts:
    """How many of a job's chunks are in each state (``cancelled``: dropped unrun once
    its ``cancelled_on`` is set; ``waiting`` is 0 then)."""

    total: int
    done: int
    running: int
    waiting: int
    failed: int
    poisoned: int
    cancelled: int


@dataclass(frozen=True)
class RunningChunk:
    """A chunk claimed and not ended: who runs it, until when, how far it said it got.

    ``progress`` is its last durable state as a JSON value
    (:func:`runner.cli.json_form.bounded_user_value`), None and ``progress_omitted``
    when too large; ``progress_text`` its ``repr``, cut for people."""

    index: int
    worker: str | None
    attempt: int
    lease_until: datetime | None
    lease_expired: bool
    progress: Any
    progress_omitted: bool
    progress_text: str
    progress_fraction: float | None
    progress_done: int | float | None
    progress_total: int | float | None
    checkpoint_on: datetime | None
    started_on: datetime | None


@dataclass(frozen=True)
class FailedTask:
    """A retrying or poisoned task (planning, a chunk or finalize) and its last error;
    ``retry_at`` is None when it has no next try."""

    kind: str
    index: int
    attempt: int
    state: str
    max_attempts: int | None
    retryable: bool | None
    retry_at: datetime | None
    retry_due: bool
    error_type: str | None
    error_message: str | None
    traceback: str | None


@dataclass(frozen=True)
class Unreadable:
    """A record status met and cannot read (``kind`` ``job``, ``chunk``, ``plan``,
    ``final`` or ``counter``), and what is wrong with it."""

    kind: str
    index: int
    problem: str


@dataclass(frozen=True)
class WorkerStatus:
    """One worker as its last heartbeat says, ``gone`` and ``seen_ago_seconds`` as of
    the snapshot."""

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    job_types: tuple[str, ...]
    concurrency: int
    running: int
    tasks: tuple[str, ...]
    state: str
    gone: bool
    started_on: datetime
    seen_on: datetime
    seen_ago_seconds: float
    beat_seconds: float


@dataclass(frozen=True)
class LimitStatus:
    """One shared limit (``runner limit``): a rate (``kind`` "rate": ``value`` like
    "100/s", the bucket's ``tokens`` now of ``burst``) or a running limit ("running":
    ``value`` the count, ``running`` the slots held now); who set it (``set_by``: "hand"
    or the job type whose class value created it) and the job types naming it."""

    name: str
    kind: Literal["rate", "running"]
    value: str
    set_by: str
    rate_per_second: float | None
    tokens: float | None
    burst: float | None
    max_running: int | None
    running: int | None
    named_by: tuple[str, ...]


@dataclass(frozen=True)
class LeaseStatus:
    """One job type's adaptive lease, as its workers share it (``runner lease``).

    ``lease_seconds`` is what its new messages get now: ``pinned_seconds`` when an
    operator pinned it (``state`` "pinned"), else ``learned_seconds`` ("learned"), sized
    within ``low_seconds``-``high_seconds`` from ``lateness_percentile_seconds`` (the
    99.9th percentile of how late ``lateness_samples`` renewals landed);
    ``lost_last_hour`` counts the leases lost. A row nobody can read is ``state``
    "unreadable" with ``error`` saying why, every value null."""

    job_type: str
    state: Literal["learned", "pinned", "unreadable"]
    lease_seconds: int | None
    learned_seconds: int | None
    pinned_seconds: int | None
    low_seconds: int | None
    high_seconds: int | None
    lateness_percentile_seconds: float | None
    lateness_samples: int | None
    lost_last_hour: int | None
    error: str | None = None


@dataclass(frozen=True)
class JobStatus:
    """One job: its state and stop order (paused / cancelled), counts, progress, the running,
    failed and poisoned tasks, finalize's state, the records that cannot be read, and
    the workers serving its queues."""

    job_id: str
    job_type: str
    queue: str
    #: Every queue its messages travel on: ``(queue,)``, or ``queue-0`` ... for a job
    #: of several queues.
    queues: tuple[str, ...]
    state: str
    error: str | None
    paused: bool
    paused_on: datetime | None
    drain: bool
    cancelled_on: datetime | None
    cancel_reason: str | None
    created_on: datetime | None
    #: When the job's own record was last written (a change of state, a pause, ...).
    updated_on: datetime | None
    #: When the job last moved: a chunk counted done or poisoned, or a checkpoint written.
    last_progress_at: datetime | None
    planning_done: bool
    chunks: ChunkCounts
    progress_fraction: float | None
    #: Its rate since its work began and the ETA at that rate, as the store says them
    #: (:mod:`runner.cli.pace`); None while unknown, paused or ended.
    chunks_per_second: float | None
    eta_seconds: float | None
    running: tuple[RunningChunk, ...]
    failed: tuple[FailedTask, ...]
    poisoned: tuple[FailedTask, ...]
    finalize: str | None
    unreadable: tuple[Unreadable, ...]
    workers: tuple[WorkerStatus, ...] = ()
    #: The limits of its type (named after its queue) and the resources its class names.
    limits: tuple[LimitStatus, ...] = ()
    #: ``submit(..., priority=N)``: higher is fed first (docs/semantics.md §22).
    priority: int = 0
    #: ``submit(..., after=[...])``: the jobs it runs after, and those of them not
    #: done yet while it waits (docs/semantics.md §23).
    after: tuple[str, ...] = ()
    waiting_on: tuple[str, ...] = ()
    #: Why it is blocked (state ``blocked``: a job it runs after failed), else None.
    blocked: str | None = None
    #: ``submit(..., pipeline=...)``: the pipeline it is a step of.
    pipeline: str | None = None
    #: A redrive of it began and has not finished (``runner poison redrive`` again
    #: finishes it).
    redriving: bool = False
    #: Its type's adaptive lease (``runner lease``), None while its type has no row (a
    #: class that fixes ``lease_seconds``, or nothing learned or pinned yet).
    lease: LeaseStatus | None = None

    @property
    def dropped(self) -> bool:
        """Its remaining chunks are dropped unrun (cancelled, or failed past its
        tolerance): nothing of it waits or is retried."""
        return self.cancelled_on is not None


@dataclass(frozen=True, kw_only=True)
class UnreadableJob:
    """A job whose own record cannot be read: its id, why, and nothing else."""

    job_id: str
    state: Literal["unreadable"] = "unreadable"
    error: str
    unreadable: tuple[Unreadable, ...]


#: What status says of one job.
AnyJob = JobStatus | UnreadableJob


@dataclass(frozen=True)
class JobCounts:
    """The store's jobs counted from the catalogue, beside the page a view lists.

    Attributes:
        by_state: jobs in each state (every state named, 0 included).
        unreadable: catalogue entries that cannot be read.
        matched: jobs the view's filter matched, before its limit or page.
        left_out: of those, the jobs its limit or page left out.
    """

    by_state: Mapping[str, int]
    unreadable: int
    matched: int
    left_out: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_state.values()) + self.unreadable


@dataclass(frozen=True)
class Snapshot:
    """Everything status shows, read at once: the jobs, and the workers of the last hour
    (with one job asked for, those serving its queue); ``counts`` counts every job of the
    store when a list was read (None for one job)."""

    taken_on: datetime
    jobs: tuple[AnyJob, ...]
    workers: tuple[WorkerStatus, ...]
    counts: JobCounts | None = None


@dataclass(frozen=True)
class Rate:
    """A job's pace over ``--watch``'s last refreshes (None while unknown)."""

    chunks_per_second: float | None = None
    eta_seconds: float | None = None


@dataclass(frozen=True)
class WatchFrame:
    """One refresh of ``--watch``: the snapshot, each job's rate by job id, and what the
    header says; ``error`` when this refresh failed and ``snapshot`` is the last good one."""

    snapshot: Snapshot
    rates: Mapping[str, Rate] = field(default_factory=dict)
    storage: str = ""
    interval_seconds: float = 0.0
    error: str | None = None
