"""The finisher: finished chunks marked done a shard at a time, then their messages
deleted, on both backends. Driven synchronously (``finish``) except where the thread
itself is the subject."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import pytest

from checkpoint import layout, messages
from checkpoint.clock import Clock, FakeClock, SystemClock
from checkpoint.errors import Unavailable
from checkpoint.records import TaskRecord
from checkpoint.storage import QueueMessage
from checkpoint.store import CheckpointStore
from runner.worker.leases.lease import Lease, LeaseKeeper
from runner.worker.tasks import chunk_finisher
from runner.worker.tasks.chunk_finisher import Ended, Finisher
from runner.worker.tasks.job_completion import Completion


class FailingBatches:
    """The real record store, except that batches fail while ``failing`` is set."""

    def __init__(self, records: Any):
        self._records = records
        self.failing = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.block = False
        #: Batches still to refuse before answering again (besides ``failing``).
        self.refusals = 0
        #: Reads of a job record (the catalogue) since the test last set this to 0.
        self.job_reads = 0

    def get(self, table: str, *args: Any, **kwargs: Any) -> Any:
        self.job_reads += table == layout.JOBS_TABLE
        return self._records.get(table, *args, **kwargs)

    def batch(self, *args: Any, **kwargs: Any) -> list[str]:
        if self.block:
            self.entered.set()
            self.release.wait(30)
        if self.failing or self.refusals > 0:
            self.refusals -= 1
            raise Unavailable("the store is down")
        return self._records.batch(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)


class Job:
    """A running job of ``chunks`` chunks whose messages this worker holds, claimed."""

    def __init__(self, backend: Any, chunks: int, clock: Clock | None = None):
        self.records = FailingBatches(backend.storage.records)
        storage = replace(backend.storage, records=self.records, closer=None)
        self.queue = backend.queue()
        self.store = CheckpointStore(storage)
        self.job_id = f"fin-{uuid.uuid4().hex[:10]}"
        job, _ = self.store.create_job(self.job_id, "tests:Job", self.queue, {})
        self.store.add_chunks(self.job_id, 0, list(range(chunks)))
        self.store.update_job(job, state="running", total=chunks)
        # The keeper is not started: nothing is renewed, leases are long enough. A fake
        # clock (the finisher's retries then wait in its time) only moves the leases'
        # local deadlines: the queue keeps its own time.
        self.clock = clock or SystemClock()
        self.keeper = LeaseKeeper(storage.queues, self.clock)
        self.finisher = Finisher(
            self.store, self.keeper, Completion(self.store, storage.queues, {}), self.clock
        )
        storage.queues.send_many(self.queue, [str(i).encode() for i in range(chunks)])
        received: list[QueueMessage] = []
        while len(received) < chunks:  # a receive returns 32 at most
            wanted = min(32, chunks - len(received))
            received += storage.queues.receive(
                self.queue, max_messages=wanted, visibility_seconds=60
            )
        self.leases: dict[int, Lease] = {}
        self.tasks: dict[int, TaskRecord] = {}
        for message in received:
            index = int(message.body)
            self.leases[index] = self.keeper.lease(
                self.queue, message, 60, received_at=self.clock.monotonic()
            )
            task = self.store.get_task(self.job_id, "chunk", index)
            self.tasks[index] = self.store.write_task(task, {"state": "running", "owner": "me"})
        self.storage = storage

    def ended(self, index: int) -> Ended:
        task = self.tasks[index]
        final = self.store.final_changes(task, {"state": "done"}, {"result": index * 10})
        return Ended(task, final, self.leases[index])

    def left_in_queue(self) -> int:
        return self.storage.queues.approximate_length(self.queue)


def test_a_group_is_marked_done_counted_and_its_messages_deleted(backend):
    # Given three finished chunks, one of which someone else wrote since it was claimed
    job = Job(backend, chunks=5)
    job.store.write_task(job.store.get_task(job.job_id, "chunk", 1), {"owner": "them"})

    # When the finisher takes them as one group
    job.finisher.finish([job.ended(0), job.ended(1), job.ended(2)])

    # Then the two still ours are done with their results, counted, their messages gone
    assert [t.index for t in job.store.chunks(job.job_id, ("done",))] == [0, 2]
    assert list(job.store.results(job.job_id)) == [(0, 0), (2, 20)]
    assert job.store.counts(job.job_id) == {"done": 2, "poisoned": 0}
    assert job.left_in_queue() == 3  # chunks 1 (fenced), 3 and 4 (not finished)
    # and the fenced one is lost and no longer renewed, its record left to its writer
    assert job.leases[1].lost and not job.leases[0].lost
    assert set(job.keeper.leased()) == {job.leases[3], job.leases[4]}
    assert job.store.get_task(job.job_id, "chunk", 1).owner == "them"


def test_the_group_that_ends_the_job_enqueues_finalize(backend):
    job = Job(backend, chunks=3)
    job.finisher.finish([job.ended(0), job.ended(1)])
    assert job.store.get_job(job.job_id).state == "running"

    job.finisher.finish([job.ended(2)])

    assert job.store.get_job(job.job_id).state == "finalizing"
    (final,) = job.storage.queues.peek(job.queue, max_messages=32)
    assert messages.decode(final.body).kind == "final"


def test_groups_after_the_first_read_no_job_record(backend):
    # Given a job whose first group taught this worker its total and type
    job = Job(backend, chunks=8)
    job.finisher.finish([job.ended(0)])
    job.records.job_reads = 0

    # When more of its groups finish, none of them ending a shard
    for index in range(1, 4):
        job.finisher.finish([job.ended(index)])

    # Then none reads the job's record: the catalogue is off a chunk's path
    assert job.records.job_reads == 0
    assert job.store.counts(job.job_id) == {"done": 4, "poisoned": 0}


def test_the_groups_of_a_job_read_its_record_once_in_all(backend):
    # Given a worker that has not finished any chunk of a planned job yet
    job = Job(backend, chunks=8)
    job.records.job_reads = 0

    # When four of its groups finish, one after another, none ending a shard
    for index in range(4):
        job.finisher.finish([job.ended(index)])

    # Then the job's record is read once, by the first, for its total and type: the
    # tolerated failures come from the class, not from a read per group
    assert job.records.job_reads == 1
    assert job.store.counts(job.job_id) == {"done": 4, "poisoned": 0}


def test_a_store_failure_keeps_the_messages_for_a_later_delivery(backend):
    # Given a store that fails the batch marking the chunks done, every try until one
    # lease past the leases (on a fake clock: those 120 s pass at once)
    clock = FakeClock()
    job = Job(backend, chunks=2, clock=clock)
    job.records.failing = True

    job.finisher.finish([job.ended(0), job.ended(1)])
    assert sum(clock.sleeps) >= 60  # it did wait past the leases before giving up

    # Then nothing was marked done, the messages stay (they come back and are redone)
    # and nobody renews them any more
    assert job.store.counts(job.job_id) == {"done": 0, "poisoned": 0}
    assert job.left_in_queue() == 2
    assert job.keeper.leased() == []


def test_a_done_mark_outlives_a_lapsed_lease_and_is_not_redone(backend):
    # Given a finished chunk whose lease ran out while it waited (a renewal's answer was
    # lost, and its receipt with it), nobody having taken the chunk over
    job = Job(backend, chunks=1)
    job.leases[0].visible_at = job.clock.monotonic() - 1
    # and a store that refuses the first try of the batch marking it done
    job.records.refusals = 1

    job.finisher.finish([job.ended(0)])

    # Then the mark is retried past the lapsed lease (it is fenced by the record's ETag,
    # not by the lease) and lands: the chunk is done, its work not thrown away
    assert job.store.counts(job.job_id) == {"done": 1, "poisoned": 0}
    assert list(job.store.results(job.job_id)) == [(0, 0)]


def test_the_thread_writes_what_is_handed_over_and_stop_flushes_it(backend):
    job = Job(backend, chunks=6)
    finisher = job.finisher
    finisher.start()
    for index in range(6):
        finisher.add(job.ended(index))

    assert finisher.stop(timeout=60)

    assert job.store.counts(job.job_id) == {"done": 6, "poisoned": 0}
    assert finisher.idle()
    assert job.store.get_job(job.job_id).state == "finalizing"
    # only the finalize message is left
    assert job.left_in_queue() == 1


def test_a_slot_waits_while_too_many_chunks_are_pending(backend, monkeypatch):
    # Given a finisher whose store write is stuck, with room for 2 pending chunks
    monkeypatch.setattr(chunk_finisher, "MAX_PENDING", 2)
    job = Job(backend, chunks=4)
    finisher = job.finisher
    job.records.block = True
    finisher.start()
    finisher.add(job.ended(0))
    assert job.records.entered.wait(30)  # chunk 0 is being written (stuck)
    finisher.add(job.ended(1))
    finisher.add(job.ended(2))  # two pending: full

    # When a slot hands over one more, it waits until the store moves again
    handed = threading.Event()
    slot = threading.Thread(target=lambda: (finisher.add(job.ended(3)), handed.set()))
    slot.start()
    assert not handed.wait(0.3)
    job.records.block = False
    job.records.release.set()
    assert handed.wait(30)
    slot.join(30)
    assert finisher.stop(timeout=60)
    assert job.store.counts(job.job_id) == {"done": 4, "poisoned": 0}


def test_a_group_waits_while_chunks_go_on_finishing_and_no_longer():
    wait = chunk_finisher.group_wait
    linger, most = chunk_finisher.LINGER_SECONDS, chunk_finisher.GROUP_WAIT_SECONDS
    # A full group is written at once
    assert wait(chunk_finisher.GROUP_CHUNKS, 10.0, 10.0, 10.0) is None
    # A chunk just handed over: wait for the next one up to the linger
    assert wait(1, 10.0, 10.0, 10.0) == pytest.approx(linger)
    # Chunks still coming keep it open, up to the most its oldest waits
    assert wait(3, 10.0 + most - 0.01, 10.0, 10.0 + most - 0.02) == pytest.approx(0.01)
    assert wait(3, 10.0 + most, 10.0, 10.0 + most - 0.001) is None
    # No chunk within the linger (a chunk of a second or more): written then
    assert wait(1, 10.0 + linger, 10.0, 10.0) is None
    # quick chunks share (a block of trivial ones on a loaded Azurite takes about
    # 0.8 s), none waits long
    assert 0.5 <= most <= 1.0 and linger < most


def _ended_at(job_id: str, index: int, added_at: float) -> Ended:
    """A finished chunk as the group selection sees it: its job, its index, its time."""
    task = cast(TaskRecord, SimpleNamespace(job_id=job_id, index=index))
    return Ended(task, {}, cast(Lease, None), added_at=added_at)


def test_a_group_writes_the_blocks_its_chunks_have_passed_and_keeps_the_newest():
    block = layout.SHARD_BLOCK
    passed = chunk_finisher.PASSED_AFTER
    # Chunks 0-31 (block 0) and the first PASSED_AFTER of block 1, a little out of order
    order = [*range(block - 2), block, block - 2, block - 1, *range(block + 1, block + passed)]
    pending = [_ended_at("j", index, 10.0) for index in order]
    take, keep = chunk_finisher.ripe(pending, 10.1)
    # Then block 0 is written whole (its late chunks 30 and 31 came), block 1 waits
    assert sorted(e.task.index for e in take) == list(range(block))
    assert sorted(e.task.index for e in keep) == list(range(block, block + passed))
    # A block not yet passed by enough of its job's later chunks waits, and another
    # job's later chunks do not pass it
    few = [_ended_at("j", i, 10.0) for i in range(block + passed - 1)]
    other = [_ended_at("k", i, 10.0) for i in range(2 * block, 2 * block + passed)]
    take, keep = chunk_finisher.ripe([*few, *other, _ended_at("k", 0, 10.0)], 10.1)
    assert [(e.task.job_id, e.task.index) for e in take] == [("k", 0)]
    assert len(keep) == len(few) + len(other)
    # but none waits longer than the most a chunk waits
    take, keep = chunk_finisher.ripe(few, 10.0 + chunk_finisher.GROUP_WAIT_SECONDS)
    assert len(take) == len(few) and keep == []
    # and where nothing is passed nor old enough, a full group is written whole
    take, keep = chunk_finisher.ripe(few, 10.1)
    assert len(take) == len(few) and keep == []


@pytest.mark.parametrize("order", ["in order", "a few places apart"])
def test_chunks_ending_in_order_are_marked_a_block_at_a_batch(
    backend, order: str, monkeypatch: pytest.MonkeyPatch
):
    # Given chunks ending from the middle of a block to the middle of the block after
    # next, in order or with each block's last chunk after the next block's first (as
    # Azure's concurrent sends deliver a page), handed to the finisher's thread with no
    # lull between them (the linger and the age cap set long, so only the group's size
    # decides when it is written)
    monkeypatch.setattr(chunk_finisher, "LINGER_SECONDS", 30.0)
    monkeypatch.setattr(chunk_finisher, "GROUP_WAIT_SECONDS", 60.0)
    block = layout.SHARD_BLOCK
    job = Job(backend, chunks=3 * block)
    batches: list[int] = []
    batch = job.records.batch

    def counted(table: str, partition: str, ops: Any) -> list[str]:
        if partition.startswith(layout.shard_partition(job.job_id, 0)[:-2]):
            batches.append(len(ops))  # a shard's, not finalize's enqueueing
        return batch(table, partition, ops)

    job.records.batch = counted  # type: ignore[method-assign]
    ended = list(range(block // 2, 2 * block + block // 2))
    if order != "in order":
        for end in (block, 2 * block):  # 31 after 32, 63 after 64
            at = ended.index(end)
            ended[at - 1], ended[at] = ended[at], ended[at - 1]
    job.finisher.start()
    for index in ended:
        job.finisher.add(job.ended(index))
    assert job.finisher.stop(timeout=60)

    # Then each block's chunks were marked done in one batch with its shard's counter
    # (groups of 32 from chunk 16 on made four batches of two blocks' halves; a group
    # ended by a block's last chunk left its stragglers a batch of their own)
    assert batches == [block // 2 + 1, block + 1, block // 2 + 1]
    assert job.store.counts(job.job_id) == {"done": len(ended), "poisoned": 0}


def test_a_chunk_handed_over_as_the_thread_exits_is_written_not_dropped(backend, monkeypatch):
    # Given a finisher whose thread has decided to exit (stop asked, nothing pending)
    # and is held just after that decision, still alive
    decided, leave = threading.Event(), threading.Event()

    def held_after_run(run: Any) -> Any:
        def thread() -> None:
            run()
            decided.set()
            leave.wait(30)

        return thread

    monkeypatch.setattr(chunk_finisher, "in_context", held_after_run)
    job = Job(backend, chunks=2)
    finisher = job.finisher
    finisher.start()
    finisher.stop(timeout=0)
    assert decided.wait(30)

    # When a slot hands over a finished chunk then
    finisher.add(job.ended(0))
    leave.set()
    assert finisher.stop(timeout=30)

    # Then it is marked done and its message deleted, not left waiting for a thread
    # that is gone (its chunk redone once the lease lapses)
    assert job.store.counts(job.job_id) == {"done": 1, "poisoned": 0}
    assert finisher.idle()
    assert job.left_in_queue() == 1
