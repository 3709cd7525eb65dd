"""The order of one receive round of the worker loop: per job type, its resume queue
first, then its queues in the fair rotation of :mod:`runner.worker.polling`.

Job types come in the order the rotation reaches their queues, then those whose queues
all rest now: their resume queues are asked all the same, each round, as resumed work
goes first (:mod:`runner.worker.resume`). The loop takes tokens and slots of the shared
limits once per job type and round (:mod:`runner.worker.admission`), for its resume
queue and its queues together.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from checkpoint import layout
from checkpoint.clock import Clock
from checkpoint.errors import StorageError
from checkpoint.storage import QueueMessage, QueueStore
from jobs.job import ChunkedJob
from runner.worker.chunk_times import ChunkTimes
from runner.worker.polling import Rotation
from runner.worker.resume import moves_here, queues_to_poll

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
        self._classes = list(classes)
        self._clock = clock
        self._rotation = Rotation(self.job_queues(), clock, longest_rest_seconds)
        #: When each job type's resume queue was last asked (monotonic), by its queue.
        self._resume_polled_at: dict[str, float] = {}

    def job_queues(self) -> tuple[str, ...]:
        """The job queues served, resume queues left out: those take no turns, and a
        heartbeat names the queues whose jobs' status lists the worker."""
        return tuple(name for name in self._by_queue if not layout.is_resume_queue(name))

    def serve(self, queue: str, cls: type[ChunkedJob]) -> None:
        """Serve job queue ``queue`` of ``cls`` too, last in the rotation."""
        self._by_queue[queue] = cls
        self._rotation.add(queue)

    def next_round(self) -> list[tuple[type[ChunkedJob], list[str]]]:
        """Each job type with its queues to ask this round, in order."""
        order = self._rotation.poll()
        classes = list(dict.fromkeys(self._by_queue[name] for name in order))
        classes += [cls for cls in self._classes if cls not in classes]
        now = self._clock.monotonic()
        return [
            (
                cls,
                queues_to_poll(
                    cls,
                    now,
                    self._resume_polled_at.get(cls.queue),
                    [name for name in order if self._by_queue[name] is cls],
                    moves_here(cls, self._chunk_times),
                ),
            )
            for cls in classes
        ]

    def asked(self, cls: type[ChunkedJob], queue: str, received: int, wanted: int) -> None:
        """``queue`` of ``cls`` was asked for ``wanted`` messages and gave ``received``."""
        if queue == cls.resume_queue():
            self._resume_polled_at[cls.queue] = self._clock.monotonic()
        else:
            self._rotation.asked(queue, received, wanted)


def receive_from(
    queues: QueueStore, clock: Clock, cls: type[ChunkedJob], queue: str, wanted: int
) -> list[Received]:
    """Up to ``wanted`` messages of ``queue``, each with when it was received
    (monotonic, taken before the call: the lease can only have started later)."""
    received_at = clock.monotonic()
    try:
        batch = queues.receive(queue, max_messages=wanted, visibility_seconds=cls.lease_seconds)
    except StorageError as error:
        log.warning("receiving from %s failed: %s", queue, error)
        return []
    return [(queue, message, received_at) for message in batch]
