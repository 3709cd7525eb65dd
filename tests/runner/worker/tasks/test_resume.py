"""Resumed work first (runner/worker/tasks/resume.py): a claimed chunk's message waits in its
resume queue, so a chunk whose lease ran out is received before the job queue's fresh
chunks; every step of the move failing, even applied with its answer lost, loses no
chunk and runs none twice. On both backends, with the task-life ``world``."""

from __future__ import annotations

import pytest

from checkpoint import messages
from checkpoint.clock import FakeClock
from checkpoint.storage import QueueMessage
from jobs.job import ChunkedJob
from jobs.job_run import SimulatedCrash
from runner.worker.receiving.prefetch import ChunkTimes
from runner.worker.receiving.receive_order import ReceiveOrder
from runner.worker.tasks.life import handle
from runner.worker.tasks.resume import (
    IDLE_RESUME_POLL_SECONDS,
    MOVE_MIN_CHUNK_SECONDS,
    QUICK_RESUME_POLL_SECONDS,
    queues_to_poll,
)
from tests.runner.world import FIRST_BACKOFF_SECONDS, LEASE_SECONDS, Verdicts, World


@pytest.fixture
def resumes(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    """The world, its job type moving claimed chunks to the resume queue."""
    monkeypatch.setattr(Verdicts, "resume_first", True)
    return world


def _copies(world: World) -> list[QueueMessage]:
    """The chunk messages the worker sent: copies to the resume queue."""
    return [m for m in world.log.sent if messages.decode(m.body).kind == "chunk"]


def _left(world: World) -> list[str]:
    """The kind of each message left in the job queue and the resume queue (all
    visible: a hidden one fails the check)."""
    kinds: list[str] = []
    for queue in (Verdicts.resume_queue(), world.queue):
        found = world.backend.storage.queues.peek(queue, max_messages=32)
        assert len(found) == _length(world, queue), f"a hidden message is left in {queue}"
        kinds += [messages.decode(m.body).kind for m in found]
    return kinds


def _length(world: World, queue: str) -> int:
    return world.backend.storage.queues.approximate_length(queue)


def _as_the_loop_receives(world: World) -> tuple[str, QueueMessage]:
    """The next message a worker's loop receives, and its queue: resume queue first."""
    for queue in queues_to_poll(Verdicts, world.clock.monotonic(), None):
        received = world.log.receive(queue, max_messages=1, visibility_seconds=LEASE_SECONDS)
        if received:
            return queue, received[0]
    raise AssertionError("no message visible in any queue")


def _deliver(world: World, queue: str, message: QueueMessage) -> None:
    handle(world.worker, queue, message, world.clock.monotonic())


def _pass_lease(world: World, queue: str, message: QueueMessage) -> None:
    """A lease passes: ``message`` (hidden in ``queue``) is visible again."""
    world.clock.advance(LEASE_SECONDS)
    if world.backend.clock is None:  # Azurite: its time cannot be skipped
        world.log.make_visible(queue, message.id)


def test_a_claimed_chunk_waits_in_the_resume_queue_hidden_for_a_lease(resumes: World):
    world = resumes
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    seen: dict[str, object] = {}

    def look() -> None:
        seen["job queue"] = _length(world, world.queue)
        seen["resume queue"] = _length(world, Verdicts.resume_queue())
        seen["visible"] = world.backend.storage.queues.peek(Verdicts.resume_queue())
        seen["named"] = world.task(job_id).message_id

    world.during(job_id, look)

    # When the chunk runs
    world.deliver()

    # Then while it ran its message was in the resume queue only, hidden, and the claim
    # named that copy, sent hidden for one lease
    (copy,) = _copies(world)
    assert seen == {"job queue": 0, "resume queue": 1, "visible": [], "named": copy.id}
    assert world.log.delays[0] == LEASE_SECONDS
    # and once done, no message is left anywhere
    assert world.task(job_id).state == "done"
    assert _left(world) == ["final"]


def test_a_dead_workers_chunk_is_received_before_the_fresh_chunks(resumes: World):
    # Given three chunks, and a worker dying as chunk 0 runs
    world = resumes
    job_id = world.job([{"act": "ok"}] * 3)
    for index in range(3):
        world.send(job_id, index=index)

    def die() -> None:
        world.meanwhile.dead = True

    world.during(job_id, die)
    with pytest.raises(SimulatedCrash):
        world.deliver()
    world.meanwhile.dead = False
    world.during(job_id, lambda: None)
    (copy,) = _copies(world)
    assert world.task(job_id).state == "running" and world.task(job_id).message_id == copy.id

    # When its lease has run out, with chunks 1 and 2 visible since before
    _pass_lease(world, Verdicts.resume_queue(), copy)
    queue, message = _as_the_loop_receives(world)

    # Then chunk 0 is the next chunk received, from the resume queue, and resumes
    assert (queue, messages.decode(message.body).index) == (Verdicts.resume_queue(), 0)
    _deliver(world, queue, message)
    assert (world.task(job_id).state, world.task(job_id).attempt) == ("done", 2)
    # and the fresh chunks follow, each moved and done once
    for _ in range(2):
        _deliver(world, *_as_the_loop_receives(world))
    assert [(t.state, t.attempt) for t in world.store.chunks(job_id)] == [("done", 2)] + [
        ("done", 1)
    ] * 2
    assert _left(world) == ["final"]


def test_a_failed_chunk_comes_back_from_the_resume_queue_after_its_backoff(resumes: World):
    world = resumes
    job_id = world.job([{"act": "fail"}, {"act": "ok"}])
    world.send(job_id, index=0)
    world.send(job_id, index=1)

    # When chunk 0 fails its first attempt
    world.deliver()

    # Then its copy is hidden for the backoff in the resume queue, and comes back first
    (copy,) = _copies(world)
    assert world.log.visibility[copy.id][-1] == FIRST_BACKOFF_SECONDS
    assert world.task(job_id).state == "retrying"
    world.clock.advance(FIRST_BACKOFF_SECONDS)
    if world.backend.clock is None:
        world.log.make_visible(Verdicts.resume_queue(), copy.id)
    queue, message = _as_the_loop_receives(world)
    assert (queue, message.id) == (Verdicts.resume_queue(), copy.id)


def test_a_chunk_poisoned_from_the_resume_queue_goes_to_its_job_queues_poison_queue(
    resumes: World,
):
    world = resumes
    job_id = world.job([{"act": "fail"}])
    world.set_task(job_id, state="retrying", attempt=1)
    world.send(job_id)
    (original,) = world.backend.storage.queues.peek(world.queue)

    # When its last attempt fails, having moved to the resume queue
    world.deliver()

    # Then it is poisoned in <queue>-poison, the record naming the job queue (redrive's)
    reason = "failed on attempt 2 of 2: ValueError('bad row 0')"
    assert world.poisoned() == [(original.body, reason)]
    assert _length(world, Verdicts.resume_queue()) == 0 and _length(world, world.queue) == 0


@pytest.mark.parametrize("fault", ["busy", "ambiguous"])
def test_a_copy_that_cannot_be_sent_leaves_the_chunk_running_from_its_message(
    resumes: World, fault: str
):
    # Given the copy's send refused, or applied with its answer lost
    world = resumes
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    (original,) = world.backend.storage.queues.peek(world.queue)
    if fault == "busy":
        world.meanwhile.busy_times["queues.send"] = 1
    else:
        world.meanwhile.ambiguous_times["queues.send"] = 1

    # When the chunk runs
    world.deliver()

    # Then it ran once from the message it came in, and its claim named that message
    task = world.task(job_id)
    assert (task.state, task.attempt, task.message_id) == ("done", 1, original.id)
    if fault == "ambiguous":
        # and the copy sent after all comes back after a lease, to be deleted unrun
        (stray,) = _copies(world)
        _pass_lease(world, Verdicts.resume_queue(), stray)
        queue, message = _as_the_loop_receives(world)
        assert (queue, message.id) == (Verdicts.resume_queue(), stray.id)
        _deliver(world, queue, message)
        assert world.task(job_id).attempt == 1
    assert _left(world) == ["final"]


@pytest.mark.parametrize("fault", ["busy", "ambiguous"])
def test_an_original_that_cannot_be_deleted_comes_back_and_is_deleted_unrun(
    resumes: World, fault: str
):
    # Given the original's delete after the move refused, or applied with its answer lost
    world = resumes
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    (original,) = world.backend.storage.queues.peek(world.queue)
    counts = world.meanwhile.busy_times if fault == "busy" else world.meanwhile.ambiguous_times
    counts["queues.delete"] = 99  # every try while the lease lasts

    # When the chunk runs and is done
    world.deliver()
    counts["queues.delete"] = 0
    assert world.task(job_id).state == "done"

    # Then the original, if still there, comes back after its lease and is deleted unrun
    if fault == "busy":
        _pass_lease(world, world.queue, original)
        back = world.log.receive(world.queue, max_messages=32, visibility_seconds=LEASE_SECONDS)
        assert original.id in [m.id for m in back]  # beside the finalize message
        for message in back:
            _deliver(world, world.queue, message)
        assert world.job_record(job_id).state == "done" and _left(world) == []
    else:
        assert _left(world) == ["final"]
    assert world.task(job_id).attempt == 1


def test_a_claim_lost_to_another_worker_deletes_the_copy(resumes: World):
    # Given another worker claiming the chunk just before this one's claim
    world = resumes
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    world.meanwhile.before("records.merge", world.take_over(job_id))

    # When this worker handles the message
    world.deliver()

    # Then the chunk is the other worker's, and this worker's copy is gone
    assert world.task(job_id).owner == "worker-b"
    assert _length(world, Verdicts.resume_queue()) == 0
    (copy,) = _copies(world)
    assert copy.id in world.log.deleted


def test_a_chunk_handed_back_by_a_stopping_worker_is_next_from_the_resume_queue(
    resumes: World,
):
    world = resumes
    job_id = world.job([{"act": "ok"}] * 2)
    world.send(job_id, index=0)
    world.send(job_id, index=1)
    world.during(job_id, world.worker.stopping.set)

    world.deliver()

    # The hand back makes it visible at once, where workers look first
    world.worker.stopping.clear()
    world.during(job_id, lambda: None)
    queue, message = _as_the_loop_receives(world)
    assert (queue, messages.decode(message.body).index) == (Verdicts.resume_queue(), 0)


def test_a_class_without_resume_first_looks_into_its_resume_queue_once_a_minute(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(Verdicts, "resume_first", False)
    both = [Verdicts.resume_queue(), Verdicts.queue]
    assert queues_to_poll(Verdicts, 100.0, None) == both
    assert queues_to_poll(Verdicts, 100.0 + IDLE_RESUME_POLL_SECONDS - 1, 100.0) == [Verdicts.queue]
    assert queues_to_poll(Verdicts, 100.0 + IDLE_RESUME_POLL_SECONDS, 100.0) == both
    monkeypatch.setattr(Verdicts, "resume_first", True)
    assert queues_to_poll(Verdicts, 100.5, 100.0) == both


def test_a_type_whose_chunks_stay_here_has_its_resume_queue_asked_once_a_second(
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a job type that moves claimed chunks, and a worker whose chunks of it are quick
    monkeypatch.setattr(Verdicts, "resume_first", True)
    both = [Verdicts.resume_queue(), Verdicts.queue]
    quick = QUICK_RESUME_POLL_SECONDS

    # Then its resume queue is asked at the first receive and once a second after it
    # (only other workers' moves can be there), every receive while its chunks move
    assert queues_to_poll(Verdicts, 100.0, None, moves=False) == both
    assert queues_to_poll(Verdicts, 100.0 + quick / 2, 100.0, moves=False) == [Verdicts.queue]
    assert queues_to_poll(Verdicts, 100.0 + quick, 100.0, moves=False) == both
    assert queues_to_poll(Verdicts, 100.0 + quick / 2, 100.0, moves=True) == both
    assert quick == 1.0  # the longest wait between two idle polls by default


def test_the_receive_order_asks_a_resume_queue_by_how_long_chunks_take_here(
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a worker's receive order, the chunks of its type not timed yet
    monkeypatch.setattr(Verdicts, "resume_first", True)
    clock, times = FakeClock(), ChunkTimes()
    by_queue: dict[str, type[ChunkedJob]] = {
        Verdicts.resume_queue(): Verdicts,
        Verdicts.queue: Verdicts,
    }
    order = ReceiveOrder(by_queue, [Verdicts], clock, 1.0, chunk_times=times)
    both = [(Verdicts, [Verdicts.resume_queue(), Verdicts.queue])]
    order.asked(Verdicts, Verdicts.resume_queue(), 0, 32)
    assert order.next_round() == both  # they move until one was timed

    # When its chunks take a few milliseconds here
    times.observe(Verdicts.job_type(), 0.005)

    # Then the resume queue is left out until a second has passed since it was asked
    assert order.next_round() == [(Verdicts, [Verdicts.queue])]
    clock.advance(QUICK_RESUME_POLL_SECONDS)
    assert order.next_round() == both


def test_chunks_quicker_than_a_second_stay_in_the_job_queue(resumes: World):
    # Given a job type whose first chunk here took no time, and its second 5 s
    world = resumes
    job_id = world.job([{"act": "ok"}] * 4)
    for index in range(4):
        world.send(job_id, index=index)
    took = iter([0.0, 0.0, 5.0, 5.0])
    world.during(job_id, lambda: world.clock.advance(next(took)))

    # When the chunks run one after the other
    for _ in range(4):
        world.deliver()

    # Then the first (nothing timed yet) moved, the second (after a quick one) did not,
    # and once chunks took long on average they moved again
    moved = [messages.decode(m.body).index for m in _copies(world)]
    assert moved == [0, 3]
    assert MOVE_MIN_CHUNK_SECONDS == 1.0  # smoothed: 0 after #0 and #1, 1.0 after #2


def test_a_lease_lost_before_the_move_leaves_the_copy_to_carry_the_chunk(resumes: World):
    # Given this worker's lease lost (its renewal refused) just before its claim
    world = resumes
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)

    def lose() -> None:
        for lease in world.worker.keeper.leased():
            lease.lose("renewal refused")

    world.meanwhile.before("records.merge", lose)

    # When the chunk is claimed under its copy
    world.deliver()

    # Then the lease stays lost (the chunk stops) and does not follow the copy, which
    # the record names: hidden for a lease, it then brings the chunk back, first
    (copy,) = _copies(world)
    task = world.task(job_id)
    assert (task.state, task.message_id) == ("running", copy.id)
    _pass_lease(world, Verdicts.resume_queue(), copy)
    queue, message = _as_the_loop_receives(world)
    assert (queue, message.id) == (Verdicts.resume_queue(), copy.id)
    _deliver(world, queue, message)
    assert (world.task(job_id).state, world.task(job_id).attempt) == ("done", 2)


def test_an_unused_copy_that_cannot_be_deleted_is_left_to_come_back(resumes: World):
    # Given another worker claiming first, and this worker's delete of its copy refused
    world = resumes
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    world.meanwhile.before("records.merge", world.take_over(job_id))
    world.meanwhile.busy_times["queues.delete"] = 99  # every try

    world.deliver()

    # Then the copy is still there, hidden: it comes back after a lease, to a record
    # that does not name it (docs/semantics.md §20)
    world.meanwhile.busy_times["queues.delete"] = 0
    (copy,) = _copies(world)
    assert copy.id not in world.log.deleted
    assert _length(world, Verdicts.resume_queue()) == 1
    assert world.task(job_id).message_id != copy.id
