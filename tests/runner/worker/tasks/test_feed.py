"""Windowed feeding and priority (docs/semantics.md §22), on both backends, through the
worker's own code one message at a time (the :class:`World` of tests/runner/world.py):
a job's queue holds at most its window of chunk messages, a job submitted later is not
stuck behind an earlier one, a job of higher priority gets most of the workers, and a
feeder dying at any step loses no chunk and runs none twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.errors import NotFound
from checkpoint.storage import BatchOp, PropertyValue
from jobs import manage
from jobs.submit import submit
from runner.cli.status import job_status
from runner.worker.job_cache import FRESH_SECONDS
from runner.worker.loop import assemble
from runner.worker.observing.logs import current_ids
from runner.worker.tasks.life import handle
from tests.backends import real_wait
from tests.runner.world import LEASE_SECONDS, Second, Verdicts, World

WINDOW = 100
#: The runs are this much smaller than the sizes written (window and jobs alike, so each
#: still spans as many windows and pages): on the embedded store a quarter, which
#: shows the same in a quarter of the time (in a full run the suite's longest module,
#: 150 s, of which the embedded half 46 s, 11 s after); on Azurite, which serves a few
#: hundred requests a second here, a tenth.
EMBEDDED_SHARE = 4
AZURITE_SHARE = 10
#: How long a feed message that could send nothing hides (runner.worker.tasks.feed).
IDLE_SECONDS = 1


class Crash(BaseException):
    """The worker process dies here: no code of ours catches it."""


class Run:
    """Delivers the queue's messages one at a time until the given jobs have ended,
    noting which job each chunk run belonged to and the queue's depth before each."""

    def __init__(self, world: World, monkeypatch: pytest.MonkeyPatch):
        self.world = world
        self.share = EMBEDDED_SHARE if world.backend.clock is not None else AZURITE_SHARE
        self.window = self.n(WINDOW)
        monkeypatch.setattr(Verdicts, "feed_window", self.window, raising=False)
        self.ran: list[str] = []
        self.depths: list[int] = []
        self.crashes = 0
        self._dead = False
        self._deadly: list[Callable[[str], bool]] = []
        plan = world.meanwhile
        decide = plan.decide

        def mortal(service: str, method: str) -> Any:
            call = f"{service}.{method}"
            if self._dead:
                raise Crash(f"dead worker calling {call}")
            if any(kills(call) for kills in self._deadly):
                self._dead = True
                raise Crash(f"killed before {call}")
            return decide(service, method)

        monkeypatch.setattr(plan, "decide", mortal)

    def n(self, count: int) -> int:
        """``count`` chunks, made smaller on Azurite."""
        return count // self.share

    def submit(self, chunks: int, priority: int = 0) -> str:
        payloads = [{"act": "ok"}] * chunks
        storage = self.world.backend.storage
        # Given only when asked for: the same test then runs on code without priorities
        asked: dict[str, Any] = {"priority": priority} if priority else {}
        job_id = submit(Verdicts, {"payloads": payloads}, storage=storage, **asked)
        self.world.during(job_id, lambda: self._ran(job_id))
        return job_id

    def _ran(self, job_id: str) -> None:
        if current_ids().get("task") == "chunk":  # finalize calls it too
            self.ran.append(job_id)

    def kill_feeder_before(self, call: str, nth: int) -> None:
        """Kill the worker just before its ``nth`` call of ``call`` made while feeding."""
        seen = Counter[str]()

        def kills(made: str) -> bool:
            if made != call or current_ids().get("task") != "feed":
                return False
            seen[made] += 1
            return seen[made] == nth

        self._deadly.append(kills)

    def step(self) -> bool:
        """Deliver one message; False if none was visible (time passes instead)."""
        world = self.world
        found = world.receive_all(1)
        if not found:
            self._pass(IDLE_SECONDS, None)
            return False
        self.depths.append(world.in_queue())
        try:
            handle(world.worker, world.queue, found[0], world.clock.monotonic())
        except Crash:
            # A fresh worker process goes on once the dead one's lease has run out.
            self.crashes += 1
            self._dead = False
            world.worker = assemble(
                world.faulty.storage, [Verdicts, Second], world.clock, f"w{self.crashes}"
            )
            self._pass(LEASE_SECONDS, found[0])
        return True

    def until_ended(self, *job_ids: str, rounds: int = 20_000) -> None:
        jobs: list[Any] = []
        for _ in range(rounds):
            jobs = [self.world.job_record(job_id) for job_id in job_ids]
            if all(job.ended for job in jobs) and self.world.in_queue() == 0:
                return
            self.step()
        raise AssertionError(f"not ended after {rounds} rounds: {jobs}")

    def _pass(self, seconds: float, message: Any) -> None:
        world = self.world
        if message is not None:
            world.let_pass(seconds, message)
        elif world.backend.clock is None:
            world.clock.advance(seconds)
            real_wait(seconds)  # Azurite's visibility runs on its own clock
        else:
            world.clock.advance(seconds)


def _each_chunk_ran_once(world: World, run: Run, job_id: str, total: int) -> None:
    assert run.ran.count(job_id) == total  # process called once per chunk...
    chunks = list(world.store.chunks(job_id))
    assert [chunk.index for chunk in chunks] == list(range(total))
    assert {(chunk.state, chunk.attempt) for chunk in chunks} == {("done", 1)}  # ...and done


@pytest.fixture
def run(world: World, monkeypatch: pytest.MonkeyPatch) -> Run:
    return Run(world, monkeypatch)


# --------------------------------------------------------------------------- window


def test_a_large_job_never_has_more_than_its_window_on_the_queue(world: World, run: Run):
    # Given a job of 2,000 chunks and a window of 100
    job_id = run.submit(run.n(2_000))

    # When every message is delivered, one at a time
    run.until_ended(job_id)

    # Then the queue never held more than the window and the feed message (the bound
    # promised is the window and a page), and every chunk ran to completion once
    assert max(run.depths) <= run.window + 1
    assert world.job_record(job_id).state == "done"
    _each_chunk_ran_once(world, run, job_id, run.n(2_000))
    assert world.task(job_id, "feed").state == "done"


def test_status_counts_chunks_not_yet_fed_as_waiting(world: World, run: Run):
    job_id = run.submit(run.n(350))
    run.step()  # planning: all recorded, a window sent
    assert world.in_queue() == run.window + 1

    chunks = job_status(world.store, world.job_record(job_id), world.clock.now()).chunks

    assert (chunks.total, chunks.waiting, chunks.done) == (run.n(350), run.n(350), 0)


def test_a_job_submitted_later_starts_before_the_earlier_one_ends(world: World, run: Run):
    # Given a job of 1,000 chunks planned, then a job of 10 submitted behind it
    first = run.submit(run.n(1_000))
    run.step()
    later = run.submit(run.n(10))

    run.until_ended(first, later)

    # Then the later job's chunks ran behind at most two windows of the first's
    started = run.ran.index(later)
    assert run.ran[:started] == [first] * started and started <= 2 * run.window
    assert max(i for i, job in enumerate(run.ran) if job == later) < len(run.ran) - run.window
    _each_chunk_ran_once(world, run, later, run.n(10))
    _each_chunk_ran_once(world, run, first, run.n(1_000))


# --------------------------------------------------------------------------- priority


def test_a_job_of_higher_priority_gets_most_of_the_workers(world: World, run: Run):
    # Given a job of priority 0 under way, and then one of priority 5
    low = run.submit(run.n(1_500))
    run.step()
    high = run.submit(run.n(500), priority=5)
    assert world.job_record(high).priority == 5

    run.until_ended(low, high)

    # Then while the high one ran, the low one ran a small share (its window an eighth),
    # and some: it is not starved
    first, last = run.ran.index(high), len(run.ran) - 1 - run.ran[::-1].index(high)
    low_meanwhile = run.ran[first:last].count(low)
    assert 0 < low_meanwhile <= run.n(500) // 4  # sharing alike: about as many as high's
    assert run.ran[last + 1 :] == [low] * (len(run.ran) - last - 1)
    _each_chunk_ran_once(world, run, low, run.n(1_500))


class Retained:
    """1,200 ended jobs of another type in the catalogue (more than a page of it),
    written straight into the jobs partition once it exists, removed after the test."""

    COUNT = 1_200

    def __init__(self, world: World):
        self._records = world.backend.storage.records
        self._rows = [f"retained-{i:05d}" for i in range(self.COUNT)]
        self._written = False

    def write(self) -> None:
        fields: dict[str, PropertyValue] = {
            "job_type": "tests:Old",
            "queue": "old",
            "state": "done",
            "priority": 9,
        }
        self._apply([BatchOp("insert", row, fields) for row in self._rows])
        self._written = True

    def remove(self) -> None:
        if self._written:
            self._apply([BatchOp("delete", row) for row in self._rows])

    def _apply(self, operations: list[BatchOp]) -> None:
        for first in range(0, len(operations), 100):
            part = operations[first : first + 100]
            self._records.batch(layout.JOBS_TABLE, layout.JOBS_PARTITION, part)


@pytest.fixture
def retained(world: World) -> Iterator[Retained]:
    jobs = Retained(world)
    try:
        yield jobs
    finally:
        jobs.remove()


def test_a_feed_step_reads_no_retained_job_of_the_catalogue(
    world: World, run: Run, retained: Retained, monkeypatch: pytest.MonkeyPatch
):
    # Given many ended jobs retained, and a job with a feeder
    records = world.backend.storage.records
    query, read_while_feeding = records.query, Counter[str]()

    def watched(table: str, partition_key: str, *args: Any, **kwargs: Any) -> Any:
        for record in query(table, partition_key, *args, **kwargs):
            if current_ids().get("task") == "feed":
                if (table, partition_key) == (layout.JOBS_TABLE, layout.JOBS_PARTITION):
                    read_while_feeding[record.row_key.split("-")[0]] += 1
            yield record

    monkeypatch.setattr(records, "query", watched)
    job_id = run.submit(run.window * 3)
    retained.write()

    # When it runs to its end
    run.until_ended(job_id)

    # Then its feed steps read none of the retained jobs: what a step reads does not
    # grow with the catalogue (the priority check asks for the jobs above its own only)
    assert world.task(job_id, "feed").state == "done"
    assert read_while_feeding["retained"] == 0
    _each_chunk_ran_once(world, run, job_id, run.window * 3)


def test_a_feed_step_reads_no_counter_where_its_worker_saw_them_leave_room(
    world: World, run: Run, monkeypatch: pytest.MonkeyPatch
):
    # Given a job of three windows, run by one worker that ends its chunks itself
    records = world.backend.storage.records
    get, query, during_feed = records.get, records.query, Counter[str]()

    def watched_get(table: str, partition_key: str, row_key: str) -> Any:
        if current_ids().get("task") == "feed" and row_key == layout.COUNTS_ROW:
            during_feed["counter reads"] += 1
        return get(table, partition_key, row_key)

    def watched_query(table: str, partition_key: str, *args: Any, **kwargs: Any) -> Any:
        if current_ids().get("task") == "feed" and partition_key == layout.JOBS_PARTITION:
            during_feed["steps"] += 1  # each step asks for the jobs above it once
        return query(table, partition_key, *args, **kwargs)

    monkeypatch.setattr(records, "get", watched_get)
    monkeypatch.setattr(records, "query", watched_query)
    job_id = run.submit(run.window * 3)

    # When it runs to its end
    run.until_ended(job_id)

    # Then steps took the counters as the worker last saw them (a low bound: counters
    # only grow) where those left a quarter window to feed, reading none of them
    assert during_feed["steps"] >= 3
    assert during_feed["counter reads"] < layout.SHARDS * during_feed["steps"]
    _each_chunk_ran_once(world, run, job_id, run.window * 3)


def test_a_feed_step_reads_no_job_record_and_writes_its_own_at_most_thrice(
    world: World, run: Run, monkeypatch: pytest.MonkeyPatch
):
    # Given a job of three windows and the requests its feed steps make
    records = world.backend.storage.records
    get, query, merge, during_feed = records.get, records.query, records.merge, Counter[str]()

    def watched_get(table: str, partition_key: str, row_key: str) -> Any:
        if current_ids().get("task") == "feed" and table == layout.JOBS_TABLE:
            during_feed["job reads"] += 1
        return get(table, partition_key, row_key)

    def watched_query(table: str, partition_key: str, *args: Any, **kwargs: Any) -> Any:
        if current_ids().get("task") == "feed" and partition_key == layout.JOBS_PARTITION:
            during_feed["steps"] += 1  # each step asks for the jobs above it once
        return query(table, partition_key, *args, **kwargs)

    def watched_merge(table: str, partition_key: str, row_key: str, *args: Any, **kw: Any) -> Any:
        if row_key == layout.FEED_ROW:
            during_feed["feed record writes"] += 1
        return merge(table, partition_key, row_key, *args, **kw)

    monkeypatch.setattr(records, "get", watched_get)
    monkeypatch.setattr(records, "query", watched_query)
    monkeypatch.setattr(records, "merge", watched_merge)
    job_id = run.submit(run.window * 3)

    # When it runs to its end
    run.until_ended(job_id)

    # Then no step read the job's record again to feed (its delivery was judged by the
    # stored record moments before: that one serves), and each wrote its record at most
    # three times: its claim, the first page's cursor before the next step's message
    # went out, and the last page's cursor with its end (waiting, or done)
    steps = during_feed["steps"]
    assert steps >= 3
    assert during_feed["job reads"] == 0, during_feed
    assert 2 * steps <= during_feed["feed record writes"] <= 3 * steps, during_feed
    _each_chunk_ran_once(world, run, job_id, run.window * 3)


def test_status_shows_the_priority(world: World, run: Run):
    job_id = run.submit(3, priority=-2)

    status = job_status(world.store, world.job_record(job_id), world.clock.now())

    assert status.priority == -2


# --------------------------------------------------------------------------- crashes

CRASH_POINTS = [
    # (the worker's call it dies before, which of them while feeding): what is lost
    ("records.query", 1),  # before reading the jobs and its first page: nothing sent
    ("queues.send_many", 1),  # before sending the first half
    ("records.merge", 2),  # first half sent, cursor not written: sent again
    ("queues.send", 1),  # cursor written, the next step's message not sent
    ("queues.send_many", 2),  # next step's message sent, second half not: two feeders
    ("records.merge", 4),  # second half's cursor written, record not yet waiting
    ("queues.delete", 1),  # record waiting, its own message not deleted: two feeders
]


@pytest.mark.parametrize(("call", "nth"), CRASH_POINTS)
def test_a_feeder_killed_at_any_step_loses_no_chunk_and_runs_none_twice(
    world: World, run: Run, call: str, nth: int
):
    job_id = run.submit(run.n(350))
    run.kill_feeder_before(call, nth)

    run.until_ended(job_id)

    assert run.crashes == 1
    assert world.job_record(job_id).state == "done"
    _each_chunk_ran_once(world, run, job_id, run.n(350))


# --------------------------------------------------------------------------- control


def test_a_job_paused_mid_feed_parks_its_feeder_and_resumes(world: World, run: Run):
    # Given a job whose first window ran, paused before its feeder's turn
    job_id = run.submit(run.n(350))
    for _ in range(1 + run.window):
        run.step()
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.clock.advance(FRESH_SECONDS)

    # When the feed message comes: parked, nothing fed
    run.step()
    assert run.ran.count(job_id) == run.window
    assert world.visible() == []

    # Then once resumed it goes on to the end, each chunk once
    manage.resume(job_id, storage=world.backend.storage, clock=world.clock)
    run.until_ended(job_id)
    _each_chunk_ran_once(world, run, job_id, run.n(350))


def test_a_job_cancelled_mid_feed_sends_nothing_more(world: World, run: Run):
    job_id = run.submit(run.n(350))
    for _ in range(1 + run.window):
        run.step()
    manage.cancel(job_id, "enough", storage=world.backend.storage, clock=world.clock)
    world.clock.advance(FRESH_SECONDS)

    run.until_ended(job_id)

    assert run.ran.count(job_id) == run.window
    with pytest.raises(NotFound):  # its message was deleted unrun
        world.task(job_id, "feed")
    chunks = job_status(world.store, world.job_record(job_id), world.clock.now()).chunks
    assert (chunks.done, chunks.waiting, chunks.cancelled) == (
        run.window,
        0,
        run.n(350) - run.window,
    )
