"""The lease keeper when storage fails: renewals, deletes and releases, on both backends.

The keeper runs over :class:`~checkpoint.testing.faults.FaultyStorage` with scripted faults, on a
:class:`FakeClock` that the tests advance: renewals are driven by calling ``renew_due``
as the keeper's thread would. On the embedded store the same clock moves the queue's
time; on Azurite the queue keeps real time, and every lease is far longer than a test,
so a message stays invisible however far the fake clock moves.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import LeaseLost, StorageError, Throttled
from checkpoint.storage import QueueStore, Storage
from checkpoint.testing.faults import FaultyStorage, ScriptedFaults
from runner.worker.leases.lease import RENEW_FRACTION, RETRY_FRACTION, Lease, LeaseKeeper
from tests.backends import BACKENDS

LEASE_SECONDS = 60


@dataclass
class World:
    """A keeper over faulty queues, and the plain storage to look at what is there."""

    clock: FakeClock
    storage: Storage
    faults: ScriptedFaults
    faulty: FaultyStorage
    keeper: LeaseKeeper
    queues: list[str]

    @property
    def queue(self) -> str:
        return self.queues[0]

    def new_queue(self) -> str:
        name = f"q-{uuid.uuid4().hex[:12]}"
        self.storage.queues.create_queue(name)
        self.queues.append(name)
        return name

    def leased(self, queue: str | None = None, **options: Any) -> Lease:
        """A message sent and received under a lease, as the worker loop leases it."""
        queue = queue or self.queue
        self.storage.queues.send(queue, b"chunk")
        received_at = self.clock.monotonic()
        (message,) = self.storage.queues.receive(queue, visibility_seconds=LEASE_SECONDS)
        return self.keeper.lease(queue, message, LEASE_SECONDS, received_at=received_at, **options)

    def messages(self, queue: str | None = None) -> int:
        return self.storage.queues.approximate_length(queue or self.queue)

    def calls(self, name: str) -> int:
        return self.faulty.counts.calls[name]

    def advance_to(self, monotonic: float) -> None:
        self.clock.advance(max(0.0, monotonic - self.clock.monotonic()))


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    clock = FakeClock()
    if request.param == "embedded":
        storage = open_storage(str(tmp_path / "store"), clock=clock)
    else:
        server = request.getfixturevalue("azurite")
        storage = open_storage(server.connection_string, azure_retry_total=1)
    faults = ScriptedFaults()
    faulty = FaultyStorage(storage, faults, sleep=clock.sleep)
    subject = World(clock, storage, faults, faulty, LeaseKeeper(faulty.storage.queues, clock), [])
    subject.new_queue()
    try:
        yield subject
        assert faults.pending == [], "a scripted fault never happened"
    finally:
        for queue in subject.queues:
            storage.queues.delete_queue(queue)
        storage.close()


# --------------------------------------------------------------------------- renewals


def test_a_busy_renewal_is_retried_a_tenth_of_a_lease_later_and_then_renews(world: World):
    # Given a lease due for renewal, and a store that is busy once
    lease = world.leased()
    first_receipt = lease.pop_receipt
    world.faults.add("queues.update", "busy")
    world.advance_to(lease.next_renewal_at)
    failed_at = world.clock.monotonic()

    # When the keeper renews it
    world.keeper.renew_due()

    # Then the lease is kept, with a retry a tenth of a lease later
    assert not lease.lost
    assert lease.next_renewal_at == pytest.approx(failed_at + LEASE_SECONDS * RETRY_FRACTION)
    assert lease.pop_receipt == first_receipt
    # and that retry renews it for a whole lease from its own start
    world.advance_to(lease.next_renewal_at)
    renewed_at = world.clock.monotonic()
    world.keeper.renew_due()
    assert not lease.lost and lease.pop_receipt != first_receipt
    assert lease.visible_at == pytest.approx(renewed_at + LEASE_SECONDS)
    assert lease.next_renewal_at == pytest.approx(renewed_at + LEASE_SECONDS * RENEW_FRACTION)
    assert world.storage.queues.receive(world.queue) == []  # still hidden from others


def test_renewals_failing_until_the_lease_runs_out_lose_it(world: World):
    # Given a lease whose every renewal finds the store busy
    lease = world.leased()
    start = lease.acquired_at
    for _ in range(4):
        world.faults.add("queues.update", "busy")

    # When the keeper keeps trying until the lease has run out
    tried_at = []
    while not lease.lost and len(tried_at) < 5:
        world.advance_to(lease.next_renewal_at)
        tried_at.append(world.clock.monotonic() - start)
        world.keeper.renew_due()

    # Then it tried at 70 %, then every 10 %, and gave up at the lease's end
    assert tried_at == pytest.approx(
        [0.7 * LEASE_SECONDS, 0.8 * LEASE_SECONDS, 0.9 * LEASE_SECONDS, LEASE_SECONDS]
    )
    assert lease.lost and lease.expired(world.clock.monotonic())
    assert "renewals failed until the lease ran out" in lease.why_lost(world.clock.monotonic())
    assert "ServerBusy" in (lease.lost_reason or "")


def test_a_renewal_refused_after_the_lease_ran_out_loses_the_lease(world: World):
    # Given a worker paused past its lease: its renewal (applied, the answer lost) is
    # retried by the SDK and meets the receipt it rotated itself
    lease = world.leased()
    world.advance_to(lease.visible_at + 1)
    world.faults.add("queues.update", "ambiguous")

    # When the keeper renews it
    world.keeper.renew_due()

    # Then the stale receipt is not taken for our own applied renewal (the lease had run
    # out: someone else may hold the message now): the lease is lost
    assert lease.lost and not lease.receipt_lost
    assert lease.why_lost(world.clock.monotonic()).startswith("renewal refused")


def test_a_renewal_of_a_message_deleted_by_someone_else_loses_the_lease(world: World):
    lease = world.leased()
    world.storage.queues.delete(world.queue, lease.message_id, lease.pop_receipt)
    world.advance_to(lease.next_renewal_at)

    world.keeper.renew_due()

    assert lease.lost
    assert "renewal refused" in (lease.lost_reason or "")
    # and a lost lease is never renewed again: the keeper only waits
    assert world.keeper.renew_due() == 3600.0
    assert world.calls("queues.update") == 1


def test_a_lease_whose_receipt_was_lost_is_never_renewed_again(world: World):
    # Given a renewal applied with its answer lost (the receipt is unknown now)
    lease = world.leased()
    world.faults.add("queues.update", "ambiguous")
    world.advance_to(lease.next_renewal_at)
    world.keeper.renew_due()
    assert lease.receipt_lost and not lease.lost

    # When time passes up to the lease's end
    world.advance_to(lease.visible_at - 0.5)
    world.keeper.renew_due()

    # Then no renewal was tried with a receipt known to be stale (the first update and
    # the SDK's retry of it are the only calls), and the chunk is told to hand back
    assert world.calls("queues.update") == 1
    assert lease.must_hand_back(world.clock.monotonic())
    assert not lease.expired(world.clock.monotonic())


class RecordLease:
    """A task's ``on_record`` hook: records each extension asked for, failing on demand."""

    def __init__(self) -> None:
        self.until: list[float] = []
        self.failures: list[Exception] = []

    def __call__(self, lease: Lease, until: float) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.until.append(until)


def _receipt_lost_leased_on_record(world: World) -> tuple[Lease, RecordLease]:
    on_record = RecordLease()
    lease = world.leased()
    lease.on_record = on_record  # as the runner sets it for a claimed finalize
    world.faults.add("queues.update", "ambiguous")
    world.advance_to(lease.next_renewal_at)
    world.keeper.renew_due()
    assert lease.receipt_lost and not lease.lost
    return lease, on_record


def test_a_lease_on_its_record_is_marked_there_at_once_then_extended(world: World):
    # Given a finalize's lease whose renewal was applied with its answer lost
    lease, on_record = _receipt_lost_leased_on_record(world)

    # When the keeper's next pass comes (at once), then on the usual schedule
    marked_at = world.clock.monotonic()
    world.keeper.renew_due()
    assert on_record.until == [pytest.approx(marked_at + LEASE_SECONDS)]
    assert lease.visible_at == pytest.approx(marked_at + LEASE_SECONDS)
    world.advance_to(lease.next_renewal_at)
    extended_at = world.clock.monotonic()
    assert extended_at == pytest.approx(marked_at + LEASE_SECONDS * RENEW_FRACTION)
    world.keeper.renew_due()

    # Then the record leased it a lease at a time, with no UpdateMessage after the lost one,
    # and the task is never asked to hand back: it goes on past the message's own end
    assert on_record.until[-1] == pytest.approx(extended_at + LEASE_SECONDS)
    assert world.calls("queues.update") == 1
    world.advance_to(marked_at + LEASE_SECONDS + 1)
    assert not lease.must_hand_back(world.clock.monotonic())
    assert not lease.expired(world.clock.monotonic()) and not lease.lost


def test_a_lease_on_a_record_someone_took_over_is_lost(world: World):
    lease, on_record = _receipt_lost_leased_on_record(world)
    on_record.failures.append(LeaseLost("task record changed: fenced"))

    world.keeper.renew_due()

    assert lease.lost and "leasing the task on its record failed" in (lease.lost_reason or "")


def test_a_record_lease_the_store_refuses_is_retried_until_the_lease_runs_out(world: World):
    lease, on_record = _receipt_lost_leased_on_record(world)
    end = lease.visible_at
    on_record.failures.extend(Throttled("busy") for _ in range(50))

    while not lease.lost and world.clock.monotonic() < end + 1:
        world.keeper.renew_due()
        world.advance_to(lease.next_renewal_at)

    assert lease.lost and "renewals failed until the lease ran out" in (lease.lost_reason or "")
    assert on_record.until == []


def test_one_lease_whose_renewal_hook_fails_does_not_cost_the_others_their_renewal(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given two leases due at once, one of them with a hook that raises after renewing
    def broken(lease: Lease) -> None:
        raise RuntimeError("hook failed")

    bad = world.leased(on_renewed=broken)
    good = world.leased()
    receipts = {bad: bad.pop_receipt, good: good.pop_receipt}
    world.advance_to(max(bad.next_renewal_at, good.next_renewal_at))

    # When the keeper makes its pass
    with caplog.at_level(logging.ERROR, logger="runner.worker.leases.lease"):
        world.keeper.renew_due()

    # Then both were renewed, whichever came first, and the failure was logged
    assert all(lease.pop_receipt != receipts[lease] for lease in (bad, good))
    assert not bad.lost and not good.lost
    assert f"after renewing message {bad.message_id}, its on_renewed hook failed" in caplog.text


def test_a_lease_past_max_seconds_is_lost_without_a_renewal(world: World):
    lease = world.leased(max_seconds=LEASE_SECONDS * 0.5)
    world.advance_to(lease.next_renewal_at)

    world.keeper.renew_due()

    assert lease.lost and "max_chunk_seconds" in (lease.lost_reason or "")
    assert world.calls("queues.update") == 0
    # the message is left to reappear when its current visibility ends
    assert lease.next_renewal_at == lease.visible_at
    assert world.messages() == 1


# --------------------------------------------------------------------------- deletes


def test_a_busy_delete_is_retried_while_the_lease_lasts(world: World):
    lease = world.leased()
    world.faults.add("queues.delete", "busy")
    world.faults.add("queues.delete", "busy")

    assert world.keeper.delete(lease) is True

    assert world.messages() == 0
    assert world.calls("queues.delete") == 3
    assert len(world.clock.sleeps) == 2  # the budget waited on the clock, not for real
    assert world.keeper.leased() == []


def test_a_delete_still_busy_when_the_lease_runs_out_says_so_and_keeps_the_message(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given a lease about to run out, and a busy store
    lease = world.leased()
    world.advance_to(lease.visible_at - 0.1)
    world.faults.add("queues.delete", "busy")

    # When the message is deleted, the budget allows no second try: no exception, one
    # warning line (storage trouble is not a bug in the task that asked)
    with caplog.at_level(logging.WARNING, logger="runner.worker.leases.lease"):
        assert world.keeper.delete(lease) is False

    # Then the message is still there (it reappears), and the keeper no longer holds it
    assert world.messages() == 1
    assert world.keeper.leased() == [] and not lease.active and not lease.lost
    assert world.calls("queues.delete") == 1
    (line,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.exc_info is None
    assert "deleting message" in line.getMessage()
    assert "comes back when its lease runs out" in line.getMessage()


def test_a_release_still_busy_when_the_lease_runs_out_leaves_the_message_to_lapse(
    world: World,
):
    lease = world.leased()
    world.advance_to(lease.visible_at - 0.1)
    world.faults.add("queues.update", "busy")

    assert world.keeper.release(lease) is False

    assert world.keeper.leased() == [] and not lease.active
    assert world.calls("queues.update") == 1


def test_deleting_a_message_someone_else_deleted_loses_the_lease(world: World):
    lease = world.leased()
    world.storage.queues.delete(world.queue, lease.message_id, lease.pop_receipt)

    assert world.keeper.delete(lease) is False

    assert lease.lost


def test_a_lease_whose_receipt_was_lost_deletes_and_releases_nothing(world: World):
    lease = world.leased()
    world.faults.add("queues.update", "ambiguous")
    world.advance_to(lease.next_renewal_at)
    world.keeper.renew_due()
    assert lease.receipt_lost

    assert world.keeper.delete(lease) is False
    assert world.keeper.release(lease) is False

    assert world.calls("queues.delete") == 0
    assert world.calls("queues.update") == 1  # the renewal; the release made no call
    assert world.messages() == 1


# --------------------------------------------------------------------------- releases


def test_a_busy_release_is_retried_and_the_message_comes_back(world: World):
    lease = world.leased()
    world.faults.add("queues.update", "busy")

    assert world.keeper.release(lease) is True

    assert world.calls("queues.update") == 2
    (again,) = world.storage.queues.receive(world.queue)
    assert again.id == lease.message_id


def test_releasing_a_message_someone_else_deleted_loses_the_lease(world: World):
    lease = world.leased()
    world.storage.queues.delete(world.queue, lease.message_id, lease.pop_receipt)

    assert world.keeper.release(lease) is False

    assert lease.lost and world.keeper.leased() == []


# --------------------------------------------------------------------------- many deletes


def test_delete_many_leaves_a_lost_lease_alone_and_deletes_the_rest(world: World):
    lost, kept = world.leased(), world.leased()
    lost.lose("another worker took over the chunk")

    world.keeper.delete_many([lost, kept])

    # The lost lease's message is still there (someone else's to delete now)
    assert world.messages() == 1
    world.storage.queues.delete(world.queue, lost.message_id, lost.pop_receipt)
    assert world.messages() == 0


def test_delete_many_marks_a_message_deleted_meanwhile_as_lost(world: World):
    gone, kept = world.leased(), world.leased()
    world.storage.queues.delete(world.queue, gone.message_id, gone.pop_receipt)

    world.keeper.delete_many([gone, kept])

    assert gone.lost and not kept.lost
    assert world.messages() == 0
    assert world.keeper.leased() == []


def test_delete_many_past_the_leases_goes_on_with_the_next_queue(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given leases on two queues, about to run out, and one busy batch delete
    other_queue = world.new_queue()
    first, second = world.leased(), world.leased(other_queue)
    world.advance_to(min(first.visible_at, second.visible_at) - 0.1)
    world.faults.add("queues.delete_many", "busy")

    # When both are deleted
    with caplog.at_level(logging.WARNING, logger="runner.worker.leases.lease"):
        world.keeper.delete_many([first, second])

    # Then the busy queue's message stays (it reappears), the other queue's is deleted,
    # and the failure is logged, not raised into the finisher
    assert world.messages(world.queue) == 1
    assert world.messages(other_queue) == 0
    assert "deleting 1 message(s) from" in caplog.text
    assert not first.active and not first.lost


def test_delete_many_with_a_lost_receipt_leaves_that_message_to_come_back(world: World):
    # Given one lease whose receipt was lost to an applied renewal, and one sound lease
    stale, sound = world.leased(), world.leased()
    world.faults.add("queues.update", "ambiguous")
    stale.next_renewal_at = world.clock.monotonic()
    world.keeper.renew_due()
    assert stale.receipt_lost and not sound.receipt_lost

    # When both chunks are done and their messages deleted together
    world.keeper.delete_many([stale, sound])

    # Then the sound one is gone and the stale one stays, to be deleted unrun when it
    # comes back (its chunk is done)
    assert world.messages() == 1
    assert not sound.lost


class OneFailingDelete:
    """Queues whose batch delete reports ``error`` for one message (a backend may
    report any storage error per message)."""

    def __init__(self, queues: QueueStore, message_id: str, error: StorageError):
        self._queues, self._message_id, self._error = queues, message_id, error

    def delete_many(self, queue: str, messages: Sequence[tuple[str, str]]) -> list[Any]:
        rest = [m for m in messages if m[0] != self._message_id]
        results = iter(self._queues.delete_many(queue, rest))
        return [self._error if m[0] == self._message_id else next(results) for m in messages]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queues, name)


def test_delete_many_logs_a_message_that_failed_for_another_reason(
    world: World, caplog: pytest.LogCaptureFixture
):
    failing, kept = world.leased(), world.leased()
    queues = OneFailingDelete(world.storage.queues, failing.message_id, Throttled("busy"))
    keeper = LeaseKeeper(queues, world.clock)  # type: ignore[arg-type]

    with caplog.at_level(logging.WARNING, logger="runner.worker.leases.lease"):
        keeper.delete_many([failing, kept])

    assert f"deleting message {failing.message_id} failed: busy" in caplog.text
    assert not failing.lost  # not lost: it failed, nobody else has it
    assert world.messages() == 1


# --------------------------------------------------------------------------- the thread


def test_a_new_lease_wakes_the_keeper_only_if_due_before_its_next_pass(world: World):
    keeper = world.keeper
    # Before its first pass the keeper wakes for every new lease
    world.leased()
    assert keeper._wake.is_set()
    # During a wait that ends before the new lease is due, a new lease does not wake it
    keeper._wake.clear()
    keeper._next_pass_at = world.clock.monotonic() + 1.0
    world.leased()
    assert not keeper._wake.is_set()
    # but one due sooner does
    keeper._next_pass_at = world.clock.monotonic() + LEASE_SECONDS
    world.leased()
    assert keeper._wake.is_set()


def test_the_keeper_thread_outlives_a_pass_that_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    # Given a keeper whose first pass raises (the thread's last line of defence)
    storage = open_storage(str(tmp_path / "store"), clock=FakeClock())
    keeper = LeaseKeeper(storage.queues, FakeClock())
    passes: list[int] = []
    second_pass = threading.Event()

    def start_due() -> list[Any]:
        passes.append(1)
        if len(passes) == 1:
            raise RuntimeError("a bug in a pass")
        second_pass.set()
        return []

    keeper.start_due = start_due  # type: ignore[method-assign]

    # When it runs
    with caplog.at_level(logging.ERROR, logger="runner.worker.leases.lease"):
        keeper.start()
        try:
            # Then it logs the failure and makes another pass half a second later
            assert second_pass.wait(5), "the keeper thread died with its pass"
        finally:
            keeper.stop()
            storage.close()
    assert "lease keeper pass failed" in caplog.text


def test_a_lease_nobody_marked_lost_says_it_ran_out():
    lease = Lease("q", "m-1", "r", 30, acquired_at=0.0, visible_at=30.0)

    assert not lease.expired(29.9) and lease.expired(30.0)
    assert lease.why_lost(31.0) == "lease of message m-1 ran out before it was renewed"
    lease.lose("first reason")
    lease.lose("second reason")
    assert lease.why_lost(31.0) == "first reason"
    assert not lease.must_hand_back(29.9)  # only a lease whose receipt was lost hands back


@pytest.mark.parametrize(("lease_seconds", "margin"), [(30, 9.0), (10, 3.0), (5, 2.5), (2, 1.0)])
def test_a_lease_whose_receipt_was_lost_is_handed_back_with_time_for_a_slow_write(
    lease_seconds: int, margin: float
):
    # The hand back's write gets what a renewal gets: 30 % of a long lease, 3 s (at most
    # half) of a short one; a 5 s lease hands back 2.5 s before its end, not 1.5 s
    lease = Lease("q", "m-1", "r", lease_seconds, acquired_at=0.0, visible_at=100.0)
    lease.receipt_lost = True

    assert not lease.must_hand_back(100.0 - margin - 0.01)
    assert lease.must_hand_back(100.0 - margin)
