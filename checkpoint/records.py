"""The job and task records as Python objects, and their stored properties.

A *task* is anything a worker runs under a lease: a job's planning, one chunk, or its
finalize. All three share one record shape, so claiming, fencing and checkpointing
are written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, TypeGuard, TypeVar, get_args

from checkpoint import checks, layout
from checkpoint.errors import BadRecord
from checkpoint.storage import PropertyValue, Record

TaskKind = Literal["plan", "chunk", "feed", "final"]
TaskState = Literal["waiting", "running", "retrying", "done", "poisoned"]
JobState = Literal["waiting", "planning", "running", "finalizing", "done", "failed", "cancelled"]

#: Fields whose msgpack value moves to a blob when larger than this many bytes. Azure's
#: property size target is 64 KiB; staying under it leaves room for the rest of the record.
SPILL_BYTES = 48 * 1024
#: Longest error text kept (characters); tracebacks keep their end, where the cause is.
MAX_ERROR_CHARS = 8_000


#: The states a record may be in, in the order status shows them (read from the Literal
#: types above, so that each list is written once).
TASK_STATES: tuple[TaskState, ...] = get_args(TaskState)
JOB_STATES: tuple[JobState, ...] = get_args(JobState)

#: The tasks of a job beside its chunks, one record each: planning, feeding, finalize.
CONTROL_KINDS: tuple[TaskKind, ...] = ("plan", "feed", "final")
#: What logs and status call each of them.
CONTROL_WORDS: dict[str, str] = {"plan": "planning", "feed": "feeding", "final": "finalize"}

#: Job record properties of a job that runs after others (:class:`JobRecord`).
AFTER = "after"
PIPELINE = "pipeline"
DELAY_SECONDS = "delay_seconds"
DEPENDENTS_STARTED = "dependents_started"

#: A job record property: a redrive of the job is under way (:mod:`runner.cli.redrive`);
#: one that finds it set gives every unfinished task a message again, as the one that
#: set it died before it cleared it.
REDRIVING = "redriving"

#: Job states after which nothing of the job runs again.
ENDED_JOB_STATES: tuple[JobState, ...] = ("done", "failed", "cancelled")


class _Removed:
    """The type of :data:`REMOVED`."""

    def __repr__(self) -> str:
        return "REMOVED"


#: A job change's value that removes the property from the record, where a merge would
#: keep it (``cancelled_on``, which a redrive of a job failed past its tolerance takes
#: away): the record is then replaced whole, on its ETag, with that change
#: (:class:`checkpoint.catalogue.job_moves.StateMoves`).
REMOVED: Final = _Removed()

_Known = TypeVar("_Known", bound=str)


@dataclass(frozen=True)
class JobRecord:
    """A submitted job: its type, parameters and overall state.

    Attributes:
        cancelled_on: when its remaining tasks were cancelled (``runner cancel``, or
            more chunks poisoned than it tolerates), else None; ``cancel_reason`` why.
            A redrive of a job failed past its tolerance removes both.
        paused_on: when it was paused (``runner pause``), None while it runs; with
            ``drain``, chunks running then were let finish.
        incarnation: a random token set when the record was created and carried in
            every message of the job, so a message left over from a deleted job is
            never taken for a new job of the same id (None: recorded before tokens).
        deleting_on: when its deletion began (``runner delete``), else None; from then
            on its messages are deleted unrun and its running tasks stop as if cancelled.
        priority: ``submit(..., priority=N)``: among running jobs of one type, a job
            of higher priority gets most of the workers (docs/semantics.md §22).
        queue_count: the queues its chunks are spread over, as its class said when it
            was submitted (records without one: 1); see :attr:`queues`.
        after: the jobs it runs after (``submit(..., after=[...])``): it is recorded
            ``waiting`` and plans nothing until each of them is done
            (:mod:`jobs.dependencies`).
        pipeline: the pipeline it is a step of (``submit(..., pipeline=...)``), or None.
        delay_seconds: how long its planning waits once it may start (a job that runs
            after others keeps its submit's delay until then).
        dependents_started: its dependents were looked at after it ended done, and
            those it was the last to wait for started; a finalize message delivered
            again before this is set does it again.
        redriving: a redrive of it began and has not finished (:data:`REDRIVING`).
    """

    job_id: str
    job_type: str
    queue: str
    state: JobState
    total: int | None
    created_on: datetime | None
    updated_on: datetime | None
    error: str | None
    etag: str
    properties: dict[str, PropertyValue]
    cancelled_on: datetime | None = None
    cancel_reason: str | None = None
    paused_on: datetime | None = None
    drain: bool = False
    incarnation: str | None = None
    deleting_on: datetime | None = None
    priority: int = 0
    queue_count: int = 1
    after: tuple[str, ...] = ()
    pipeline: str | None = None
    delay_seconds: int = 0
    dependents_started: bool = False
    redriving: bool = False

    @property
    def name(self) -> str:
        return record_name(self.job_id, "job")

    @property
    def queues(self) -> tuple[str, ...]:
        """Every queue its messages go to; planning and finalize use the first."""
        return layout.job_queues(self.queue, self.queue_count)

    def chunk_queue(self, index: int) -> str:
        """The queue of its chunk ``index``."""
        return layout.chunk_queue(self.queue, self.queue_count, index)

    @property
    def every_queue(self) -> tuple[str, ...]:
        """Every queue a message of it can be in: its type's resume queue (one however
        many queues, where running chunks' messages wait), its queues and their poison
        queues."""
        names = [layout.resume_queue_of(self.queue)]
        for queue in self.queues:
            names += (queue, layout.poison_queue_of(queue))
        return tuple(names)

    @property
    def resume_poison_queue(self) -> str | None:
        """``<queue>-poison`` for a job of several queues: where a message of it from its
        type's resume queue is poisoned when its job cannot be read (so neither can the
        queue of its chunk). None for a job of one queue: that is its own poison queue."""
        return None if self.queues == (self.queue,) else layout.poison_queue_of(self.queue)

    @property
    def ended(self) -> bool:
        return self.state in ENDED_JOB_STATES

    @property
    def stop_order(self) -> Literal["cancelled", "paused"] | None:
        """Its stop order: why none of its tasks may start (or go on), or None. Job
        control (``runner cancel`` / ``pause``, a deletion begun) writes it; a paused
        job with ``drain`` lets its running chunks finish."""
        if self.cancelled_on is not None or self.deleting_on is not None:
            return "cancelled"
        if self.paused_on is not None and not self.ended:
            return "paused"
        return None

    @classmethod
    def from_record(cls, record: Record) -> JobRecord:
        """The job a stored record holds. Raises BadRecord naming what is wrong with it."""
        p = Properties(record, record_name(record.row_key, "job"))
        return cls(
            job_id=record.row_key,
            job_type=p.text("job_type", required=True),
            queue=p.text("queue", required=True),
            state=p.one_of("state", JOB_STATES),
            total=p.count("total"),
            created_on=p.time("created_on"),
            updated_on=p.time("updated_on"),
            error=p.text("error") or None,
            etag=record.etag,
            properties=p.properties,
            cancelled_on=p.time("cancelled_on"),
            cancel_reason=p.text("cancel_reason") or None,
            # A merge cannot remove a property: resuming clears the flag, not the time.
            paused_on=p.time("paused_on") if p.flag("paused") else None,
            drain=p.flag("drain"),
            incarnation=p.text("incarnation") or None,
            deleting_on=p.time("deleting_on"),
            priority=p.integer("priority"),
            queue_count=_queue_count(p),
            after=_job_ids(p, AFTER),
            pipeline=p.text(PIPELINE) or None,
            delay_seconds=p.integer(DELAY_SECONDS),
            dependents_started=p.flag(DEPENDENTS_STARTED),
            redriving=p.flag(REDRIVING),
        )


@dataclass(frozen=True)
class TaskRecord:
    """Planning, a chunk or finalize: who holds it, how far it got, how it ended."""

    job_id: str
    kind: TaskKind
    index: int
    state: TaskState
    attempt: int
    owner: str | None
    message_id: str | None
    lease_until: datetime | None
    error: dict[str, str] | None
    updated_on: datetime | None
    etag: str
    properties: dict[str, PropertyValue]
    #: The incarnation of the job it was recorded for (None: recorded before them).
    incarnation: str | None = None

    @property
    def name(self) -> str:
        return record_name(self.job_id, self.kind, self.index)

    @classmethod
    def from_record(cls, job_id: str, kind: TaskKind, index: int, record: Record) -> TaskRecord:
        """The task a stored record holds. Raises BadRecord naming what is wrong with it."""
        p = Properties(record, record_name(job_id, kind, index))
        error = None
        if p.text("error_type"):
            error = {
                "type": p.text("error_type"),
                "message": p.text("error_message"),
                "traceback": p.text("error_traceback"),
            }
        return cls(
            job_id=job_id,
            kind=kind,
            index=index,
            state=p.one_of("state", TASK_STATES),
            attempt=p.count("attempt", required=True),
            owner=p.text("owner") or None,
            message_id=p.text("message_id") or None,
            lease_until=p.time("lease_until"),
            error=error,
            updated_on=p.time("updated_on"),
            etag=record.etag,
            properties=p.properties,
            incarnation=p.text("incarnation") or None,
        )

    @classmethod
    def as_found(cls, job_id: str, kind: TaskKind, index: int, record: Record) -> TaskRecord:
        """A task record too garbled for :meth:`from_record`, as something to write over:
        only its ETag and raw properties are real (a write conditional on that ETag
        succeeds only if nobody changed it since); state and attempt are stand-ins."""
        return cls(
            job_id=job_id,
            kind=kind,
            index=index,
            state="waiting",
            attempt=0,
            owner=None,
            message_id=None,
            lease_until=None,
            error=None,
            updated_on=None,
            etag=record.etag,
            properties=dict(record.properties),
        )

    @property
    def has_progress(self) -> bool:
        return bool(self.properties.get("progress") or self.properties.get("progress_blob"))


#: Task record properties beside the state (``progress``): how far the chunk said it got
#: with that state (a fraction 0-1, and ``"done/total"`` when given as a count, else
#: ``""``), and when a state was last written (``updated_on`` changes at every write).
PROGRESS_FRACTION = "progress_fraction"
#: The outputs a chunk's attempts published (``chunk.publish``): a msgpack map of name to
#: record, spilled to blob like the state when large; replaced whole at each publication.
OUTPUTS = "outputs"
#: The Spark Connect session the chunk's current attempt runs its Spark work in (JSON
#: text), written with the claim or by the attempt's first Spark work; "" for none.
SPARK_SESSION = "spark_session"
#: True while a running finalize is leased by its record's ``lease_until`` alone: its
#: queue message's pop receipt was lost to its own renewal, applied with its answer
#: lost, so the message can no longer be renewed. A delivery of that message meanwhile
#: hides it again instead of taking the task over. Cleared by the next claim.
LEASE_ON_RECORD = "lease_on_record"
PROGRESS_OF = "progress_of"
CHECKPOINT_ON = "checkpoint_on"


@dataclass(frozen=True)
class Progress:
    """How far a chunk says it got (``chunk.checkpoint(state, progress=...)``): a fraction
    from 0 to 1, and the count it was given as, if it was."""

    fraction: float
    done: int | float | None = None
    total: int | float | None = None

    def properties(self) -> dict[str, PropertyValue]:
        """The task record properties holding it."""
        of = "" if self.total is None else f"{self.done!r}/{self.total!r}"
        return {PROGRESS_FRACTION: float(self.fraction), PROGRESS_OF: of}

    @classmethod
    def from_properties(cls, properties: dict[str, PropertyValue], name: str) -> Progress | None:
        """The progress a task record holds, or None if it holds none. Raises BadRecord
        naming ``name`` (the record) if what is there is not what we write."""
        fraction, of = properties.get(PROGRESS_FRACTION), properties.get(PROGRESS_OF)
        if fraction is None:
            return None
        if not checks.is_number(fraction) or not 0 <= fraction <= 1:
            raise BadRecord(f"{name}: {PROGRESS_FRACTION} {_shown(fraction)} is not 0-1")
        if not of:
            return cls(float(fraction))
        try:
            done, total = (_number_text(part) for part in str(of).split("/"))
        except ValueError:
            raise BadRecord(f"{name}: {PROGRESS_OF} {_shown(of)} is not done/total") from None
        return cls(float(fraction), done, total)

    def __str__(self) -> str:
        share = f"{self.fraction:.0%}"
        if self.total is None:
            return share
        return f"{share} ({_count_text(self.done)}/{_count_text(self.total)})"


def _number_text(text: str) -> int | float:
    return int(text) if text.lstrip("-").isdigit() else float(text)


def _count_text(value: int | float | None) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


def record_name(job_id: str, kind: str, index: int = 0) -> str:
    """How messages name a record: ``job 'x'``, ``chunk 7 of job 'x'``, ``plan of job 'x'``."""
    if kind == "job":
        return f"job {job_id!r}"
    if kind == "chunk":
        return f"chunk {index} of job {job_id!r}"
    return f"{kind} of job {job_id!r}"


class Properties:
    """Reads a record's properties, checking each is what we write there.

    Records come from storage that other versions and people can edit (a storage
    explorer, a script), so nothing is taken on trust: a property of the wrong type
    raises BadRecord naming the record, the property and the value found.
    """

    def __init__(self, record: Record, name: str):
        """Raises BadRecord if the backend could not decode the record at all."""
        if record.unreadable is not None:
            raise BadRecord(f"{name}: {record.unreadable}")
        self.properties = dict(record.properties)
        self._name = name

    def bad(self, problem: str) -> BadRecord:
        return BadRecord(f"{self._name}: {problem}")

    def _get(self, field: str, required: bool) -> Any:
        value = self.properties.get(field)
        if value is None and required:
            raise self.bad(f"{field} is missing")
        return value

    def text(self, field: str, required: bool = False) -> str:
        value = self._get(field, required)
        if value is None:
            return ""
        if not isinstance(value, str) or (required and not value):
            raise self.bad(f"{field} {_shown(value)} is not a text")
        return value

    def one_of(self, field: str, known: tuple[_Known, ...]) -> _Known:
        """The field's value, parsed as one of ``known`` (and so typed as one of them)."""
        value = self._get(field, required=True)
        if isinstance(value, str):
            for candidate in known:
                if value == candidate:
                    return candidate
        raise self.bad(f"{field} {_shown(value)} is not one of {', '.join(known)}")

    def count(self, field: str, required: bool = False) -> Any:
        value = self._get(field, required)
        # A whole-number double passes: Azure reads back an Int32 set by hand (a storage
        # explorer's default) as a double, and 3.0 attempts mean 3.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is None or (_is_whole(value) and value >= 0):
            return value
        raise self.bad(f"{field} {_shown(value)} is not a whole number >= 0")

    def integer(self, field: str) -> int:
        """A whole number of either sign; 0 if absent."""
        value = self._get(field, required=False)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # as for count: Azure may read an Int32 back as a double
        if value is None or _is_whole(value):
            return int(value or 0)
        raise self.bad(f"{field} {_shown(value)} is not a whole number")

    def flag(self, field: str) -> bool:
        value = self._get(field, required=False)
        if value is None or isinstance(value, bool):
            return bool(value)
        raise self.bad(f"{field} {_shown(value)} is not true or false")

    def time(self, field: str) -> datetime | None:
        value = self._get(field, required=False)
        if value is None or (isinstance(value, datetime) and value.tzinfo is not None):
            return value
        raise self.bad(f"{field} {_shown(value)} is not a UTC date and time")


def _is_whole(value: object) -> TypeGuard[int]:
    """:func:`checkpoint.checks.is_whole`, with a stored int (every count read) decided
    here: a record is read field by field, and each field should not be a call into
    another module."""
    return type(value) is int or checks.is_whole(value)


def _job_ids(p: Properties, field: str) -> tuple[str, ...]:
    """Job ids kept as one text of ids joined by commas (a job id holds none)."""
    text = p.text(field)
    if not text:
        return ()
    ids = tuple(text.split(","))
    for job_id in ids:
        if not layout.is_job_id(job_id):
            raise p.bad(f"{field} {_shown(text)} names no job ids")
    return ids


def _queue_count(p: Properties) -> int:
    """A job's queue count: recorded only when it is not 1 (older records have none)."""
    count = p.count("queues")
    if count is None:
        return 1
    if not 1 <= count <= layout.MAX_QUEUES:
        raise p.bad(f"queues {count} is not between 1 and {layout.MAX_QUEUES}")
    return int(count)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def error_properties(error: BaseException | None, traceback_text: str = "") -> dict[str, Any]:
    """The error fields of a task record; empty strings clear them (merge keeps None)."""
    if error is None:
        return {"error_type": "", "error_message": "", "error_traceback": ""}
    return {
        "error_type": type(error).__name__,
        "error_message": str(error)[:MAX_ERROR_CHARS],
        "error_traceback": traceback_text[-MAX_ERROR_CHARS:],
    }
