"""The order a worker polls its queues in (runner/worker/receiving/polling.py): fair when every
queue has messages, cheap when some are empty; and what the loop serves and asks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint import messages
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import ConfigurationError
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from runner.worker import supervisor
from runner.worker.loop import WorkerLoop, WorkerSettings
from runner.worker.receiving.polling import FIRST_REST_SECONDS, Rotation, served_queues

QUEUES = ["q-0", "q-1", "q-2", "q-3"]
LONGEST_REST_SECONDS = 1.0


class Fair(ChunkedJob):
    queue = "fair"
    queues = 4

    def split(self, params: Any) -> Any:
        return []

    def process(self, chunk: Chunk) -> Any:
        return None


class Single(ChunkedJob):
    queue = "single"

    def split(self, params: Any) -> Any:
        return []

    def process(self, chunk: Chunk) -> Any:
        return None


def _poll(rotation: Rotation, gives: dict[str, int], free: int = 32) -> list[str]:
    """One poll as the loop makes it: ask in order until ``free`` messages are held;
    returns the queues asked."""
    asked = []
    for queue in rotation.poll():
        if free <= 0:
            break
        received = min(free, gives.get(queue, 0))
        rotation.asked(queue, received, free)
        asked.append(queue)
        free -= received
    return asked


def test_with_messages_in_every_queue_they_are_asked_in_strict_turn():
    # Given four queues full of messages, each receive filling the worker
    rotation = Rotation(QUEUES, FakeClock(), LONGEST_REST_SECONDS)
    full = dict.fromkeys(QUEUES, 32)

    # When it polls eight times, Then each poll asks the queue after the last one
    asked = [_poll(rotation, full) for _ in range(8)]
    assert asked == [[queue] for queue in QUEUES + QUEUES]


def test_a_poll_not_filled_by_one_queue_goes_on_to_the_next():
    rotation = Rotation(QUEUES, FakeClock(), LONGEST_REST_SECONDS)
    assert _poll(rotation, {"q-0": 10, "q-1": 10, "q-2": 20}) == ["q-0", "q-1", "q-2"]
    # q-2 answered its 12 in full: its turn goes on for one more receive
    assert _poll(rotation, dict.fromkeys(QUEUES, 32)) == ["q-2"]
    assert _poll(rotation, dict.fromkeys(QUEUES, 32)) == ["q-3"]


def test_a_worker_refilling_by_half_a_block_takes_two_receives_a_turn():
    # Given four full queues and a worker with room for 16 at each poll
    rotation = Rotation(QUEUES, FakeClock(), LONGEST_REST_SECONDS)
    full = dict.fromkeys(QUEUES, 64)

    # Then each queue's turn is two receives, 32 consecutive messages (a block)
    asked = [queue for _ in range(8) for queue in _poll(rotation, full, free=16)]
    assert asked == ["q-0", "q-0", "q-1", "q-1", "q-2", "q-2", "q-3", "q-3"]
    # and a worker taking one message at a time, two: no queue waits more than that
    assert [q for _ in range(4) for q in _poll(rotation, full, free=1)] == [
        "q-0",
        "q-0",
        "q-1",
        "q-1",
    ]


def test_empty_queues_rest_while_the_others_keep_the_worker_busy():
    # Given one queue full and three empty, on a clock that moves 0.1 s a poll
    clock = FakeClock()
    rotation = Rotation(QUEUES, clock, LONGEST_REST_SECONDS)
    busy = {"q-0": 32}
    asked: list[str] = []

    # When it polls for 10 s
    for _ in range(100):
        asked += _poll(rotation, busy)
        clock.advance(0.1)

    # Then the busy queue was asked every poll, and each empty one only when its rest
    # (doubling from 0.02 s up to the longest, 1 s) was over: at 0, 0.1, 0.2, 0.3 (rests
    # of 0.02-0.08 s end within a poll), 0.5, 0.9, 1.6, then every 1 s from 2.6 to 9.6:
    # 15 times in 10 s, not 100
    assert asked.count("q-0") == 100
    for empty in ("q-1", "q-2", "q-3"):
        assert asked.count(empty) == 15
    assert FIRST_REST_SECONDS == 0.02


def test_after_a_poll_that_received_nothing_every_queue_is_asked_rested_or_not():
    # Given queues that just rested (all empty), on a clock that does not move
    clock = FakeClock()
    rotation = Rotation(QUEUES, clock, LONGEST_REST_SECONDS)
    assert _poll(rotation, {}) == QUEUES

    # When it polls again, Then an idle worker asks them all again at once
    assert _poll(rotation, {"q-2": 5}) == ["q-0", "q-1", "q-2", "q-3"]
    # and after one that received something, only those not resting
    assert _poll(rotation, {"q-2": 5}) == ["q-2"]


def test_a_queue_that_gives_messages_again_stops_resting():
    clock = FakeClock()
    rotation = Rotation(["a", "b"], clock, LONGEST_REST_SECONDS)
    _poll(rotation, {"a": 32})
    _poll(rotation, {"a": 32})  # b asked, empty: rests 0.02 s
    clock.advance(FIRST_REST_SECONDS)
    assert _poll(rotation, {"a": 32, "b": 32}) == ["b"]  # its turn, and it has work
    assert _poll(rotation, {"a": 32, "b": 32}) == ["a"]
    assert _poll(rotation, {"a": 32, "b": 32}) == ["b"]  # no rest left over


def test_served_queues_are_the_classes_and_those_their_unfinished_jobs_recorded(
    tmp_path: Path,
):
    # Given a job of Single's type recorded with four queues, and an ended one with two
    storage = open_storage(str(tmp_path / "store"))
    try:
        store = CheckpointStore(storage)
        store.create_job("four", Single.job_type(), "single", {}, queue_count=4)
        store.create_job("two", Single.job_type(), "single", {}, queue_count=2)
        store.update_job(store.get_job("two"), state="done")
        store.create_job("other", "x:Other", "other", {}, queue_count=3)

        # Then its workers serve its own queue, its resume queue and the unfinished job's four
        served = served_queues([Fair, Single], store.list_jobs())
    finally:
        storage.close()
    assert served == {
        "fair-resume": Fair,
        **dict.fromkeys(Fair.chunk_queues(), Fair),
        "single-resume": Single,
        "single": Single,
        **dict.fromkeys(["single-0", "single-1", "single-2", "single-3"], Single),
    }


class Receives:
    """The real queues, noting the queue of each receive."""

    def __init__(self, queues: Any):
        self._queues = queues
        self.asked: list[str] = []

    def receive(self, queue: str, **options: Any) -> Any:
        self.asked.append(queue)
        return self._queues.receive(queue, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queues, name)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    opened = open_storage(str(tmp_path / "store"))
    yield opened
    opened.close()


def test_the_loop_polls_every_queue_of_its_types_in_turn_and_says_so(storage: Storage):
    # Given 64 messages waiting in each of Fair's four queues, 128 in Single's one
    receives = Receives(storage.queues)
    counted = Storage(receives, storage.records, storage.blobs, storage.description)
    loop = WorkerLoop(counted, [Fair, Single], WorkerSettings(concurrency=32, prefetch=0))
    loop._prepare()
    for cls, queues, count in ((Fair, Fair.chunk_queues(), 64), (Single, ["single"], 128)):
        body = messages.encode(messages.TaskMessage("chunk", cls.job_type(), "none", 0))
        for queue in queues:
            storage.queues.send_many(queue, [body] * count)

    # When it receives eight times, 32 messages at most each
    for _ in range(8):
        loop._receive(32)

    # Then the two types took turns, one receive each, however many queues each has
    # (runner/worker/receiving/type_turns.py: Single's first receive, quiet till then, was out of
    # turn); each type's resume queue before its queues in its turn; and Fair's queues
    # in their own turns, none twice before another once
    assert receives.asked[:4] == ["fair-resume", "fair-0", "single-resume", "single"]
    asked = [queue for queue in receives.asked if not queue.endswith("-resume")]
    assert asked == ["fair-0", "single", "single", "fair-1", "single", "fair-2", "single", "fair-3"]
    # and its heartbeat names every queue it serves, its metrics each with its poison queue
    assert loop.heartbeat.record().queues == (*Fair.chunk_queues(), "single")


def test_the_metrics_count_each_queue_of_each_type_its_poison_queue_and_resume_queue():
    assert supervisor._queues([Fair, Single]) == [
        *(name for n in range(4) for name in (f"fair-{n}", f"fair-{n}-poison")),
        "fair-resume",
        "single",
        "single-poison",
        "single-resume",
    ]


class Clash(ChunkedJob):
    queue = "fair-2"  # one of Fair's four

    def split(self, params: Any) -> Any:
        return []

    def process(self, chunk: Chunk) -> Any:
        return None


def test_a_type_whose_queue_is_one_of_anothers_several_is_refused(storage: Storage):
    with pytest.raises(ConfigurationError, match=r"share queue 'fair-2'; give each its own"):
        WorkerLoop(storage, [Fair, Clash])
