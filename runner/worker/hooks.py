"""The named points of a message's life where cross-cutting concerns hook in.

A concern (metrics, job control, ...) is one module with one :class:`Hooks` subclass that
overrides the points it acts at; every other point is a no-op. The worker loop hands the
concerns it runs to a :class:`HookChain`, which the path of a message
(:mod:`runner.worker.tasks.life`) and the outcomes (:mod:`runner.worker.tasks.outcome`) call at each
point. A new concern is a new module and one line in the loop's assembly, not edits along
the path (dramatiq's ``Middleware`` is the model).

The points, in the order a message meets them (docs/architecture.md, "A message's life"):

- :meth:`Hooks.started`: the task is claimed and its attempt is about to run here.
- :meth:`Hooks.checkpointed`: a checkpoint write was made (or failed for the store's
  trouble) while it runs.
- One ending: :meth:`Hooks.succeeded` (marked done; a chunk's by the finisher),
  :meth:`Hooks.failed` (to be retried after its backoff), :meth:`Hooks.handed_back`
  (given back unfailed) or :meth:`Hooks.poisoned` (also for a task poisoned before it
  ran).
- :meth:`Hooks.left`: the attempt no longer runs here, however it ended.

Hooks observe what the engine decided and act beside it; they never decide a message's
fate, and must not raise into the engine's work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from checkpoint.records import JobRecord, TaskKind, TaskRecord

#: The points, in the order a message meets them.
POINTS = ("started", "checkpointed", "succeeded", "failed", "handed_back", "poisoned", "left")


class Running(Protocol):
    """A task's attempt as the hooks see it (:class:`runner.worker.tasks.control.TaskControl`)."""

    @property
    def task(self) -> TaskRecord:
        """The task's record as last written."""
        ...

    def stop_for(self, order: str) -> bool:
        """The task's job wants it stopped (``order``: "deleted", "cancelled" or
        "paused"); True if this is news to the task."""
        ...


class Hooks:
    """A concern: the points of a message's life it acts at, each a no-op here."""

    def started(self, job: JobRecord, running: Running, resumed: bool) -> None:
        """``running`` of ``job`` was claimed and runs here from now (``resumed``: from
        the state an earlier attempt left)."""

    def checkpointed(self, job_type: str, seconds: float, written: bool) -> None:
        """A running task's checkpoint write took ``seconds``; ``written`` False: it
        failed for the store's trouble and the next checkpoint tries again."""

    def succeeded(self, job_type: str, kind: TaskKind, seconds: float) -> None:
        """A task was marked done (its attempt ran ``seconds``)."""

    def failed(self, job_type: str, kind: TaskKind) -> None:
        """An attempt failed; the task is retried after its backoff."""

    def handed_back(self, job_type: str, kind: TaskKind) -> None:
        """A task was handed back unfailed, its attempt given back (the worker stopping,
        the job paused or cancelled, the store's trouble)."""

    def poisoned(self, job_type: str, kind: TaskKind) -> None:
        """A task was marked poisoned."""

    def left(self, job: JobRecord, running: Running) -> None:
        """``running`` no longer runs here, however its attempt ended."""


class HookChain(Hooks):
    """The concerns of one worker, called at each point in the order given.

    Only the concerns overriding a point are called at it, bound once here: the path
    pays nothing for the points a worker's concerns ignore."""

    def __init__(self, *concerns: Hooks):
        self.concerns = concerns
        for point in POINTS:
            default = getattr(Hooks, point)
            bound = tuple(
                getattr(concern, point)
                for concern in concerns
                if getattr(type(concern), point) is not default
            )
            if len(bound) == 1:
                setattr(self, point, bound[0])  # straight to the one concern
            elif bound:
                setattr(self, point, _in_order(bound))
            # else the no-op of Hooks stands


def _in_order(bound: tuple[Callable[..., None], ...]) -> Callable[..., None]:
    def call(*args: object) -> None:
        for hook in bound:
            hook(*args)

    return call
