"""The worker loop's own decisions (runner/worker/loop.py), in this process on the embedded
store and the real clock: when a burst worker may stop, and which queue it polls first.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from checkpoint import messages
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock, SystemClock
from checkpoint.limits.book import LimitBook
from checkpoint.retries import STANDALONE, Budget
from checkpoint.storage import NEVER_EXPIRES
from checkpoint.store import CheckpointStore
from jobs import Pipeline, PipelineStop, manage
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.loop import WorkerLoop, WorkerSettings

#: How long another consumer keeps the ended job's message hidden.
HIDDEN_SECONDS = 1


class Noop(ChunkedJob):
    queue = "loop-burst"

    def split(self, params: dict[str, Any]) -> Any:
        return [{}]

    def process(self, chunk: Chunk) -> Any:
        return None


def test_a_burst_worker_waits_for_a_hidden_message_of_an_ended_job(tmp_path: Path):
    # Given a cancelled job whose planning message another consumer holds for a moment
    storage = open_storage(str(tmp_path / "store"))
    try:
        job_id = submit(Noop, {}, storage=storage)
        manage.cancel(job_id, "not wanted", storage=storage)
        (held,) = storage.queues.receive(Noop.queue, visibility_seconds=HIDDEN_SECONDS)

        # When a burst worker runs: every job has ended, but the queue is not empty
        exit_code = WorkerLoop(storage, [Noop], WorkerSettings(burst=True)).run()

        # Then it stopped only once the message had come back and been dropped unrun
        assert exit_code == 0
        assert storage.queues.approximate_length(Noop.queue) == 0
        assert held.id  # the message it waited for was real
    finally:
        storage.close()


class Stops(Noop):
    """A step whose finalize refuses to let its pipeline go on."""

    queue = "loop-burst-stops"

    def finalize(self, params: dict[str, Any], summary: Any) -> None:
        raise PipelineStop("2 rows differ")


def test_a_burst_worker_runs_a_pipeline_and_leaves_a_blocked_step_waiting(tmp_path: Path):
    # Given a pipeline of three steps: the second stops the pipeline
    storage = open_storage(str(tmp_path / "store"))
    try:
        run = Pipeline("loop-pipe")
        first = run.step("stage", Noop, {})
        second = run.step("verify", Stops, {}, after=[first])
        third = run.step("publish", Noop, {}, after=[second])
        run.submit(storage=storage)

        # When one burst worker serves both types
        exit_code = WorkerLoop(storage, [Noop, Stops], WorkerSettings(burst=True)).run()

        # Then it ran the first two steps in order and exited, leaving the third
        # waiting on the failed one (it would otherwise have waited for it for ever)
        assert exit_code == 0
        store = CheckpointStore(storage)
        states = [store.get_job(job_id).state for job_id in (first, second, third)]
        assert states == ["done", "failed", "waiting"]
        assert store.get_job(second).error == "2 rows differ"
    finally:
        storage.close()


class Ordered(ChunkedJob):
    queue = "loop-resume-first"
    ran: ClassVar[list[int]] = []

    def split(self, params: dict[str, Any]) -> Any:
        return []

    def process(self, chunk: Chunk) -> Any:
        Ordered.ran.append(chunk.index)
        return None


def test_the_loop_receives_from_the_resume_queue_before_the_job_queue(tmp_path: Path):
    # Given fresh chunks 1 and 2 waiting in the job queue since before chunk 0 came back
    # to the resume queue (its worker died)
    storage = open_storage(str(tmp_path / "store"))
    try:
        store = CheckpointStore(storage)
        store.ensure()
        job, _ = store.create_job("ordered-1", Ordered.job_type(), Ordered.queue, {})
        store.add_chunks(job.job_id, 0, [{}, {}, {}])
        store.update_job(job, state="running", total=3)
        for queue in (Ordered.queue, Ordered.resume_queue()):
            storage.queues.create_queue(queue)
        for index, queue in ((1, Ordered.queue), (2, Ordered.queue), (0, Ordered.resume_queue())):
            body = messages.encode(
                messages.TaskMessage("chunk", Ordered.job_type(), job.job_id, index)
            )
            storage.queues.send(queue, body, ttl_seconds=NEVER_EXPIRES)

        # When a worker of one slot, taking nothing ahead, serves them
        settings = WorkerSettings(concurrency=1, prefetch=0, burst=True)
        assert WorkerLoop(storage, [Ordered], settings).run() == 0

        # Then the resumed chunk ran first
        assert Ordered.ran == [0, 1, 2]
    finally:
        storage.close()


class Started:
    """When each chunk of a job started and ended (real time), from the job itself."""

    lock = threading.Lock()
    spans: dict[str, list[tuple[float, float]]] = {}

    @classmethod
    def most_at_once(cls, queue: str) -> int:
        events = sorted(
            [(start, 1) for start, _ in cls.spans[queue]]
            + [(end, -1) for _, end in cls.spans[queue]]
        )
        running = most = 0
        for _, change in events:
            running += change
            most = max(most, running)
        return most


class Timed(ChunkedJob):
    queue = "loop-limited"

    def split(self, params: dict[str, Any]) -> Any:
        return [{}] * params["chunks"]

    def process(self, chunk: Chunk) -> Any:
        started = time.monotonic()
        time.sleep(chunk.params["seconds"])
        with Started.lock:
            Started.spans.setdefault(self.queue, []).append((started, time.monotonic()))


class TwoAtOnce(Timed):
    queue = "loop-two-at-once"
    max_running = 2


class TwentyASecond(Timed):
    queue = "loop-twenty-a-second"
    rate_limit = "20/s"


def test_a_burst_worker_of_four_slots_runs_at_most_max_running_chunks_at_once(tmp_path: Path):
    storage = open_storage(str(tmp_path / "store"))
    try:
        job_id = submit(TwoAtOnce, {"chunks": 8, "seconds": 0.05}, storage=storage)
        exit_code = WorkerLoop(
            storage, [TwoAtOnce], WorkerSettings(concurrency=4, burst=True)
        ).run()
        assert exit_code == 0
        assert CheckpointStore(storage, SystemClock()).get_job(job_id).state == "done"
        assert len(Started.spans[TwoAtOnce.queue]) == 8
        assert Started.most_at_once(TwoAtOnce.queue) == 2
        # Every slot went back as its chunk ended (planning and finalize held none).
        book = LimitBook(storage.records, SystemClock())
        slots = book.get(TwoAtOnce.queue, Budget(STANDALONE, SystemClock())).running
        assert slots is not None and slots.takers == {}
    finally:
        storage.close()


def test_a_burst_worker_starts_chunks_no_faster_than_the_rate(tmp_path: Path):
    storage = open_storage(str(tmp_path / "store"))
    try:
        submit(TwentyASecond, {"chunks": 40, "seconds": 0}, storage=storage)
        began = time.monotonic()
        settings = WorkerSettings(concurrency=4, burst=True)
        assert WorkerLoop(storage, [TwentyASecond], settings).run() == 0
        # 20 at once (a second's burst), then 20 a second: at least a second for 40.
        assert time.monotonic() - began >= 1.0
        assert len(Started.spans[TwentyASecond.queue]) == 40
    finally:
        storage.close()


class StuckSlot(threading.Thread):
    """A chunk slot that does not end: each join waits (on the fake clock) as long as
    it is allowed to."""

    def __init__(self, clock: FakeClock, waits: list[float]):
        super().__init__(daemon=True)
        self._clock, self._waits = clock, waits

    def join(self, timeout: float | None = None) -> None:
        assert timeout is not None, "a stop never waits without a limit"
        self._waits.append(timeout)
        self._clock.advance(timeout)

    def is_alive(self) -> bool:
        return True


def test_a_stop_waits_for_chunks_and_the_finisher_within_one_stop_timeout(
    tmp_path: Path, monkeypatch: Any
):
    # Given a worker stopping with two chunks that do not stop and a finisher whose
    # writes do not end, on a fake clock
    clock = FakeClock()
    storage = open_storage(str(tmp_path / "store"))
    try:
        loop = WorkerLoop(storage, [Noop], WorkerSettings(stop_timeout_seconds=30), clock)
        waits: list[float] = []

        def finisher_stop(timeout: float) -> bool:
            waits.append(timeout)
            clock.advance(timeout)
            return False

        monkeypatch.setattr(loop.context.finisher, "stop", finisher_stop)
        started = clock.monotonic()

        # When it waits for them
        finished = loop._drain([StuckSlot(clock, waits), StuckSlot(clock, waits)])

        # Then the whole wait is one stop_timeout_seconds, not one for the chunks and
        # another for the finisher
        assert not finished
        assert clock.monotonic() - started == 30
        assert sum(waits) == 30 and waits[-1] == 0  # the chunks spent it all
    finally:
        storage.close()
