"""Moving a message to the poison queue of the queue it came from (``<queue>-poison``,
``<queue>-2-poison``), with the reason beside the original body. A message from a job
type's resume queue goes to the poison queue of its own queue (its chunk's), where
``runner poison list`` and ``redrive`` look."""

from __future__ import annotations

import logging

from checkpoint import messages, retries
from checkpoint.clock import Clock
from checkpoint.errors import StorageError
from checkpoint.layout import home_queue_of, poison_queue_of
from checkpoint.storage import NEVER_EXPIRES, QueueStore
from runner.worker.leases.lease import Lease, LeaseKeeper

log = logging.getLogger(__name__)


class PoisonRouter:
    """Copies a leased message to its poison queue, then deletes the original.

    Copy first: a crash in between leaves the message in both queues (the original is
    then poisoned again, harmlessly), never in neither.
    """

    def __init__(self, queues: QueueStore, keeper: LeaseKeeper, clock: Clock):
        self._queues = queues
        self._keeper = keeper
        self._clock = clock
        self._created: set[str] = set()

    def move(self, lease: Lease, body: bytes, reason: str, home: str | None = None) -> None:
        """``home``: the queue the message belongs to, where ``runner poison redrive``
        sends it back (a chunk's message from a resume queue: its chunk's queue, see
        :attr:`~runner.worker.tasks.delivery.Delivery.home_queue`); None: the queue it came
        from, or a resume queue's job queue (a message whose job could not be read)."""
        home = home or home_queue_of(lease.queue)
        poison_queue = poison_queue_of(home)
        budget = lease.budget(retries.MESSAGE, self._clock)
        record = messages.poisoned(body, home, reason, self._clock.now().isoformat())
        try:
            if poison_queue not in self._created:
                budget.call(lambda: self._queues.create_queue(poison_queue))
                self._created.add(poison_queue)
            # A send applied with its answer lost and sent again leaves two copies in the
            # poison queue: harmless, both say the same.
            budget.call(lambda: self._queues.send(poison_queue, record, ttl_seconds=NEVER_EXPIRES))
        except StorageError as error:
            # Left where it is: it comes back when the lease runs out, and is moved then.
            log.warning(
                "moving message %s to %s failed: %s; it comes back when its lease runs out",
                lease.message_id,
                poison_queue,
                error,
            )
            self._keeper.drop(lease)
            return
        if not self._keeper.delete(lease):
            log.warning(
                "message %s copied to %s but not deleted; it comes back to be deleted unrun",
                lease.message_id,
                poison_queue,
            )
