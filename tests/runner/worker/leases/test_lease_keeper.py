"""The lease keeper against the embedded backend's real queues, on a shared FakeClock.

The keeper's thread is never started on a fake clock: tests call ``renew_due`` as the
thread would, advancing the clock by what it returns, and a second consumer on the same
queue shows whether the message really stayed hidden. One test runs on the real clock:
a CPU-bound chunk must not starve the keeper's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock, SystemClock
from checkpoint.errors import LeaseLost, NotFound, Throttled, Unavailable
from checkpoint.storage import QueueMessage, QueueStore, Receipt, Storage
from jobs.job import ChunkedJob
from runner.worker.leases.lease import (
    RENEW_FRACTION,
    RETRY_FRACTION,
    Lease,
    LeaseKeeper,
    renew_after_seconds,
    take_lease,
)

QUEUE = "work"


class RecordingQueues:
    """The real queues, recording each update and delete (with the clock's time) and
    raising or blocking on demand to stand in for a flaky or slow service."""

    def __init__(self, queues: QueueStore, clock: Any):
        self._queues = queues
        self._clock = clock
        # (time, message id, receipt given, new receipt) of each update that succeeded
        self.updates: list[tuple[float, str, str, str]] = []
        self.deletes: list[tuple[float, str]] = []
        self.update_failures: list[Exception] = []
        self.update_entered = threading.Event()
        self.update_gate: threading.Event | None = None
        #: Updates of these messages hang until their event is set (a slow store), and
        #: the messages whose update is hanging now.
        self.hanging: dict[str, threading.Event] = {}
        self.hung: set[str] = set()

    def hang(self, message_id: str) -> threading.Event:
        """Make every update of ``message_id`` hang until the event returned is set."""
        return self.hanging.setdefault(message_id, threading.Event())

    def update(self, queue: str, message_id: str, pop_receipt: str, **kwargs: Any) -> Receipt:
        self.update_entered.set()
        if self.update_gate is not None:
            assert self.update_gate.wait(10), "test never opened the update gate"
        if message_id in self.hanging:
            self.hung.add(message_id)
            assert self.hanging[message_id].wait(10), "test never let the update go on"
            self.hung.discard(message_id)
        if self.update_failures:
            raise self.update_failures.pop(0)
        receipt = self._queues.update(queue, message_id, pop_receipt, **kwargs)
        self.updates.append((self._clock.monotonic(), message_id, pop_receipt, receipt.pop_receipt))
        return receipt

    def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        self._queues.delete(queue, message_id, pop_receipt)
        self.deletes.append((self._clock.monotonic(), pop_receipt))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queues, name)


class Harness:
    """One worker's keeper and a second consumer on one embedded store."""

    def __init__(self, storage: Storage, other: Storage, clock: FakeClock):
        self.clock = clock
        self.storage = storage
        self.other = other
        self.queues = RecordingQueues(storage.queues, clock)
        self.keeper = LeaseKeeper(self.queues, clock)  # type: ignore[arg-type]
        storage.queues.create_queue(QUEUE)

    def receive(self, lease_seconds: int, **options: Any) -> tuple[QueueMessage, Lease]:
        """Send one message and take it under a lease, as the worker loop does."""
        self.storage.queues.send(QUEUE, b"chunk")
        received_at = self.clock.monotonic()
        (message,) = self.storage.queues.receive(QUEUE, visibility_seconds=lease_seconds)
        return message, self.keeper.lease(
            QUEUE, message, lease_seconds, received_at=received_at, **options
        )

    def run_keeper(self, seconds: float) -> None:
        """Let ``seconds`` pass as the keeper's thread would: renew whatever is due, then
        sleep until the next renewal is due."""
        end = self.clock.monotonic() + seconds
        while True:
            wait = self.keeper.renew_due()
            left = end - self.clock.monotonic()
            if left <= 1e-9:
                return
            self.clock.advance(min(wait, left) if wait > 0 else min(0.001, left))

    def others_see(self) -> list[QueueMessage]:
        """What a second worker would receive now (it takes it, as a real worker would)."""
        return self.other.queues.receive(QUEUE, visibility_seconds=600)

    def update_times(self, since: float, message_id: str | None = None) -> list[float]:
        return [
            when - since
            for when, updated, _, _ in self.queues.updates
            if message_id in (None, updated)
        ]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def harness(tmp_path: Path, clock: FakeClock) -> Iterator[Harness]:
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    other = open_storage(str(tmp_path / "store"), clock=clock)
    try:
        yield Harness(storage, other, clock)
    finally:
        other.close()
        storage.close()


# --------------------------------------------------------------------------- renewing


def test_renews_at_seventy_percent_of_the_lease(harness: Harness):
    # Given a message leased for 10 s
    start = harness.clock.monotonic()
    _, lease = harness.receive(10)
    assert harness.keeper.renew_due() == pytest.approx(10 * RENEW_FRACTION)

    # When 6.9 s pass nothing is renewed; at 7 s it is, and every 7 s after
    harness.clock.advance(6.9)
    assert harness.keeper.renew_due() == pytest.approx(0.1)
    assert harness.queues.updates == []
    harness.clock.advance(0.1)
    harness.run_keeper(15)

    # Then renewals happened at 7, 14 and 21 s and the lease now runs to 31 s
    assert harness.update_times(start) == pytest.approx([7, 14, 21])
    assert lease.visible_at - start == pytest.approx(31)
    assert lease.next_renewal_at - start == pytest.approx(28)
    assert not lease.lost


def test_a_received_message_is_leased_under_its_job_class(harness: Harness):
    # Given a job class with its own lease length and chunk time cap
    class Capped(ChunkedJob):
        lease_seconds = 12
        max_chunk_seconds = 90.0

    harness.storage.queues.send(QUEUE, b"chunk")
    received_at = harness.clock.monotonic()
    (message,) = harness.storage.queues.receive(QUEUE, visibility_seconds=12)
    # When the keeper takes the message's lease for that class, as the worker loop does
    lease = take_lease(harness.keeper, QUEUE, message, Capped, received_at)
    # Then the lease has the class's length, cap and job type, counted from the receive
    assert (lease.lease_seconds, lease.max_seconds) == (12, 90.0)
    assert lease.job_type == Capped.job_type()
    assert lease.visible_at == received_at + 12
    assert harness.keeper.leased() == [lease]


@pytest.mark.parametrize(
    ("lease_seconds", "renew_after"),
    [(30, 21.0), (10, 7.0), (8, 5.0), (5, 2.5), (2, 1.0), (1, 0.5)],
)
def test_a_short_lease_is_renewed_early_enough_for_a_slow_renewal(
    harness: Harness, lease_seconds: int, renew_after: float
):
    # 70 % of a long lease; a short one keeps 3 s for the renewal, renewing no earlier
    # than half way (a 5 s lease at 2.5 s, not at 3.5 s)
    assert renew_after_seconds(lease_seconds) == pytest.approx(renew_after)
    start = harness.clock.monotonic()
    _, lease = harness.receive(lease_seconds)
    harness.run_keeper(lease_seconds * 1.6)
    assert harness.update_times(start)[:2] == pytest.approx([renew_after, 2 * renew_after])


def test_a_renewed_message_stays_hidden_from_other_workers(harness: Harness):
    # Given a message leased for 4 s, renewed for 20 s
    _, lease = harness.receive(4)
    harness.run_keeper(20)
    # Then no other worker could take it meanwhile, nor now
    assert harness.others_see() == []
    assert not lease.expired(harness.clock.monotonic())

    # When the keeper stops renewing it, it reappears once its last renewal runs out
    harness.keeper.drop(lease)
    harness.clock.advance(lease.visible_at - harness.clock.monotonic() - 0.01)
    assert harness.others_see() == []
    harness.clock.advance(0.02)
    assert len(harness.others_see()) == 1


def test_always_keeps_the_newest_pop_receipt(harness: Harness):
    # Given a leased message renewed twice
    message, lease = harness.receive(10)
    renewed: list[str] = []
    lease.on_renewed = lambda renewed_lease: renewed.append(renewed_lease.pop_receipt)
    harness.run_keeper(15)
    (_, _, first, second), (_, _, given, third) = harness.queues.updates

    # Then each renewal used the receipt the previous one returned, the lease holds the
    # newest, and on_renewed saw each new one
    assert first == message.pop_receipt
    assert given == second
    assert lease.pop_receipt == third
    assert renewed == [second, third]

    # and the older receipts no longer work on the real queue, the newest does
    for stale in (first, second):
        with pytest.raises(LeaseLost, match="stale"):
            harness.storage.queues.update(QUEUE, message.id, stale, visibility_seconds=10)
    assert harness.keeper.delete(lease) is True
    assert harness.storage.queues.approximate_length(QUEUE) == 0


def test_renews_several_leases_each_on_its_own_schedule(harness: Harness):
    start = harness.clock.monotonic()
    _, short = harness.receive(10)
    harness.clock.advance(1)
    _, long = harness.receive(20)

    harness.run_keeper(22)

    # Then the 10 s lease was renewed every 7 s and the 20 s one at 14 s after it began
    assert harness.update_times(start, short.message_id) == pytest.approx([7, 14, 21])
    assert harness.update_times(start, long.message_id) == pytest.approx([15])
    assert not short.lost and not long.lost


def test_no_lease_means_a_long_wait(harness: Harness):
    assert harness.keeper.renew_due() == 3600.0


# --------------------------------------------------------------------------- max_seconds


def test_stops_renewing_past_max_seconds_and_marks_lost(harness: Harness):
    # Given a 10 s lease on a chunk allowed 25 s in all
    start = harness.clock.monotonic()
    _, lease = harness.receive(10, max_seconds=25)

    # When the keeper runs for 30 s
    harness.run_keeper(30)

    # Then it renewed at 7, 14 and 21 s, and at 28 s gave up: lost, not renewed
    assert harness.update_times(start) == pytest.approx([7, 14, 21])
    assert lease.lost
    assert "max_chunk_seconds" in (lease.lost_reason or "")
    assert lease.expired(harness.clock.monotonic())
    # and the message comes back to other workers when the last renewal runs out (31 s)
    assert harness.others_see() == []
    harness.clock.advance(start + 31 + 0.001 - harness.clock.monotonic())
    assert len(harness.others_see()) == 1
    # Further passes leave the lost lease alone
    harness.run_keeper(10)
    assert len(harness.queues.updates) == 3


# --------------------------------------------------------------------------- losing


def test_a_refused_renewal_marks_the_lease_lost(harness: Harness):
    # Given a leased message whose lease ran out before the keeper got to it (a pause)
    message, lease = harness.receive(5)
    harness.clock.advance(6)
    assert lease.expired(harness.clock.monotonic())
    # and that another worker has taken meanwhile
    (taken,) = harness.others_see()
    assert taken.id == message.id

    # When the keeper tries to renew it
    harness.keeper.renew_due()

    # Then the renewal is refused, the lease is lost, and it is never tried again
    assert lease.lost
    assert "renewal refused" in (lease.lost_reason or "")
    assert harness.queues.updates == []
    assert harness.keeper.renew_due() == 3600.0
    # and the other worker's receipt still works: the keeper did not disturb it
    assert taken.pop_receipt is not None
    harness.other.queues.delete(QUEUE, taken.id, taken.pop_receipt)


def test_a_renewal_of_a_deleted_message_marks_the_lease_lost(harness: Harness):
    message, lease = harness.receive(5)
    harness.storage.queues.delete(QUEUE, message.id, lease.pop_receipt)
    harness.run_keeper(4)
    assert lease.lost
    assert "no longer in queue" in (lease.lost_reason or "")


@pytest.mark.parametrize("error", [Throttled("busy"), Unavailable("unreachable")])
def test_a_transient_failure_is_retried_at_ten_percent(harness: Harness, error: Exception):
    # Given a 10 s lease whose first renewal (at 7 s) fails once
    start = harness.clock.monotonic()
    _, lease = harness.receive(10)
    harness.queues.update_failures.append(error)

    # When the keeper runs on
    harness.run_keeper(7)
    assert lease.next_renewal_at - start == pytest.approx(7 + 10 * RETRY_FRACTION)
    harness.run_keeper(2)

    # Then it retried 1 s later, succeeded, and the lease goes on
    assert harness.update_times(start) == pytest.approx([8])
    assert not lease.lost
    assert lease.visible_at - start == pytest.approx(18)


def test_renewals_failing_until_the_lease_runs_out_lose_it(harness: Harness):
    # Given a 10 s lease and a service that fails every renewal
    start = harness.clock.monotonic()
    _, lease = harness.receive(10)
    attempts: list[float] = []

    def failing(*_args: Any, **_kwargs: Any) -> Receipt:
        attempts.append(harness.clock.monotonic() - start)
        raise Throttled("server busy")

    harness.queues.update = failing  # type: ignore[method-assign]

    # When the keeper keeps trying
    harness.run_keeper(9.5)
    assert not lease.lost  # still within the lease: keep trying
    harness.run_keeper(5)

    # Then it tried at 7, 8, 9 and, last, at the lease's end (10 s), then gave up
    assert attempts == pytest.approx([7, 8, 9, 10])
    assert lease.lost
    assert "ran out" in (lease.lost_reason or "")


def test_a_lease_past_its_end_is_expired_even_before_the_keeper_notices(harness: Harness):
    _, lease = harness.receive(3)
    harness.clock.advance(2.99)
    assert not lease.expired(harness.clock.monotonic())
    harness.clock.advance(0.01)
    assert lease.expired(harness.clock.monotonic())
    assert not lease.lost
    assert "ran out" in lease.why_lost(harness.clock.monotonic())


# --------------------------------------------------------------------------- finishing


def test_delete_uses_the_newest_receipt_and_ends_renewals(harness: Harness):
    _, lease = harness.receive(10)
    harness.run_keeper(22)  # renewed at 7, 14, 21
    assert len(harness.queues.updates) == 3

    assert harness.keeper.delete(lease) is True

    assert harness.queues.deletes == [(harness.clock.monotonic(), harness.queues.updates[-1][3])]
    assert harness.storage.queues.approximate_length(QUEUE) == 0
    assert harness.keeper.leased() == []
    harness.run_keeper(20)
    assert len(harness.queues.updates) == 3


def test_release_makes_the_message_visible_at_once_with_the_newest_receipt(harness: Harness):
    message, lease = harness.receive(10)
    harness.run_keeper(15)  # renewed at 7 and 14

    assert harness.keeper.release(lease) is True

    (again,) = harness.others_see()
    assert again.id == message.id and again.dequeue_count == 2
    harness.run_keeper(20)
    assert len(harness.queues.updates) == 3  # two renewals, one release; then nothing


def test_release_with_a_delay_keeps_it_hidden_that_long(harness: Harness):
    _, lease = harness.receive(4)
    assert harness.keeper.release(lease, 30) is True
    harness.clock.advance(29.9)
    assert harness.others_see() == []
    harness.clock.advance(0.1)
    assert len(harness.others_see()) == 1


def test_finish_does_nothing_for_a_lost_lease(harness: Harness):
    _, lease = harness.receive(4)
    lease.lose("someone else has it")
    called: list[str] = []
    assert harness.keeper.finish(lease, called.append, "acting on") is False
    assert called == []
    assert harness.keeper.leased() == []


def test_finish_on_a_message_taken_by_another_worker_marks_lost(harness: Harness):
    _, lease = harness.receive(2)
    harness.clock.advance(3)  # no renewal: it lapses
    assert len(harness.others_see()) == 1

    assert harness.keeper.delete(lease) is False
    assert lease.lost
    assert harness.queues.deletes == []


def test_drop_stops_renewing_without_touching_the_message(harness: Harness):
    _, lease = harness.receive(4)
    harness.keeper.drop(lease)
    harness.run_keeper(10)
    assert harness.queues.updates == [] and harness.queues.deletes == []
    assert len(harness.others_see()) == 1  # it lapsed and came back


def test_finish_waits_for_a_renewal_in_flight_and_uses_its_receipt(harness: Harness):
    # Given a renewal that is inside its UpdateMessage call (on the keeper's thread)
    _, lease = harness.receive(10)
    harness.clock.advance(7)
    harness.queues.update_gate = threading.Event()
    renewing = threading.Thread(target=harness.keeper.renew_due)
    renewing.start()
    assert harness.queues.update_entered.wait(10)

    # When the chunk's thread deletes the message meanwhile
    result: list[bool] = []
    deleting = threading.Thread(target=lambda: result.append(harness.keeper.delete(lease)))
    deleting.start()

    # Then the delete waits for the renewal (it would use a receipt about to go stale) ...
    deleting.join(0.3)
    assert deleting.is_alive() and harness.queues.deletes == []
    harness.queues.update_gate.set()
    renewing.join(10)
    deleting.join(10)

    # ... and then deletes with the receipt the renewal returned
    assert result == [True]
    ((_, _, _, newest),) = harness.queues.updates
    assert harness.queues.deletes[0][1] == newest
    assert harness.storage.queues.approximate_length(QUEUE) == 0


def test_no_renewal_runs_once_finish_has_begun(harness: Harness):
    # Given a release whose UpdateMessage is slow (the lease is due for renewal meanwhile)
    _, lease = harness.receive(10)
    harness.clock.advance(8)
    harness.queues.update_gate = threading.Event()
    releasing = threading.Thread(target=harness.keeper.release, args=(lease,))
    releasing.start()
    assert harness.queues.update_entered.wait(10)

    # When the keeper makes a pass meanwhile, it leaves the lease alone
    harness.keeper.renew_due()
    harness.queues.update_gate.set()
    releasing.join(10)

    # Then the only update was the release (visibility 0): the message is back
    assert len(harness.queues.updates) == 1
    assert len(harness.others_see()) == 1


def test_a_lease_let_go_while_its_renewal_waits_is_not_renewed(harness: Harness):
    # Given a renewal picked for a due lease, waiting for the lease's lock (the chunk's
    # thread holds it, as finish does while it deletes the message)
    _, lease = harness.receive(10)
    harness.clock.advance(8)
    with lease.lock:
        (renewal,) = harness.keeper.start_due()
        # When the chunk's thread lets the lease go meanwhile
        lease.active = False

    # Then the renewal finds it let go: no UpdateMessage, nothing to refresh
    assert renewal.result(timeout=10) is None
    assert harness.queues.updates == []


# --------------------------------------------------------------------------- thread


def test_keeper_thread_starts_and_stops_idempotently(tmp_path: Path):
    storage = open_storage(str(tmp_path / "store"))
    try:
        keeper = LeaseKeeper(storage.queues, SystemClock())
        keeper.start()
        keeper.start()
        keeper.stop()
        keeper.stop()
    finally:
        storage.close()


def _busy(seconds: float) -> int:
    """Pure-Python work holding the GIL as much as Python lets it: no I/O, no sleeps."""
    end = time.monotonic() + seconds
    spins = 0
    while True:
        for _ in range(10_000):
            spins += 1
        if time.monotonic() >= end:
            return spins


def test_a_cpu_bound_chunk_does_not_starve_renewals(tmp_path: Path):
    # Given a real-time worker holding a message under a 2 s lease, its keeper running
    clock = SystemClock()
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    other = open_storage(str(tmp_path / "store"), clock=clock)
    queues = RecordingQueues(storage.queues, clock)
    keeper = LeaseKeeper(queues, clock)  # type: ignore[arg-type]
    try:
        storage.queues.create_queue(QUEUE)
        storage.queues.send(QUEUE, b"cpu-bound chunk")
        received_at = clock.monotonic()
        (message,) = storage.queues.receive(QUEUE, visibility_seconds=2)
        lease = keeper.lease(QUEUE, message, 2, received_at=received_at)
        keeper.start()

        # When a chunk spins in pure Python for ~6 s (three leases) on its own thread
        chunk = threading.Thread(target=_busy, args=(6.0,), name="chunk")
        chunk.start()
        seen_by_other: list[QueueMessage] = []
        while chunk.is_alive():
            seen_by_other += other.queues.peek(QUEUE, max_messages=32)
            chunk.join(0.25)

        # Then a second worker never saw the message, not even now
        assert seen_by_other == []
        assert other.queues.receive(QUEUE, visibility_seconds=60) == []
        # because the keeper kept renewing it (about every 1.4 s; loose bounds)
        assert len(queues.updates) >= 2
        assert not lease.lost
        assert keeper.delete(lease) is True
    finally:
        keeper.stop()
        other.close()
        storage.close()


# --------------------------------------------------------------------------- the pools


def _eventually(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether ``condition`` comes true within ``seconds`` of real time: the keeper's
    thread makes a pass at least once a real second, whatever the fake clock says."""
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= end:
            return False
        time.sleep(0.01)
    return True


def test_one_hanging_renewal_does_not_hold_up_the_others(harness: Harness):
    # Given two leases due together, and a store whose answer to one's renewal hangs
    start = harness.clock.monotonic()
    _, hanging = harness.receive(10)
    _, other = harness.receive(10)
    answer = harness.queues.hang(hanging.message_id)
    harness.keeper.start()
    try:
        # When their renewals fall due, and again a renewal later
        for renewals in (1, 2):
            harness.clock.advance(7)
            # Then the other lease is renewed each time, the first call still hanging
            assert _eventually(
                lambda n=renewals: (
                    len(harness.update_times(start, other.message_id)) == n
                    and hanging.message_id in harness.queues.hung
                )
            ), f"renewal {renewals} of the other lease was held up by the hanging one"
        assert harness.update_times(start, other.message_id) == pytest.approx([7, 14])
        assert harness.update_times(start, hanging.message_id) == []
    finally:
        answer.set()
        # And the hanging renewal, once answered, renews its own lease (from when it
        # began: to 17 s, and on from there as it falls due again)
        assert _eventually(lambda: harness.update_times(start, hanging.message_id) != [])
        harness.keeper.stop()
    assert hanging.visible_at - start >= 17 and not hanging.lost


def test_a_hanging_refresh_does_not_hold_up_renewals_nor_other_refreshes(harness: Harness):
    # Given two leases due together, the refresh after one's renewal (its task record's
    # write) hanging on the store
    start = harness.clock.monotonic()
    store_answers = threading.Event()
    hanging_calls: list[float] = []
    refreshed: list[float] = []

    def hanging_refresh(lease: Lease) -> None:
        hanging_calls.append(lease.visible_at - start)
        assert store_answers.wait(10), "test never let the refresh go on"

    _, hanging = harness.receive(10, on_renewed=hanging_refresh)
    _, other = harness.receive(10, on_renewed=lambda lease: refreshed.append(lease.visible_at))
    harness.keeper.start()
    try:
        # When their renewals fall due, and again a renewal later
        for renewals in (1, 2):
            harness.clock.advance(7)
            # Then both are renewed each time, and the other one refreshed each time
            assert _eventually(
                lambda n=renewals: (
                    [
                        len(harness.update_times(start, lease.message_id))
                        for lease in (hanging, other)
                    ]
                    == [n, n]
                    and len(refreshed) == n
                )
            ), f"renewal {renewals} was held up by a hanging refresh"
        assert [when - start for when in refreshed] == pytest.approx([17, 24])
        # while the hanging refresh took one thread, and was not started a second time
        assert hanging_calls == pytest.approx([17])
    finally:
        store_answers.set()
        # And once it is answered, it runs once more for the renewal made meanwhile
        assert _eventually(lambda: len(hanging_calls) == 2)
        harness.keeper.stop()
    assert hanging_calls == pytest.approx([17, 24])


def test_a_refresh_waiting_for_a_thread_is_skipped_once_its_lease_is_let_go(
    harness: Harness,
):
    # Given a keeper with one refresh thread, taken by a lease's hanging refresh
    harness.keeper = LeaseKeeper(harness.queues, harness.clock, refresh_threads=1)  # type: ignore[arg-type]
    entered, go_on = threading.Event(), threading.Event()
    called: list[Lease] = []

    def hanging_refresh(lease: Lease) -> None:
        entered.set()
        assert go_on.wait(10)

    _, first = harness.receive(10, on_renewed=hanging_refresh)
    _, second = harness.receive(10, on_renewed=called.append)
    second_answer = harness.queues.hang(second.message_id)
    harness.clock.advance(7)
    renewals = harness.keeper.start_due()
    assert entered.wait(10)

    # When the second lease's renewal ends, its refresh waits for the thread; the lease
    # is let go meanwhile (its chunk ended)
    second_answer.set()
    refreshes = [renewal.result(10) for renewal in renewals]
    harness.keeper.drop(second)
    go_on.set()
    for refresh in refreshes:
        assert refresh is not None
        refresh.result(10)

    # Then its refresh did nothing; both leases were renewed
    assert called == []
    assert len(harness.queues.updates) == 2


def test_a_renewal_that_raises_unexpectedly_is_logged_and_tried_again_later(
    harness: Harness, caplog: pytest.LogCaptureFixture
):
    # Given a lease whose renewal raises what no store should (a bug)
    start = harness.clock.monotonic()
    _, lease = harness.receive(10)
    harness.queues.update_failures.append(RuntimeError("a bug"))
    harness.clock.advance(7)

    # When the keeper makes its pass
    with caplog.at_level(logging.ERROR, logger="runner.worker.leases.lease"):
        wait = harness.keeper.renew_due()

    # Then the failure is logged, the lease kept, and the renewal tried again a tenth of
    # a lease later, when it succeeds
    assert f"renewing message {lease.message_id} failed" in caplog.text
    assert not lease.lost and wait == pytest.approx(10 * RETRY_FRACTION)
    harness.run_keeper(1)
    assert harness.update_times(start) == pytest.approx([8])


def test_drop_is_safe_for_a_lease_never_taken(harness: Harness):
    # A lease the keeper no longer has (dropped twice, or finished first) is ignored
    _, lease = harness.receive(4)
    assert harness.keeper.delete(lease) is True
    harness.keeper.drop(lease)
    harness.keeper.drop(lease)
    assert harness.keeper.leased() == []


def test_deleting_an_unknown_message_is_lease_lost(harness: Harness):
    with pytest.raises(LeaseLost):
        harness.storage.queues.delete(QUEUE, "no-such-id", "receipt")
    with pytest.raises(NotFound):
        harness.storage.queues.delete("no-such-queue", "no-such-id", "receipt")


class LossCounter:
    """A recorder counting lost leases (the one event these tests read)."""

    def __init__(self) -> None:
        self.lost = 0

    def lease_lost(self, job_type: str) -> None:
        self.lost += 1

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class MeetingLease(Lease):
    """A lease whose ``lost`` flag, read while still clear, waits there for a second
    reader (up to ``meet_seconds``): two losses made at once both read it clear."""

    meet_seconds = 1.0
    readers: threading.Barrier

    @property
    def lost(self) -> bool:
        value = self._lost
        if not value:
            try:
                self.readers.wait(self.meet_seconds)
            except threading.BrokenBarrierError:
                pass  # the other reader did not come: the flag is read under a lock
        return value

    @lost.setter
    def lost(self, value: bool) -> None:
        self._lost = value


def test_a_lease_lost_by_two_threads_at_once_is_counted_once():
    # Given a lease whose loss is seen by two threads at the same moment (a refused
    # renewal and the finisher's fenced done mark)
    recorder = LossCounter()
    lease = MeetingLease("q", "m", "r", 30, 0.0, 30.0, recorder=recorder)
    lease.readers = threading.Barrier(2)
    threads = [
        threading.Thread(target=lease.lose, args=(reason,))
        for reason in ("renewal refused", "fenced")
    ]

    # When both mark it lost
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    # Then it is lost once, for one reason
    assert recorder.lost == 1
    assert lease.lost and lease.lost_reason in ("renewal refused", "fenced")
