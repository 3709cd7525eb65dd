"""Fair between job types (runner/worker/receiving/type_turns.py): a worker serving several types
shares its slots between them, a quiet type's new work (a planning or finalize task)
first, then the busy types in turn; the decision itself, and the worker loop's receive
rounds on both backends."""

from __future__ import annotations

import queue
import uuid
from typing import Any

import pytest

from checkpoint import layout, messages
from checkpoint.clock import FakeClock
from checkpoint.records import TaskKind
from checkpoint.storage import NEVER_EXPIRES, Storage
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from runner.worker.loop import WorkerLoop, WorkerSettings
from runner.worker.receiving import prefetch
from runner.worker.receiving.polling import served_queues
from runner.worker.receiving.receive_order import ReceiveOrder
from runner.worker.receiving.type_turns import TypeTurns, type_order
from tests.backends import Backend

#: How long each chunk of the tests' worker takes (the FakeClock moves this much a
#: round): long enough that every empty queue's rest is over at each round.
CHUNK_SECONDS = 10.0


def test_quiet_types_come_first_then_the_others_from_the_one_whose_turn_it_is():
    types = ["a", "b", "c", "d"]
    assert type_order(types, 0, set()) == ["a", "b", "c", "d"]
    assert type_order(types, 2, set()) == ["c", "d", "a", "b"]
    assert type_order(types, 5, set()) == ["b", "c", "d", "a"]  # wraps around
    assert type_order(types, 2, {"a", "d"}) == ["d", "a", "c", "b"]
    assert type_order([], 3, set()) == []
    # and those whose queues all rest last, quiet or not, in their own order
    assert type_order(types, 2, {"a", "d"}, resting={"d", "b"}) == ["a", "c", "b", "d"]


def test_types_take_turns_and_a_quiet_types_new_work_comes_first_out_of_turn():
    # Given three types, none asked yet: all quiet, in their order
    turns = TypeTurns(["a", "b", "c"])
    assert turns.order() == ["a", "b", "c"]

    # When each gave messages, in that order, and each again in its turn
    for busy in ("a", "b", "c", "b", "c"):
        turns.asked(busy, 16)

    # Then a quiet type's receive was out of turn, its turn next (b, b; c, c), and a
    # receive in its turn passes the turn to the type after it
    assert turns.order() == ["a", "b", "c"]
    turns.asked("a", 16)
    assert turns.order() == ["b", "c", "a"]

    # When b then gives nothing, Then it is quiet: first, before the turn's own order
    turns.asked("b", 0)
    assert turns.order() == ["b", "c", "a"]
    turns.asked("c", 16)
    assert turns.order() == ["b", "a", "c"]
    # and when it gives messages again (a planning, most likely), its turn is next
    turns.asked("b", 1)
    assert turns.order() == ["b", "c", "a"]


class Served(ChunkedJob):
    """A job type served by the worker under test; each test makes its own, on queues
    of their own."""

    queue = "type-turns"

    def split(self, params: Any) -> Any:
        return []

    def process(self, chunk: Chunk) -> Any:
        return None


def _served(name: str) -> type[ChunkedJob]:
    """A type of its own, on a fresh queue."""
    queue_name = f"{name}-{uuid.uuid4().hex[:10]}"
    return type(name.title(), (Served,), {"queue": queue_name, "__module__": __name__})


def _job_type(backend: Backend, name: str) -> type[ChunkedJob]:
    """:func:`_served`, its queues deleted after the test (Azurite's outlive it)."""
    cls = _served(name)
    backend.made += [
        ("queue", cls.queue),
        ("queue", layout.poison_queue_of(cls.queue)),
        ("queue", layout.resume_queue_of(cls.queue)),
    ]
    return cls


def _worker(storage: Storage, classes: list[type[ChunkedJob]]) -> tuple[WorkerLoop, FakeClock]:
    """A worker of one slot taking nothing ahead (chunks of seconds), on its own clock."""
    clock = FakeClock()
    loop = WorkerLoop(storage, classes, WorkerSettings(concurrency=1, prefetch=0), clock=clock)
    loop._prepare()
    return loop, clock


def _send(storage: Storage, cls: type[ChunkedJob], kind: TaskKind, count: int) -> None:
    body = messages.encode(messages.TaskMessage(kind, cls.job_type(), "job", 0))
    storage.queues.send_many(cls.queue, [body] * count, ttl_seconds=NEVER_EXPIRES)


def _round(loop: WorkerLoop, clock: FakeClock, free: int = 1) -> list[str]:
    """One receive round with ``free`` slots, then a chunk's time: the queues of the
    messages it took, in order."""
    loop._receive(free)
    taken = []
    while True:
        try:
            item = loop._work.get_nowait()
        except queue.Empty:
            break
        assert item is not None
        taken.append(item[0])
    clock.advance(CHUNK_SECONDS)
    return taken


@pytest.mark.parametrize("rounds_before", [1, 2, 3])
def test_a_second_types_planning_takes_the_next_free_slot_then_they_take_turns(
    backend: Backend, rounds_before: int
):
    # Given a worker of one slot serving two types, the first with 26 chunks waiting,
    # having taken some of them
    slow, boom = _job_type(backend, "slow"), _job_type(backend, "boom")
    loop, clock = _worker(backend.storage, [slow, boom])
    _send(backend.storage, slow, "chunk", 26)
    for _ in range(rounds_before):
        assert _round(loop, clock) == [slow.queue]

    # When a job of the second type is submitted: its planning message
    _send(backend.storage, boom, "plan", 1)

    # Then the next free slot takes it, whatever the first type's turn was
    assert _round(loop, clock) == [boom.queue]

    # and once it has planned its chunks, the next takes its first chunk, and then the
    # slots alternate between the two types
    _send(backend.storage, boom, "chunk", 10)
    taken = [queue_name for _ in range(6) for queue_name in _round(loop, clock)]
    assert taken == [boom.queue, slow.queue] * 3


def test_quick_chunks_of_two_busy_types_share_the_receives_in_turn(backend: Backend):
    # Given two types with 96 messages each and a worker refilling 16 at a time
    first, second = _job_type(backend, "first"), _job_type(backend, "second")
    loop, clock = _worker(backend.storage, [first, second])
    _send(backend.storage, first, "chunk", 96)
    _send(backend.storage, second, "chunk", 96)

    # When it receives eight times
    rounds = [_round(loop, clock, free=16) for _ in range(8)]

    # Then each round's 16 came from one type: at first each type's, as each was quiet
    # (nothing known of it yet) and its turn next, then the types in turn
    assert rounds[:3] == [[first.queue] * 16, [second.queue] * 16, [second.queue] * 16]
    assert rounds[3:] == [[first.queue] * 16, [second.queue] * 16] * 2 + [[first.queue] * 16]


def test_an_idle_types_queue_rests_while_another_type_keeps_the_worker_busy():
    # Given a worker of a busy type and an idle one, a round every 0.1 s for 10 s
    busy, idle = _served("busy"), _served("idle")
    clock = FakeClock()
    order = ReceiveOrder(served_queues([busy, idle], ()), [busy, idle], clock, 1.0)
    asked: list[str] = []

    # When each round asks each type's queues until the busy one fills it
    for _ in range(100):
        for cls, queues in order.next_round():
            got = 16 if cls is busy else 0
            for name in queues:
                order.asked(cls, name, got if name == cls.queue else 0, 16)
                asked.append(name)
            if got:
                break
        clock.advance(0.1)

    # Then the busy queue was asked every round, the idle one only when its rest was
    # over (as for one type's queues, tests/runner/worker/receiving/test_polling.py): 15 times in
    # 10 s, not 100, first in those rounds (from the second: all were quiet at first,
    # the busy type came first and filled it), its resume queue with it; while it
    # rests, it comes after the busy type, which leaves no room
    assert asked.count(busy.queue) == 100
    assert asked.count(idle.queue) == asked.count(idle.resume_queue()) == 15
    assert asked[2:6] == [idle.resume_queue(), idle.queue, busy.resume_queue(), busy.queue]
    # (rounds at 0 s: 2 asks, at 0.1-0.4 s: 4 each; at 0.5 s it rests, at 0.6 s not)
    assert asked[18:22] == [busy.resume_queue(), busy.queue, idle.resume_queue(), idle.queue]


def _take(loop: WorkerLoop) -> tuple[str, bool]:
    """A slot (this thread) takes the next message from the worker's buffer and starts
    it, by hand: its queue, and whether it runs it (False: it was handed back)."""
    item = loop._work.get_nowait()
    assert item is not None
    runs = loop._out_of_turn.take(item[3])
    if runs:
        loop._out_of_turn.task_started(loop.clock.monotonic())
    return item[0], runs


def _two_types(
    backend: Backend,
) -> tuple[WorkerLoop, FakeClock, type[ChunkedJob], type[ChunkedJob]]:
    """A worker of one slot taking one message ahead, serving two types; its slot runs
    a task of the first, and the second's planning came into its buffer (its type quiet:
    asked first)."""
    slow, boom = _job_type(backend, "slow"), _job_type(backend, "boom")
    clock = FakeClock()
    loop = WorkerLoop(
        backend.storage, [slow, boom], WorkerSettings(concurrency=1, prefetch=1), clock=clock
    )
    loop._prepare()
    _send(backend.storage, slow, "chunk", 1)
    assert loop._receive(2) == 1
    assert _take(loop) == (slow.queue, True)
    _send(backend.storage, boom, "plan", 1)
    clock.advance(0.1)  # its queue's rest after the empty answer is over
    assert loop._receive(1) == 1
    return loop, clock, slow, boom


def test_a_quiet_types_planning_taken_ahead_is_handed_back_while_the_slot_runs_long(
    backend: Backend,
):
    # Given a worker whose one slot runs a long task of the first type (a feed step,
    # say) and whose buffer took the second type's planning
    loop, clock, slow, boom = _two_types(backend)

    # Then it waits there no longer than the bound: handed back, visible at once to any
    # other worker, no attempt charged
    clock.advance(prefetch.HAND_BACK_SECONDS / 2)
    loop._hand_back()
    assert backend.storage.queues.peek(boom.queue) == []  # still held
    clock.advance(prefetch.HAND_BACK_SECONDS / 2)
    loop._hand_back()
    back = backend.storage.queues.peek(boom.queue)
    assert len(back) == 1 and messages.decode(back[0].body).kind == "plan"
    assert loop._outstanding == 1  # the slot's task alone
    # and the slot, free again, skips what was handed back
    loop._work.put(None)  # (then it stops)
    loop._slot()  # would have run it, and counted it out again
    assert loop._outstanding == 1

    # and this worker takes none of that type again while its slot runs that long task
    # (it would wait behind it); once a slot ends its task it does, and keeps it
    _send(backend.storage, slow, "chunk", 1)
    clock.advance(10.0)
    assert loop._receive(1) == 1
    assert _take(loop) == (slow.queue, True)
    loop._out_of_turn.task_ended()
    assert loop._receive(1) == 1
    clock.advance(2 * prefetch.HAND_BACK_SECONDS)
    loop._hand_back()
    assert _take(loop) == (boom.queue, True)


def test_a_planning_behind_quick_tasks_stays(backend: Backend):
    # Given the second type's planning in the buffer of a worker whose slot runs tasks
    loop, clock, _, boom = _two_types(backend)

    # When it waits long, but behind tasks that each took less than the bound
    for _ in range(4):
        clock.advance(prefetch.HAND_BACK_SECONDS / 2)
        loop._out_of_turn.task_ended()
        loop._out_of_turn.task_started(clock.monotonic())
        loop._hand_back()

    # Then it stays: a buffer that moves is no reason (another worker's would be alike)
    assert backend.storage.queues.peek(boom.queue) == []
    assert loop._outstanding == 2


def test_a_worker_of_one_type_hands_back_nothing(backend: Backend):
    # Given a worker of one type whose buffer holds a message behind a long task
    only = _job_type(backend, "only")
    clock = FakeClock()
    loop = WorkerLoop(
        backend.storage, [only], WorkerSettings(concurrency=1, prefetch=1), clock=clock
    )
    loop._prepare()
    _send(backend.storage, only, "plan", 2)
    assert loop._receive(2) == 2
    _take(loop)

    # When it waits long, Then it stays (no request added to the one-type path)
    clock.advance(10 * prefetch.HAND_BACK_SECONDS)
    loop._hand_back()
    assert loop._outstanding == 2
    assert _take(loop) == (only.queue, True)
