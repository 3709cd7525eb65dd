"""How many messages a worker process receives ahead of its free chunk slots.

A prefetched message is leased (renewed while it waits) but nobody works on it, so the
right depth depends on how long chunks take:

- chunks of milliseconds: a receive costs as much as several chunks, so take many at
  once and keep the slots busy between receives: up to 64 ahead, so that a receive of
  the 32 it may return is made while 32 still wait (the loop refills once half the
  buffer is free);
- chunks of seconds or minutes: a message waiting behind a long chunk is work that an
  idle worker elsewhere could be doing, so take none ahead.

:class:`Prefetch` follows the time a slot spends on a chunk (smoothed) and keeps about
:data:`BUFFER_SECONDS` of work waiting. It starts at 0 and at most doubles per timed
chunk, so one quick chunk (one that failed at once, say) cannot make a worker take 32
long ones; it drops as soon as chunks take longer. Planning, finalize and messages
deleted unrun are not timed: they say nothing about the chunks to come. A fixed depth
(``runner start --prefetch N``) turns the adaptation off.

A worker of several job types hands back a quiet type's message that waits in the
buffer too long (:class:`OutOfTurn`): most likely a job's planning, which another
worker can start at once while this one's slots run long.

How long each job type's chunks take here (:class:`ChunkTimes`) decides whether a
claimed chunk's message moves to the resume queue (:mod:`runner.worker.tasks.resume`).
The loop tells all three of a slot's task in one call as it begins and one as it ends
(:class:`Slots`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from checkpoint.storage import QueueMessage
from runner.worker.leases.lease import Lease

log = logging.getLogger(__name__)

#: The most messages taken ahead of the slots: two receives' worth (a receive returns at
#: most 32), so trivial chunks are received 32 at a time, not 16 (0.069 receives per
#: chunk on Azurite with 32 ahead, 0.047 with 64).
MAX_PREFETCH = 64
#: Work kept waiting ahead of the slots, in seconds of slot time: long enough to hide a
#: receive round trip and that chunks of tens of milliseconds (a trivial chunk on Azure:
#: its claim's round trip) are received 16 to 32 at a time, not a receive per few chunks
#: (at 0.2 s, 0.2 receives per chunk on Azurite); short enough that a waiting message
#: starts within a second. Job control is unaffected: a message is checked against its
#: job's state when it starts, not when it is received.
BUFFER_SECONDS = 1.0
#: Weight of the newest timing in the smoothed time per message (and per chunk of a type).
SMOOTHING = 0.2
#: The most messages one receive returns, and so the largest refill the loop waits for.
RECEIVE_BATCH = 32


def adaptive_depth(concurrency: int, seconds_per_message: float | None) -> int:
    """Messages to hold ahead of ``concurrency`` slots that each spend
    ``seconds_per_message`` on a chunk (None: not timed yet, so none)."""
    if seconds_per_message is None:
        return 0
    if seconds_per_message <= 0:
        return MAX_PREFETCH
    # The slots together finish concurrency / seconds messages a second.
    waiting = math.floor(BUFFER_SECONDS * concurrency / seconds_per_message)
    return min(MAX_PREFETCH, waiting)


class Prefetch:
    """The prefetch depth of one worker loop: fixed, or adapting to timed messages.

    Not thread-safe: the loop calls :meth:`observe` and reads :attr:`depth` under its own
    lock.
    """

    def __init__(self, concurrency: int, fixed: int | None = None):
        self._concurrency = concurrency
        self._fixed = fixed
        self._seconds_per_message: float | None = None
        self.depth = fixed if fixed is not None else 0

    @property
    def adaptive(self) -> bool:
        return self._fixed is None

    @property
    def seconds_per_message(self) -> float | None:
        """The smoothed slot time per chunk (None until one was timed)."""
        return self._seconds_per_message

    def observe(self, seconds: float) -> None:
        """A slot spent ``seconds`` on one chunk (from taking its message to handing it
        to the finisher, or to its failure)."""
        if not self.adaptive:
            return
        mean = self._seconds_per_message
        mean = seconds if mean is None else mean + SMOOTHING * (seconds - mean)
        self._seconds_per_message = mean
        # Grow slowly (0, 1, 3, 7 ...), shrink at once.
        self.depth = min(adaptive_depth(self._concurrency, mean), 2 * self.depth + 1)


#: How long a quiet job type's message (taken out of turn: most likely a planning or a
#: finalize) may wait in the buffer behind busy slots before it is handed back for
#: another worker to take: the buffer holds about :data:`BUFFER_SECONDS` of chunks, so a
#: message still waiting after that waits behind a task that runs long (a feed step, a
#: planning).
HAND_BACK_SECONDS = BUFFER_SECONDS


class OutOfTurn:
    """Messages of quiet job types waiting in one worker's prefetch buffer, handed back
    (visible at once) when they wait longer than :data:`HAND_BACK_SECONDS` while every
    slot runs a task begun longer ago than that (a feed step, a planning: not a buffer of
    quick chunks, which moves, and which another worker's buffer would hold as well).

    Only a message on its first delivery is handed back, so none goes back more than
    once however its workers are placed (one delivery more stays far within those an
    attempt allows, and no attempt is charged: the task never started). Once it handed
    one back, the worker takes none of that type while its slots are busy until one of
    them ends its task: what it took would wait behind the same long task.
    Thread-safe: the receive thread hands back, the slots :meth:`take` and
    :meth:`task_ended`.
    """

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency
        #: When each slot (by thread) began its task (monotonic), while it runs one.
        self._started: dict[int, float] = {}
        self._lock = threading.Lock()
        #: Waiting messages by lease: their type, message and when they came.
        self._waiting: dict[Lease, tuple[object, QueueMessage, float]] = {}
        self._handed_back: set[Lease] = set()
        self._resting: set[object] = set()

    def wait(self, job_type: object, message: QueueMessage, lease: Lease, now: float) -> None:
        """A message of quiet ``job_type`` came into the buffer at ``now`` (monotonic)."""
        if message.dequeue_count <= 1:
            with self._lock:
                self._waiting[lease] = (job_type, message, now)

    def take(self, lease: Lease) -> bool:
        """A slot takes the message of ``lease``: False if it was handed back."""
        with self._lock:
            if lease in self._handed_back:
                self._handed_back.discard(lease)
                return False
            self._waiting.pop(lease, None)
            return True

    def task_started(self, now: float) -> None:
        """The calling slot began a task at ``now`` (monotonic)."""
        self._started[threading.get_ident()] = now

    def task_ended(self) -> None:
        """The calling slot ended its task: types that handed back may be taken again."""
        self._started.pop(threading.get_ident(), None)
        if self._resting:
            self._resting.clear()

    def _slots_run_long(self, now: float) -> bool:
        """Whether every slot runs a task begun over :data:`HAND_BACK_SECONDS` ago: a
        message behind them waits for a long task, not for a buffer of quick ones."""
        started = list(self._started.values())
        return len(started) >= self._concurrency and all(
            now - since >= HAND_BACK_SECONDS for since in started
        )

    def resting(self, job_type: object) -> bool:
        """Whether ``job_type`` handed a message back since a slot last ended a task."""
        return job_type in self._resting

    def hand_back(self, now: float, release: Callable[[Lease, QueueMessage], None]) -> float | None:
        """``release`` each message that waited too long; returns the seconds until the
        next waiting one is due (None: none waits)."""
        with self._lock:
            due = [
                (lease, job_type, message)
                for lease, (job_type, message, since) in self._waiting.items()
                if now - since >= HAND_BACK_SECONDS and self._slots_run_long(now)
            ]
            for lease, job_type, _ in due:
                del self._waiting[lease]
                self._handed_back.add(lease)
                self._resting.add(job_type)
            first = min((since for _, _, since in self._waiting.values()), default=None)
        for lease, _, message in due:
            log.debug("handing back message %s: it waited behind busy slots", message.id)
            release(lease, message)
        return None if first is None else max(0.0, first + HAND_BACK_SECONDS - now)


class ChunkTimes:
    """Each job type's smoothed seconds per chunk on this worker: whether a claimed
    chunk's message moves to the resume queue (:func:`runner.worker.tasks.resume.moves_here`).
    Thread-safe: chunk slots report."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def observe(self, job_type: str, seconds: float) -> None:
        """A chunk of ``job_type`` ran for ``seconds`` (whatever its outcome)."""
        with self._lock:
            last = self._seconds.get(job_type)
            self._seconds[job_type] = (
                seconds if last is None else last + SMOOTHING * (seconds - last)
            )

    def seconds(self, job_type: str) -> float | None:
        """The smoothed time, or None before the first chunk of the type ended here."""
        with self._lock:
            return self._seconds.get(job_type)


class Slots:
    """What one worker loop keeps of its chunk slots' tasks: the prefetch depth, each
    type's chunk times and the messages taken out of turn, told in one call as a slot
    begins a task (:meth:`begin`) and one as it ends it (:meth:`end`)."""

    def __init__(
        self, concurrency: int, fixed: int | None = None, chunk_times: ChunkTimes | None = None
    ):
        self.concurrency = concurrency
        self.prefetch = Prefetch(concurrency, fixed)
        self.out_of_turn = OutOfTurn(concurrency)
        self.chunk_times = chunk_times or ChunkTimes()

    def capacity(self) -> int:
        """Messages the process may hold: one per slot and the prefetch depth."""
        return self.concurrency + self.prefetch.depth

    def should_receive(self, outstanding: int) -> bool:
        """Whether to receive now, with ``outstanding`` messages held (running or waiting)."""
        # Refill in batches while every slot still has work: one receive of many costs
        # far less than many of one. Waking the receive thread for each finished chunk
        # would also cost the chunk threads the GIL for a switch interval each time.
        capacity = self.capacity()
        refill_batch = max(1, min(RECEIVE_BATCH, capacity // 2))
        return capacity - outstanding >= refill_batch or outstanding < self.concurrency

    def begin(self, lease: Lease, now: float) -> bool:
        """The calling slot takes the message of ``lease`` at ``now`` (monotonic): False
        if it was handed back while it waited (:meth:`OutOfTurn.hand_back`)."""
        if not self.out_of_turn.take(lease):
            return False
        self.out_of_turn.task_started(now)
        return True

    def end(
        self, job_type: str, chunk_seconds: float | None, slot_seconds: float, outstanding: int
    ) -> bool:
        """The calling slot ended its task, which ran a chunk of ``job_type`` for
        ``chunk_seconds`` (None: not a chunk) in ``slot_seconds`` from taking its message;
        ``outstanding`` messages are held now. Returns :meth:`should_receive`.

        Not thread-safe for the prefetch depth: the loop calls it under its own lock."""
        self.out_of_turn.task_ended()
        if chunk_seconds is not None:
            self.chunk_times.observe(job_type, chunk_seconds)
            self.prefetch.observe(slot_seconds)
        return self.should_receive(outstanding)
