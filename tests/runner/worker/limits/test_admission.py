"""Admission before receiving (runner/worker/limits/admission.py, the loop's ``_receive``), on
both backends and a fake clock: a worker takes rate tokens and running slots before it
receives, so a message it could not start is never leased and its dequeue never
counted; slots go back as messages end, and storage trouble only skips a round."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.clock import FakeClock
from checkpoint.limits.book import RUNNING_ROW, LimitBook
from checkpoint.limits.rates import parse_rate
from checkpoint.retries import STANDALONE, Budget
from checkpoint.storage import QueueMessage
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from runner.worker.limits import slot_keeper
from runner.worker.limits.admission import KEEP_TOKENS_SECONDS, LOOK_AGAIN_SECONDS
from runner.worker.limits.slot_keeper import SlotKeeper
from runner.worker.loop import WorkerLoop
from tests.backends import Backend
from tests.runner.world import Meanwhile

LEASE = 30


def job_class(**limits: Any) -> type[ChunkedJob]:
    """A job type with a fresh queue and the given limits."""

    def process(self: ChunkedJob, chunk: Chunk) -> None:
        return None

    attributes = {"queue": f"adm-{uuid.uuid4().hex[:10]}", "lease_seconds": LEASE}
    attributes.update(limits, split=lambda self, params: [], process=process)
    return type("Limited", (ChunkedJob,), attributes)


class Served:
    """A worker loop (not started: its receive rounds are driven by hand) serving one
    job type whose queue holds ``messages`` messages."""

    def __init__(self, backend: Backend, cls: type[ChunkedJob], plan: Meanwhile | None = None):
        self.backend, self.cls = backend, cls
        self.clock = FakeClock()
        storage = backend.storage
        if plan is not None:
            storage = FaultyStorage(storage, plan, sleep=self.clock.sleep).storage
        self.loop = WorkerLoop(storage, [cls], clock=self.clock, worker_id="w-test")
        self.loop._prepare()
        backend.made += [("queue", cls.queue), ("queue", cls.poison_queue())]
        self.book = LimitBook(backend.storage.records, self.clock)
        self.received: list[QueueMessage] = []

    def send(self, count: int) -> None:
        for n in range(count):
            self.backend.storage.queues.send(self.cls.queue, f"m{n}".encode())

    def receive(self) -> int:
        """One receive round of the loop; the ids of what it received are kept."""
        before = self.loop._work.qsize()
        got = self.loop._receive(32)
        for _ in range(self.loop._work.qsize() - before):
            _, message, _, _ = self.loop._work.get()
            self.received.append(message)
        return got

    def unreceived_dequeues(self) -> list[int]:
        """Dequeue counts of the messages still visible (none was ever received)."""
        return [
            m.dequeue_count
            for m in self.backend.storage.queues.peek(self.cls.queue, max_messages=32)
        ]

    def budget(self) -> Budget:
        return Budget(STANDALONE, self.clock)


@pytest.fixture
def served(backend: Backend) -> Iterator[Any]:
    made: list[Served] = []

    def make(cls: type[ChunkedJob], plan: Meanwhile | None = None) -> Served:
        made.append(Served(backend, cls, plan))
        return made[-1]

    yield make
    for one in made:
        one.book.clear(one.cls.queue, one.budget())


def test_no_message_is_received_while_the_rate_has_no_token(served: Any):
    # Given a job type of 2 chunks a second and 5 messages waiting
    one = served(job_class(rate_limit="2/s"))
    one.send(5)
    # When the worker receives: one second's burst, 2 messages
    assert one.receive() == 2
    # Then with no token left it receives nothing, and says when the next is due
    assert one.receive() == 0
    assert one.loop._token_wait == pytest.approx(0.5)
    assert one.unreceived_dequeues() == [0, 0, 0]  # never leased, never counted
    one.clock.advance(0.5)
    assert one.receive() == 1
    assert sorted(one.unreceived_dequeues()) == [0, 0]


def test_tokens_a_receive_did_not_use_serve_the_next_receive_for_a_second(served: Any):
    one = served(job_class(rate_limit="10/s"))
    one.send(1)
    assert one.receive() == 1  # took 10 tokens, used 1: 9 kept
    bucket = one.book.get(one.cls.queue, one.budget()).rate
    assert bucket is not None and bucket.tokens == 0
    one.send(3)
    assert one.receive() == 3
    assert one.book.get(one.cls.queue, one.budget()).rate == bucket  # no take: kept ones
    one.clock.advance(KEEP_TOKENS_SECONDS + 0.01)  # the 6 left are dropped; the bucket refilled
    one.send(1)
    assert one.receive() == 1
    after = one.book.get(one.cls.queue, one.budget()).rate
    assert after is not None and after.tokens == 0  # took 10 again


def test_running_slots_cap_what_is_received_and_come_back_as_messages_end(served: Any):
    # Given at most 2 running, and 4 messages
    one = served(job_class(max_running=2))
    one.send(4)
    assert one.receive() == 2
    assert one.receive() == 0
    assert one.loop._token_wait is None  # a slot frees up when a chunk ends, not by time
    assert one.unreceived_dequeues() == [0, 0]
    # When one message ends (done, failed, handed back: the loop says so once)
    one.loop.admission.ended(one.received[0])
    one.loop.admission.ended(one.received[0])  # idempotent
    # Then one more is received
    assert one.receive() == 1
    slots = one.book.get(one.cls.queue, one.budget()).running
    assert slots is not None and slots.takers["w-test"][0] == 2


def test_slots_a_receive_did_not_use_go_back_at_once(served: Any):
    one = served(job_class(max_running=5, rate_limit="100/s"))
    one.send(1)
    assert one.receive() == 1
    slots = one.book.get(one.cls.queue, one.budget()).running
    assert slots is not None and slots.takers["w-test"][0] == 1


def test_slots_are_renewed_and_a_dead_workers_lapse(served: Any):
    one = served(job_class(max_running=3))
    one.send(3)
    assert one.receive() == 3
    assert one.loop.slot_keeper.interval_seconds == LEASE / 3
    one.clock.advance(LEASE * 0.9)
    one.loop.admission.renew()
    one.clock.advance(LEASE * 0.9)
    slots = one.book.get(one.cls.queue, one.budget()).running
    assert slots is not None and slots.in_use(one.clock.now()) == 3
    # Another worker (this one's renewals stopped: it died) gets them after a lease.
    one.clock.advance(LEASE)
    taken = one.book.take_slots(one.cls.queue, "w-other", 3, LEASE, one.budget())
    assert taken is not None and taken.count == 3
    one.loop.admission.renew()  # the dead one, back: nothing is free
    assert one.book.get(one.cls.queue, one.budget()).running.takers.keys() == {"w-other"}


def test_a_limit_cleared_by_hand_comes_back_from_the_class(served: Any):
    one = served(job_class(rate_limit="1/s", max_running=1))
    one.book.clear(one.cls.queue, one.budget())
    one.send(2)
    assert one.receive() == 1
    limit = one.book.get(one.cls.queue, one.budget())
    assert limit.rate is not None and limit.rate.rate.text == "1/s"
    assert limit.running is not None and limit.running.max_running == 1


def test_a_limit_set_by_hand_on_a_queue_with_none_is_honoured_within_seconds(served: Any):
    one = served(job_class())
    one.send(4)
    assert one.receive() == 4  # no limit: nothing stored to take from
    one.book.set_running(one.cls.queue, 1, one.budget())
    one.send(2)
    assert one.receive() == 2  # not looked at again yet
    one.clock.advance(LOOK_AGAIN_SECONDS)
    one.send(2)
    # Chunks started before the limit was seen hold no slot: it counts from here on.
    assert one.receive() == 1
    assert one.receive() == 0


def test_a_class_value_differing_from_the_store_is_warned_of_once_and_the_store_wins(
    backend: Backend, served: Any, caplog: pytest.LogCaptureFixture
):
    cls = job_class(rate_limit="50/s", max_running=4, limits={"adm-shared-db": "5/s"})
    book = LimitBook(backend.storage.records, FakeClock())
    budget = Budget(STANDALONE, FakeClock())
    CheckpointStore(backend.storage, FakeClock()).ensure()
    book.set_rate(cls.queue, parse_rate("1/s"), budget)
    book.set_running(cls.queue, 2, budget)
    book.define_rate("adm-shared-db", parse_rate("7/s"), "another:Job", budget)
    try:
        served(cls)
        said = [
            r.getMessage() for r in caplog.records if "the store's value applies" in r.getMessage()
        ]
        assert len(said) == 3
        assert any("says '50/s', the store says 1/s (set by hand)" in line for line in said)
        assert any("set by another:Job" in line for line in said)
    finally:
        book.clear("adm-shared-db", budget)


def test_storage_trouble_taking_a_token_skips_the_queue_this_round(served: Any):
    plan = Meanwhile()
    one = served(job_class(rate_limit="5/s"), plan)
    one.send(2)
    plan.busy.add("records.get")
    assert one.receive() == 0
    assert one.unreceived_dequeues() == [0, 0]
    plan.busy.clear()
    assert one.receive() == 2


def test_a_failed_release_is_mended_by_the_next_renewal(served: Any):
    plan = Meanwhile()
    one = served(job_class(max_running=2), plan)
    one.send(2)
    assert one.receive() == 2
    plan.busy.add("records.replace")
    one.loop.admission.ended(one.received[0])  # the write fails: still 2 in the store
    one.loop.admission.renew()  # and so does the renewal
    plan.busy.clear()
    slots = one.book.get(one.cls.queue, one.budget()).running
    assert slots is not None and slots.takers["w-test"][0] == 2
    one.loop.admission.renew()
    slots = one.book.get(one.cls.queue, one.budget()).running
    assert slots is not None and slots.takers["w-test"][0] == 1


def test_kept_tokens_serve_a_smaller_receive_and_the_rest_stay_kept(served: Any):
    one = served(job_class(rate_limit="10/s"))
    one.send(1)
    assert one.receive() == 1  # 9 kept
    one.send(5)
    assert one.loop._receive(2) == 2  # room for 2: 2 of the 9, 7 still kept
    assert one.loop._receive(32) == 3
    bucket = one.book.get(one.cls.queue, one.budget()).rate
    assert bucket is not None and bucket.tokens == 0  # all from the one take of 10


def test_the_slot_keeper_renews_every_third_of_a_lease_until_stopped(served: Any):
    one = served(job_class(max_running=3))
    keeper = SlotKeeper(one.loop.admission, lease_seconds=0.03)
    renewed = threading.Event()
    one.loop.admission.renew = renewed.set  # type: ignore[method-assign]
    keeper.start()
    try:
        assert renewed.wait(5.0)  # real time: its waits are real (a fake clock would spin)
    finally:
        keeper.stop()
    assert keeper.interval_seconds == pytest.approx(0.01)
    never_started = SlotKeeper(one.loop.admission, lease_seconds=0.03)
    never_started.stop()  # a worker stopped before its keepers started: nothing to join
    assert never_started._thread is None


def test_a_slot_keeper_that_never_ends_is_given_up_on_and_said_so(
    served: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    # Given a slot keeper whose renewal hangs (a store that never answers), and a give-up
    # time cut to 0.2 s for the test (real time: joining a thread is)
    monkeypatch.setattr(slot_keeper, "KEEPER_STOP_SECONDS", 0.2)
    one = served(job_class(max_running=3))
    keeper = SlotKeeper(one.loop.admission, lease_seconds=0.03)
    stuck, release = threading.Event(), threading.Event()

    def renew_hangs() -> None:
        stuck.set()
        release.wait(60)

    one.loop.admission.renew = renew_hangs
    keeper.start()
    assert stuck.wait(5.0)

    # When the worker stops it
    stopped = threading.Event()

    def stop() -> None:
        keeper.stop()
        stopped.set()

    threading.Thread(target=stop, daemon=True).start()

    # Then the stop gives up after that time, as the other keepers' do, and says so
    try:
        assert stopped.wait(5.0)
    finally:
        release.set()
    assert "the slot keeper did not stop within 0.2 s" in caplog.text


def test_a_limit_unreadable_at_start_is_warned_of_and_its_queue_skipped_not_the_worker(
    backend: Backend, served: Any, caplog: pytest.LogCaptureFixture
):
    cls = job_class(max_running=2)
    CheckpointStore(backend.storage, FakeClock()).ensure()
    backend.storage.records.upsert(layout.LIMITS_TABLE, cls.queue, RUNNING_ROW, {"holders": "{"})
    one = served(cls)  # the worker starts all the same
    assert "a limit of these job types cannot be read" in caplog.text
    one.send(1)
    assert one.receive() == 0 and one.unreceived_dequeues() == [0]
    assert "limits of " + cls.queue + " could not be read, not receiving" in caplog.text


def test_slots_taken_for_a_receive_that_failed_go_back(served: Any):
    plan = Meanwhile()
    one = served(job_class(max_running=2), plan)
    one.send(2)
    plan.busy.add("queues.receive")
    assert one.receive() == 0
    slots = one.book.get(one.cls.queue, one.budget()).running
    assert slots is not None and slots.takers == {}
    plan.busy.clear()
    assert one.receive() == 2


def test_a_message_delivered_again_holds_a_slot_per_delivery(served: Any):
    # Given one message received twice by this worker (its first lease lapsed while the
    # first delivery still ran): each delivery took a slot
    one = served(job_class(max_running=2))
    admission = one.loop.admission
    first = QueueMessage("m-1", b"", 1, one.clock.now(), None, one.clock.now(), "receipt-1")
    again = replace(first, dequeue_count=2, pop_receipt="receipt-2")
    for delivery in (first, again):
        admitted = admission.admit(one.cls, 1)
        admission.received(one.cls, admitted, [delivery])
    assert admission.kept[one.cls.queue] == 2
    # When each ends, then each gives back its own slot
    admission.ended(first)
    assert admission.kept[one.cls.queue] == 1
    admission.ended(again)
    assert admission.kept[one.cls.queue] == 0
