"""The prefetch depth: fixed, or adapting to how long chunks take.

The pure part (:func:`adaptive_depth`, :class:`Prefetch`) on numbers; then worker loops on
the embedded store whose chunks take fake time (each ``process`` advances a FakeClock),
watching how many messages each receive asks for.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.loop import WorkerLoop, WorkerSettings
from runner.worker.receiving.prefetch import (
    BUFFER_SECONDS,
    MAX_PREFETCH,
    SMOOTHING,
    Prefetch,
    adaptive_depth,
)

# --------------------------------------------------------------------------- the numbers


def test_nothing_is_taken_ahead_before_a_chunk_was_timed():
    assert adaptive_depth(1, None) == 0
    assert adaptive_depth(8, None) == 0


def test_long_chunks_take_nothing_ahead_and_short_ones_up_to_the_cap():
    assert adaptive_depth(1, 10.0) == 0
    assert adaptive_depth(1, BUFFER_SECONDS * 2) == 0
    assert adaptive_depth(1, BUFFER_SECONDS / 4) == 4
    assert adaptive_depth(1, 0.0001) == MAX_PREFETCH
    assert adaptive_depth(1, 0.0) == MAX_PREFETCH


def test_more_slots_finish_more_messages_in_the_same_buffer_time():
    assert adaptive_depth(4, BUFFER_SECONDS / 4) == 16
    assert adaptive_depth(16, BUFFER_SECONDS / 4) == MAX_PREFETCH


def test_a_fixed_depth_ignores_timings():
    prefetch = Prefetch(concurrency=1, fixed=5)
    prefetch.observe(0.0001)
    prefetch.observe(100.0)
    assert (prefetch.adaptive, prefetch.depth, prefetch.seconds_per_message) == (False, 5, None)


def test_quick_chunks_grow_the_depth_by_doubling_up_to_the_cap():
    prefetch = Prefetch(concurrency=1)
    depths = []
    for _ in range(7):
        prefetch.observe(0.0002)
        depths.append(prefetch.depth)
    assert depths == [1, 3, 7, 15, 31, 63, MAX_PREFETCH]
    assert MAX_PREFETCH == 64


def test_one_quick_chunk_among_long_ones_takes_at_most_one_ahead():
    # Given a worker whose first chunk failed at once
    prefetch = Prefetch(concurrency=1)
    prefetch.observe(0.001)
    assert prefetch.depth == 1
    # When the next one takes a minute, the depth drops back at once
    prefetch.observe(60.0)
    assert prefetch.seconds_per_message == pytest.approx(0.001 + SMOOTHING * (60 - 0.001))
    assert prefetch.depth == 0


def test_chunks_getting_slower_shrink_the_depth_at_once():
    prefetch = Prefetch(concurrency=1)
    for _ in range(10):
        prefetch.observe(0.001)
    assert prefetch.depth == MAX_PREFETCH
    prefetch.observe(5.0)  # mean 1.0008 s: the buffer holds less than one
    assert prefetch.depth == 0


# --------------------------------------------------------------------------- in a worker

#: Fake seconds each chunk of the job under test takes (set per test).
CHUNK_SECONDS: dict[str, float] = {}
CLOCK: dict[str, FakeClock] = {}


class Timed(ChunkedJob):
    queue = "prefetch-timed"
    lease_seconds = 3600  # fake time passes fast here: no lease may lapse

    def split(self, params: dict[str, Any]) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> Any:
        CLOCK["clock"].advance(CHUNK_SECONDS["seconds"])
        return chunk.payload


class Receives:
    """The real queues, recording ``max_messages`` of each receive of chunk work."""

    def __init__(self, queues: Any):
        self._queues = queues
        self.asked: list[int] = []

    def receive(self, queue: str, **options: Any) -> list[Any]:
        got = self._queues.receive(queue, **options)
        if got:
            self.asked.append(options["max_messages"])
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queues, name)


def _run(tmp_path: Path, chunks: int, seconds: float, **settings: Any) -> tuple[WorkerLoop, list]:
    clock = FakeClock()
    CLOCK["clock"], CHUNK_SECONDS["seconds"] = clock, seconds
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    receives = Receives(storage.queues)
    watched = replace(storage, queues=receives, closer=None)
    try:
        submit(Timed, {"chunks": chunks}, storage=watched)
        loop = WorkerLoop(
            watched, [Timed], WorkerSettings(burst=True, poll_max_seconds=0.05, **settings), clock
        )
        assert loop.run() == 0
    finally:
        storage.close()
    return loop, receives.asked[1:]  # the first receive took the planning message


def test_a_worker_takes_no_long_chunk_ahead_of_the_one_it_runs(tmp_path: Path):
    # Given chunks of 30 s each and the default (adaptive) prefetch
    loop, asked = _run(tmp_path, chunks=6, seconds=30.0)

    # Then every receive asked for one message only: no chunk waited behind another
    assert asked and set(asked) == {1}
    assert loop.prefetch.depth == 0
    assert loop.prefetch.seconds_per_message == pytest.approx(30.0)


def test_a_worker_takes_many_quick_chunks_at_once(tmp_path: Path):
    # Given 200 chunks that take no time at all
    loop, asked = _run(tmp_path, chunks=200, seconds=0.0)

    # Then the receives grew to take many at a time, so there were few of them
    assert loop.prefetch.depth == MAX_PREFETCH
    # as many as a receive returns (32), with a receive's worth still waiting ahead
    assert statistics.median(asked) == 32
    assert len(asked) < 40


def test_chunks_of_tens_of_milliseconds_are_received_many_at_once(tmp_path: Path):
    # Given 200 chunks of 25 ms each, as a trivial chunk takes on Azure (its claim)
    loop, asked = _run(tmp_path, chunks=200, seconds=0.025)

    # Then a second of them is kept ahead (40; the sleeps make it a little less) and a
    # receive takes many: a receive a chunk would cost a request a chunk
    assert 32 <= loop.prefetch.depth <= 40
    assert len(asked) < 40


def test_a_fixed_prefetch_is_kept_whatever_the_chunks_take(tmp_path: Path):
    loop, asked = _run(tmp_path, chunks=6, seconds=30.0, prefetch=2)
    assert loop.prefetch.depth == 2
    assert max(asked) == 3  # one slot and two ahead
