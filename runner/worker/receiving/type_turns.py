"""Fair between job types: the order one worker asks its job types in, each receive round.

A worker of several types (``runner start slow:Slow boom:Boom``) shares its slots
between them. Each round (:mod:`runner.worker.receiving.receive_order`) asks the types in the
order of :func:`type_order`:

- **quiet types first**: those whose queues gave nothing when last asked. Whatever comes
  into a quiet type's queue is most likely a job's first message, its planning, or the
  finalize of a job whose chunks have all ended: short tasks that start or end a job,
  which a free slot takes before another chunk of a busy type. Taken out of turn: the
  type's turn comes next, so a job's first chunks follow its planning at once. A quiet
  type costs an empty receive when asked, and its queues rest between asks while other
  types keep the worker busy (:mod:`runner.worker.receiving.polling`), so at most about one a
  second each; while they all rest it comes last (its resume queue asked only if the
  others leave room, as before);
- **then the busy types in turn**, from the type after the last one that received in
  its turn: a turn is one receive, so with every type busy each free slot (or refill)
  goes to the next type, and a job of one type waits at most one receive of each other
  type (and of each quiet one).

A type's own queues keep their turns of up to two receives among themselves
(:class:`runner.worker.receiving.polling.Rotation`), and its resume queue is still asked before
them in each of its turns (:mod:`runner.worker.tasks.resume`). A worker of one type asks it
every round, as before: nothing changes, and no storage request is added.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


def type_order(
    types: Sequence[T], turn: int, quiet: Collection[T], resting: Collection[T] = ()
) -> list[T]:
    """``types`` in the order to ask them this round: the ``quiet`` ones first, then the
    others, each group from the one at index ``turn`` on, wrapping around; those
    ``resting`` (every queue of theirs rests: only their resume queue would be asked)
    last, as a resting queue is not worth a receive while the worker is busy."""
    start = turn % len(types) if types else 0
    rotated = [t for t in [*types[start:], *types[:start]] if t not in resting]
    last = [t for t in types if t in resting]
    return [t for t in rotated if t in quiet] + [t for t in rotated if t not in quiet] + last


class TypeTurns(Generic[T]):
    """Whose turn it is among one worker's job types, and which are quiet."""

    def __init__(self, types: Sequence[T]):
        self._types = list(types)
        self._turn = 0
        #: Types whose queues gave nothing when last asked; at first every type, as
        #: nothing is known of them (their first message may as well be a planning).
        self._quiet = set(self._types)

    def order(self, resting: Collection[T] = ()) -> list[T]:
        """The types to ask this round, in order (:func:`type_order`)."""
        return type_order(self._types, self._turn, self._quiet, resting)

    def quiet(self, job_type: T) -> bool:
        """Whether ``job_type``'s queues gave nothing when last asked."""
        return job_type in self._quiet

    def asked(self, asked: T, received: int) -> None:
        """Type ``asked`` was asked this round (its resume queue and queues) and gave
        ``received`` messages; called in the order the types were asked."""
        if not received:
            self._quiet.add(asked)
            return
        at = self._types.index(asked)
        if asked in self._quiet:
            # Most likely a planning or finalize task, taken out of turn: its turn is
            # next (a job's first chunks follow its planning).
            self._quiet.discard(asked)
            self._turn = at
        else:
            self._turn = at + 1  # the next round starts after it
