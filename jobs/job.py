"""``ChunkedJob``: what a user writes — split a job into chunks, process one, finalize."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from checkpoint import checks, layout, service_targets
from checkpoint.layout import MAX_QUEUES, resume_queue_of
from checkpoint.limits import rates
from checkpoint.service_targets import MAX_VISIBILITY_SECONDS
from jobs.backoff import Backoff
from jobs.chunk import Chunk
from jobs.errors import JobDefinitionError
from jobs.summary import JobSummary

#: Chunk messages of one job on its queue at most (``ChunkedJob.feed_window``). Large
#: enough that the feeder runs once per 256 chunks and that workers x slots well below it
#: never wait on it; small enough that a job submitted behind it waits for 256 chunks,
#: not for all of the earlier job's.
DEFAULT_FEED_WINDOW = 256


def kebab_case(name: str) -> str:
    """``MigrateOrders`` -> ``migrate-orders``; ``HTTPImport2`` -> ``http-import2``."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name)
    return re.sub(r"[^a-z0-9]+", "-", words.lower()).strip("-")


class ChunkedJob:
    """Base class of a chunked, resumable job.

    Subclass it, implement :meth:`split` and :meth:`process` (and optionally
    :meth:`finalize`), then ``runner submit`` a job and ``runner start`` workers.

    Class attributes (override in the subclass):
        queue: the Azure queue carrying this job type's chunks; defaults to the class
            name in kebab case (``MigrateOrders`` -> ``migrate-orders``). Poisoned
            messages go to ``<queue>-poison``.
        queues: how many queues a job's chunks are spread over (1-64). With 1 (the
            default) that is ``<queue>`` itself; with 4, ``<queue>-0`` ... ``<queue>-3``,
            each with its own poison queue, for a job past one queue's ~2,000
            messages/s. A job keeps the count it was submitted with.
        lease_seconds: None (the default): the lease is sized by the workers from how
            late their renewals land and the leases they lose, shared by every worker
            of the type, within ``lease_bounds`` (docs/semantics.md §25). A whole number
            of seconds (1-604800) fixes it instead. A received chunk stays invisible to
            other workers for a lease, renewed at ~70% of it while the chunk runs; a
            crashed worker's chunk resumes after at most one lease.
        lease_bounds: the shortest and the longest lease the workers may size
            (seconds, default ``(10, 600)``): 10 s recovers a crashed worker's chunk in
            seconds for a renewal every 7 s; 600 s is the longest a hung chunk can hold
            its message. Raise the lower bound to renew less often (SCALE.md).
        max_attempts: attempts (claims) of a chunk before it is poisoned; a worker
            stopping gracefully, or the runner's own storage trouble, gives its attempt
            back (docs/semantics.md §6).
        checkpoint_interval_seconds: at most one durable checkpoint write per interval;
            after a crash at most this much work is redone.
        max_chunk_seconds: stop renewing a chunk's lease after this long (a hung
            worker cannot hold work forever); None for no cap.
        backoff: wait between failed attempts (:class:`~jobs.backoff.Backoff`).
        tolerated_failures: poisoned chunks the job accepts: a count (``3``) or a
            fraction of its chunks (``0.01``). Past it the job fails at once and its
            remaining chunks are cancelled; within it the job completes and
            ``finalize`` is told which chunks were poisoned. None (the default): every
            chunk runs, and a job with any poisoned chunk fails when all have ended
            (``runner poison redrive`` can still finish it).
        non_retryable: exception types that will not get better by trying again (a
            bad row, a schema mismatch): a chunk raising one is poisoned at once,
            without its other attempts. ``raise ChunkFailed(..., retry=False)`` does
            the same case by case.
        resume_first: a chunk whose lease ran out (its worker died or hung) starts
            before the job queue's fresh chunks. While a chunk runs its message waits in
            ``<queue>-resume``, which workers poll first: a queue send and a delete more
            per attempt, made only for chunks taking 1 s or more on average. False:
            never; a dead worker's chunk then waits behind the queue's fresh chunks.
        rate_limit: chunks started per second by all workers together (``"200/s"``,
            ``"6000/min"``, ``"1/h"``), or None for no limit.
        max_running: chunks running at once on all workers together, or None.
            Both are kept in the shared store under the name of the job's queue, so
            ``runner limit <queue> 100/s`` (or ``--running 20``) changes them while
            the job runs; a value set that way stands until ``--clear``.
        limits: named resources several job types may share, each with its rate
            (``{"orders-db": "50/s"}``); ``chunk.limit("orders-db")`` in ``process``
            waits for one unit of it. See docs/writing-jobs.md.
        feed_window: chunk messages of one job on the queue at most (sent, not yet
            ended): planning records every chunk but sends only the first window, and
            a feed task of the job tops it up as chunks end, so a job submitted later
            is not queued behind all of an earlier one's chunks (docs/semantics.md
            §22). Keep it several times the slots (workers x concurrency + prefetch)
            serving the type, or workers wait for the feeder; >= 1.
        intake: accept jobs submitted by other programs: a JSON message put on
            ``<queue>-intake`` (docs/intake.md) is recorded as a job of this type by
            its workers, and one that cannot be read is moved to
            ``<queue>-intake-rejected`` with the reason. Off by default: a type's
            workers then ask no intake queue at all.
    """

    queue: ClassVar[str] = ""
    queues: ClassVar[int] = 1
    lease_seconds: ClassVar[int | None] = None
    lease_bounds: ClassVar[tuple[int, int]] = (10, 600)
    max_attempts: ClassVar[int] = 5
    checkpoint_interval_seconds: ClassVar[float] = 5.0
    max_chunk_seconds: ClassVar[float | None] = None
    backoff: ClassVar[Backoff] = Backoff()
    tolerated_failures: ClassVar[int | float | None] = None
    non_retryable: ClassVar[tuple[type[BaseException], ...]] = ()
    resume_first: ClassVar[bool] = True
    rate_limit: ClassVar[str | None] = None
    max_running: ClassVar[int | None] = None
    limits: ClassVar[Mapping[str, str]] = {}
    feed_window: ClassVar[int] = DEFAULT_FEED_WINDOW
    intake: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "queue" not in cls.__dict__:
            cls.queue = kebab_case(cls.__name__)
        check_job_class(cls)

    @classmethod
    def job_type(cls) -> str:
        """``module:Class``, the name workers import this class by."""
        return f"{cls.__module__}:{cls.__qualname__}"

    @classmethod
    def chunk_queues(cls) -> tuple[str, ...]:
        """The queues a job of this class is submitted to: ``(queue,)`` with one,
        ``queue-0`` ... with several. Planning and finalize use the first."""
        return layout.job_queues(cls.queue, cls.queues)

    @classmethod
    def chunk_queue(cls, index: int) -> str:
        """The queue chunk ``index`` of a job submitted now goes to (blocks of
        consecutive chunks per queue, :data:`checkpoint.layout.QUEUE_BLOCK`)."""
        return layout.chunk_queue(cls.queue, cls.queues, index)

    @classmethod
    def poison_queues(cls) -> tuple[str, ...]:
        """The poison queue of each of :meth:`chunk_queues`, in the same order."""
        return tuple(layout.poison_queue_of(queue) for queue in cls.chunk_queues())

    @classmethod
    def poison_queue(cls) -> str:
        """The poison queue of the first queue: ``<queue>-poison`` with one queue."""
        return cls.poison_queues()[0]

    @classmethod
    def resume_queue(cls) -> str:
        """Where a running chunk's message waits: ``<queue>-resume``, one for the type
        however many queues it has, polled before them (see :mod:`runner.worker.tasks.resume`)."""
        return resume_queue_of(cls.queue)

    @classmethod
    def intake_queue(cls) -> str:
        """Where other programs put submissions of this type, ``<queue>-intake`` (asked
        by its workers only when ``intake`` is on)."""
        return layout.intake_queue_of(cls.queue)

    @classmethod
    def rejected_queue(cls) -> str:
        """Where submissions that cannot be read are moved: ``<queue>-intake-rejected``."""
        return layout.rejected_queue_of(cls.queue)

    def validate(self, params: Any) -> None:
        """Refuse params this job cannot run on (optional): raise ValueError (or
        :class:`~jobs.errors.InvalidParams`) saying what is wrong.

        ``submit`` (and ``runner submit``) calls it in the submitting process before
        anything is recorded, so wrong params fail there in one line instead of in
        planning on a worker. A TypeError or LookupError (a ``KeyError`` of
        ``params["numbers"]``) refuses them too. The default accepts any params.
        """

    def split(self, params: Any) -> Iterable[Any]:
        """Yield the job's chunk payloads (msgpack-able), lazily.

        Must be deterministic for the same ``params``: planning resumes after a crash by
        running ``split`` again and skipping the payloads already enqueued.
        """
        raise NotImplementedError(f"{type(self).__name__}.split")

    def process(self, chunk: Chunk) -> Any:
        """Do one chunk's work, idempotently, resuming from ``chunk.state``.

        Call ``chunk.checkpoint(state)`` as progress is made. The return value
        (msgpack-able) is kept as the chunk's result and given to :meth:`finalize`.
        """
        raise NotImplementedError(f"{type(self).__name__}.process")

    def finalize(self, params: Any, summary: JobSummary) -> None:
        """Run once after every chunk is done (optional).

        It runs under its own lease and is never run twice at once nor again once it
        has completed; only a worker dying inside it causes a re-run, so make it
        idempotent. Not run when chunks were poisoned (the job ends ``failed``) until
        they are redriven and done.
        """


def check_job_class(cls: type[ChunkedJob]) -> None:
    """Refuse a job class whose settings Azure or the runner cannot honour."""
    name = cls.__qualname__
    checks.whole(
        cls.queues,
        f"{name}.queues",
        lowest=1,
        highest=MAX_QUEUES,
        unit="queues",
        error=JobDefinitionError,
    )
    if not isinstance(cls.intake, bool):
        raise JobDefinitionError(f"{name}.intake must be True or False")
    # The longest name is the last queue's poison queue, '<queue>-<n>-poison', or with
    # an intake '<queue>-intake-rejected'.
    suffix = layout.poison_queue_of(layout.job_queues("", cls.queues)[-1])
    if cls.intake and len(layout.REJECTED_SUFFIX) > len(suffix):
        suffix = layout.REJECTED_SUFFIX
    if not service_targets.is_queue_name(cls.queue) or not service_targets.is_queue_name(
        f"{cls.queue}{suffix}"
    ):
        raise JobDefinitionError(
            f"{name}.queue = {cls.queue!r}: use 3-{63 - len(suffix)} lowercase letters, "
            "digits and single hyphens, starting and ending with a letter or digit (room "
            f"is left for {suffix!r}); set `queue = ...` on the class"
        )
    if cls.lease_seconds is not None:
        checks.whole(
            cls.lease_seconds,
            f"{name}.lease_seconds",
            lowest=1,
            highest=MAX_VISIBILITY_SECONDS,  # the longest Azure can hide a message
            unit="seconds",
            error=JobDefinitionError,
        )
    _check_lease_bounds(cls.lease_bounds, f"{name}.lease_bounds")
    checks.whole(cls.max_attempts, f"{name}.max_attempts", lowest=1, error=JobDefinitionError)
    checks.whole(cls.feed_window, f"{name}.feed_window", lowest=1, error=JobDefinitionError)
    checks.number(
        cls.checkpoint_interval_seconds,
        f"{name}.checkpoint_interval_seconds",
        lowest=0,
        error=JobDefinitionError,
    )
    if cls.max_chunk_seconds is not None:
        checks.number(
            cls.max_chunk_seconds, f"{name}.max_chunk_seconds", above=0, error=JobDefinitionError
        )
    tolerated = cls.tolerated_failures
    if tolerated is not None and not (
        (checks.is_whole(tolerated) and tolerated >= 0)
        or (isinstance(tolerated, float) and 0 < tolerated < 1)
    ):
        raise JobDefinitionError(
            f"{name}.tolerated_failures must be a count >= 0, a fraction between 0 and 1, "
            f"or None, not {tolerated!r}"
        )
    if not isinstance(cls.non_retryable, tuple) or not all(
        isinstance(kind, type) and issubclass(kind, BaseException) for kind in cls.non_retryable
    ):
        raise JobDefinitionError(
            f"{name}.non_retryable must be a tuple of exception types, not {cls.non_retryable!r}"
        )
    if not isinstance(cls.backoff, Backoff):
        raise JobDefinitionError(f"{name}.backoff must be a jobs.Backoff")
    if not isinstance(cls.resume_first, bool):
        raise JobDefinitionError(f"{name}.resume_first must be True or False")
    _check_limits(cls, name)


def _check_lease_bounds(bounds: object, what: str) -> None:
    if not (isinstance(bounds, tuple) and len(bounds) == 2):
        raise JobDefinitionError(f"{what} must be (lowest, highest) seconds, not {bounds!r}")
    low = checks.whole(
        bounds[0], f"{what}[0]", lowest=1, highest=MAX_VISIBILITY_SECONDS, unit="seconds",
        error=JobDefinitionError,
    )  # fmt: skip
    checks.whole(
        bounds[1], f"{what}[1]", lowest=low, highest=MAX_VISIBILITY_SECONDS, unit="seconds",
        error=JobDefinitionError,
    )  # fmt: skip


def _check_limits(cls: type[ChunkedJob], name: str) -> None:
    if cls.rate_limit is not None:
        rates.parse_rate(cls.rate_limit, f"{name}.rate_limit", error=JobDefinitionError)
    if cls.max_running is not None:
        checks.whole(cls.max_running, f"{name}.max_running", lowest=1, error=JobDefinitionError)
    if not isinstance(cls.limits, Mapping):
        raise JobDefinitionError(
            f"{name}.limits must map resource names to rates, like {{'orders-db': '50/s'}}, "
            f"not {cls.limits!r}"
        )
    for resource, rate in cls.limits.items():
        what = f"{name}.limits[{resource!r}]"
        rates.check_limit_name(resource, f"{name}.limits: resource name", JobDefinitionError)
        rates.parse_rate(rate, what, error=JobDefinitionError)
        if resource == cls.queue:
            raise JobDefinitionError(
                f"{what}: the queue's own name holds rate_limit and max_running; "
                "name the resource something else"
            )


def resource_rate(cls: type[ChunkedJob], name: str) -> str:
    """The rate of resource ``name`` in ``cls.limits``, for ``chunk.limit(name)``.

    Raises:
        JobDefinitionError: the class names no such resource (one line, naming those
            it does name).
    """
    rate = cls.limits.get(name) if isinstance(name, str) else None
    if rate is None:
        known = ", ".join(sorted(cls.limits)) or "none"
        raise JobDefinitionError(
            f"chunk.limit({name!r}): {cls.__qualname__}.limits names no such resource "
            f"(it names: {known}); add it, like limits = {{{name!r}: '50/s'}}"
        )
    return rate


#: What a job class must define itself before a job of it can be submitted or served.
REQUIRED_METHODS = ("split", "process")


def check_runnable(cls: type[ChunkedJob]) -> None:
    """Refuse a job class that could only fail at run time: one that leaves ``split`` or
    ``process`` to ChunkedJob, whose versions raise. Checked when a job is submitted and
    when workers start, not when the class is defined: a base class of the user's may
    leave them to its subclasses."""
    missing = [name for name in REQUIRED_METHODS if getattr(cls, name) is getattr(ChunkedJob, name)]
    if missing:
        where = _defined_at(cls)
        raise JobDefinitionError(
            f"{cls.__qualname__}{where} defines no {' and no '.join(f'{m}()' for m in missing)}: "
            "a job class must define split(self, params) and process(self, chunk)"
        )


def _defined_at(cls: type) -> str:
    """`` (file.py line N)``, where the class is written, if Python knows."""
    try:
        _, first = inspect.getsourcelines(cls)
        return f" ({inspect.getsourcefile(cls)} line {first})"
    except (OSError, TypeError):
        return f" (module {cls.__module__})"
