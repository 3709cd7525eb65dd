"""Which queues a worker polls, and in which order.

A worker serves the queues of its job types: each class's ``chunk_queues()`` (and its
intake queue, ``<queue>-intake``, for a class with ``intake = True``), and the queues
recorded by its job types' unfinished jobs when they differ (a job submitted when its
class had another ``queues`` count keeps the queues it was submitted to).
Each job type's resume queue (one however many queues it has) is asked before them
(:func:`runner.worker.tasks.resume.queues_to_poll`) and takes no part in the turns below.

The poll is fair: a job type's queues take turns (one :class:`Rotation` per type; the
types take turns of their own, :mod:`runner.worker.receiving.type_turns`), a turn being up to
:data:`TURN_RECEIVES` receives from one queue while it answers in full, and at most
:data:`TURN_MESSAGES` messages; so with messages in every queue none waits more than
one turn of each other queue of its type. Why
two receives: a worker of quick chunks refills by half its capacity (16 of the default
32), so a turn of two is a block of consecutive chunks
(:data:`checkpoint.layout.QUEUE_BLOCK`), whose done marks fall into one shard and take
one batch, as with one queue; turns of one receive would mix two queues' blocks in the
finisher's batches. A worker of slow chunks takes a message or two a receive (its done
marks are one chunk a batch anyway), so other queues wait two receives at most. An
empty queue costs little: after an empty answer it rests,
its rest doubling from :data:`FIRST_REST_SECONDS` up to the worker's longest idle wait,
but only while other queues (of any type) keep the worker busy. A poll that received
nothing asks every queue, rested or not, so an idle worker notices new work as fast as
before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from checkpoint import layout
from checkpoint.clock import Clock
from checkpoint.records import JobRecord
from jobs.job import ChunkedJob

#: An empty queue's first rest; each empty answer in a row doubles it.
FIRST_REST_SECONDS = 0.02
#: Receives one queue's turn may take, while it answers in full ...
TURN_RECEIVES = 2
#: ... and the messages it may give, before the next queue's turn.
TURN_MESSAGES = layout.QUEUE_BLOCK


def served_queues(
    classes: Sequence[type[ChunkedJob]], jobs: Iterable[JobRecord]
) -> dict[str, type[ChunkedJob]]:
    """Every queue a worker of ``classes`` polls, with the class its messages are for:
    each class's resume queue and queues, then those its unfinished ``jobs`` were
    submitted to."""
    served = {queue: cls for cls in classes for queue in own_queues(cls)}
    by_type = {cls.job_type(): cls for cls in classes}
    for job in jobs:
        cls = by_type.get(job.job_type)
        if cls is not None and not job.ended:
            served.update((queue, cls) for queue in job.queues if queue not in served)
    return served


def own_queues(cls: type[ChunkedJob]) -> tuple[str, ...]:
    """The queues a worker of ``cls`` asks whatever its jobs: its resume queue, its
    queues, and its intake queue if it takes submissions (runner.worker.intake: one
    more queue in its rotation)."""
    intake = (cls.intake_queue(),) if cls.intake else ()
    return (cls.resume_queue(), *cls.chunk_queues(), *intake)


class Rotation:
    """The order one worker asks its queues in (see the module's docstring)."""

    def __init__(self, queues: Sequence[str], clock: Clock, longest_rest_seconds: float):
        self._queues = list(queues)
        self._clock = clock
        self._longest_rest_seconds = longest_rest_seconds
        self._next = 0
        # Receives and messages of the current turn, that of queue _next
        self._turn_receives = self._turn_messages = 0
        self._rest_seconds = dict.fromkeys(self._queues, 0.0)
        self._rests_until = dict.fromkeys(self._queues, 0.0)
        self._received_last_poll = False
        self._received_this_poll = False

    def add(self, queue: str) -> None:
        """Serve ``queue`` too, last in the order."""
        self._queues.append(queue)
        self._rest_seconds[queue] = self._rests_until[queue] = 0.0

    def poll(self, worker_received: bool | None = None) -> list[str]:
        """The queues to ask now, in order: from the one whose turn it is, skipping
        resting queues if the last poll received something: from these queues, or
        ``worker_received`` when given (a worker of several job types has a rotation
        per type, and an idle type's queues rest while the others keep it busy)."""
        self._received_last_poll, self._received_this_poll = self._received_this_poll, False
        if worker_received is None:
            worker_received = self._received_last_poll
        order = self._queues[self._next :] + self._queues[: self._next]
        if not worker_received:
            return order
        now = self._clock.monotonic()
        return [queue for queue in order if self._rests_until[queue] <= now]

    def asked(self, queue: str, received: int, wanted: int) -> None:
        """``queue`` was asked for ``wanted`` messages and gave ``received``."""
        at = self._queues.index(queue)
        if at != self._next:  # its turn began now (the queues before it rest)
            self._turn_receives = self._turn_messages = 0
        self._turn_receives += 1
        self._turn_messages += received
        if (
            received < wanted
            or self._turn_receives >= TURN_RECEIVES
            or self._turn_messages >= TURN_MESSAGES
        ):
            # Its turn is over: it has no more now, or it had its share.
            self._next = (at + 1) % len(self._queues)
            self._turn_receives = self._turn_messages = 0
        else:
            self._next = at  # answered in full: its turn goes on at the next poll
        if received:
            self._received_this_poll = True
            self._rest_seconds[queue] = self._rests_until[queue] = 0.0
            return
        rest = min(
            max(FIRST_REST_SECONDS, 2 * self._rest_seconds[queue]), self._longest_rest_seconds
        )
        self._rest_seconds[queue] = rest
        self._rests_until[queue] = self._clock.monotonic() + rest
