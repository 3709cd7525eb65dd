"""The order of one receive round of the worker loop: the job types in their turns
(:mod:`runner.worker.receiving.type_turns`: quiet types first, then the busy ones in turn), and
per job type its resume queue first, then its queues in their fair rotation
(:mod:`runner.worker.receiving.polling`).

A type whose queues all rest now comes last, and is asked its resume queue all the same
if the round has room left, as resumed work goes first (:mod:`runner.worker.tasks.resume`).
The loop takes tokens and slots of the shared limits once per job type and round
(:mod:`runner.worker.limits.admission`), for its resume queue and its queues together.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from checkpoint import layout
from checkpoint.clock import Clock
from checkpoint.errors import StorageError
from checkpoint.storage import QueueMessage, QueueStore
from jobs.job import ChunkedJob
from runner.worker.receiving.polling import Rotation
from runner.worker.receiving.prefetch import ChunkTimes
from runner.worker.receiving.type_turns import TypeTurns
from runner.worker.tasks.resume import moves_here, queues_to_poll

log = logging.getLogger(__name__)

#: A message received, from which queue, and when (monotonic, taken before the call).
Received = tuple[str, QueueMessage, float]


class ReceiveOrder:
    """Which queues one worker asks in each receive round, and in what order.

    ``by_queue``: every queue served with its job class (resume queues among them); the
    worker's own, which grows as it serves more (:meth:`serve`)."""

    def __init__(
        self,
        by_queue: dict[str, type[ChunkedJob]],
        classes: Sequence[type[ChunkedJob]],
        clock: Clock,
        longest_rest_seconds: float,
        chunk_times: ChunkTimes | None = None,
    ):
        self._by_queue = by_queue
        #: How long each type's chunks take here: whether they move (resume.moves_here).
        self._chunk_times = chunk_times or ChunkTimes()
        self._clock = clock
        self._rotations = {
            cls: Rotation(
                [name for name in self.job_queues() if by_queue[name] is cls],
                clock,
                longest_rest_seconds,
            )
            for cls in classes
        }
        self._turns = TypeTurns(list(classes))
        #: What each type asked in the current round gave, in the order asked.
        self._round: dict[type[ChunkedJob], int] = {}
        #: Whether a job queue (not a resume queue) gave messages this round.
        self._received_this_round = False
        #: When each job type's resume queue was last asked (monotonic), by its queue.
        self._resume_polled_at: dict[str, float] = {}

    def job_queues(self) -> tuple[str, ...]:
        """The job queues served, resume queues left out: those take no turns, and a
        heartbeat names the queues whose jobs' status lists the worker."""
        return tuple(name for name in self._by_queue if not layout.is_resume_queue(name))

    def serve(self, queue: str, cls: type[ChunkedJob]) -> None:
        """Serve job queue ``queue`` of ``cls`` too, last in its rotation."""
        self._by_queue[queue] = cls
        self._rotations[cls].add(queue)

    def next_round(self) -> list[tuple[type[ChunkedJob], list[str]]]:
        """Each job type with its queues to ask this round, in order."""
        # The last round's answers settle whose turn it is and which types are quiet.
        for cls, received in self._round.items():
            self._turns.asked(cls, received)
        self._round = {}
        worker_received, self._received_this_round = self._received_this_round, False
        now = self._clock.monotonic()
        polled = {cls: rotation.poll(worker_received) for cls, rotation in self._rotations.items()}
        resting = [cls for cls, queues in polled.items() if not queues]
        return [
            (
                cls,
                queues_to_poll(
                    cls,
                    now,
                    self._resume_polled_at.get(cls.queue),
                    polled[cls],
                    moves_here(cls, self._chunk_times),
                ),
            )
            for cls in self._turns.order(resting)
        ]

    def out_of_turn(self, cls: type[ChunkedJob]) -> bool:
        """Whether what ``cls`` gives this round is taken out of turn: it was quiet, and a
        worker of several types asked it first (most likely a planning or a finalize)."""
        return len(self._rotations) > 1 and self._turns.quiet(cls)

    def asked(self, cls: type[ChunkedJob], queue: str, received: int, wanted: int) -> None:
        """``queue`` of ``cls`` was asked for ``wanted`` messages and gave ``received``."""
        self._round[cls] = self._round.get(cls, 0) + received
        if queue == cls.resume_queue():
            self._resume_polled_at[cls.queue] = self._clock.monotonic()
        else:
            self._rotations[cls].asked(queue, received, wanted)
            self._received_this_round = self._received_this_round or received > 0


def receive_from(
    queues: QueueStore, clock: Clock, queue: str, wanted: int, lease_seconds: int
) -> list[Received]:
    """Up to ``wanted`` messages of ``queue``, hidden for ``lease_seconds``, each with
    when it was received (monotonic, taken before the call: the lease can only have
    started later)."""
    received_at = clock.monotonic()
    try:
        batch = queues.receive(queue, max_messages=wanted, visibility_seconds=lease_seconds)
    except StorageError as error:
        log.warning("receiving from %s failed: %s", queue, error)
        return []
    return [(queue, message, received_at) for message in batch]
