"""One step of a job's feed task (runner/worker/tasks/feed.py), on both backends: feeding while
planning goes on, an idle step, and each way ending a step can go wrong."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from checkpoint import layout
from checkpoint.errors import NotFound
from runner.worker.tasks.feed import to_block_end
from tests.runner.world import OTHER_WORKER, Verdicts, World

WINDOW = 100
IDLE_SECONDS = 1


@pytest.fixture(autouse=True)
def _window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Verdicts, "feed_window", WINDOW, raising=False)


def _planning(world: World, recorded: int, planned: int | None) -> str:
    """A job still planning: ``recorded`` chunks in the store, the first 50 done, and
    its planning record saying ``planned`` of them (None: no planning record)."""
    job_id = world.job(None)
    world.store.add_chunks(job_id, 0, [{"act": "ok"}] * recorded)
    _end_first(world, job_id)
    if planned is not None:
        world.set_task(job_id, "plan", values={"progress": planned}, state="running")
    return job_id


def _end_first(world: World, job_id: str) -> None:
    """Chunks 0-49 done: the window of 100 sent at planning has room for 50."""
    for index in range(50):
        world.end_chunk(job_id, "done", index)


def _before_nth(world: World, call: str, nth: int, action: Callable[[], None]) -> None:
    """Run ``action`` just before the worker's ``nth`` call of ``call`` from now on."""
    if nth == 1:
        world.meanwhile.before(call, action)
    else:
        world.meanwhile.before(call, lambda: _before_nth(world, call, nth - 1, action))


def test_while_planning_goes_on_it_feeds_what_planning_said_it_recorded(world: World):
    # Given a job planning, 300 chunks recorded, its planning record saying 150, and
    # the first 50 chunks done
    job_id = _planning(world, 300, 150)
    world.send(job_id, "feed", index=WINDOW)

    world.deliver()

    # Then chunks 100-149 were sent, and the next step's message at once
    feed = world.task(job_id, "feed")
    assert (feed.state, feed.attempt, world.progress(feed)) == ("waiting", 0, 150)
    assert world.in_queue() == 50 + 1 and world.log.delays == [0]


@pytest.mark.parametrize("planned", [None, WINDOW], ids=["no-planning-record", "all-fed"])
def test_a_step_with_nothing_to_feed_looks_again_a_second_later(world: World, planned: int | None):
    job_id = _planning(world, 300, planned)
    world.send(job_id, "feed", index=WINDOW)

    world.deliver()

    assert world.in_queue() == 1 and world.log.delays == [IDLE_SECONDS]
    assert world.visible() == []
    assert world.task(job_id, "feed").state == "waiting"


def _running_job(world: World) -> str:
    job_id = world.job([{"act": "ok"}] * 300)
    _end_first(world, job_id)
    world.send(job_id, "feed", index=WINDOW)
    return job_id


# The worker's record.merge calls in a step: its claim, the cursor after the first half
# of what it sends, the end (waiting, with the last half's cursor).
END_OF_STEP = 3


def test_a_feeder_fenced_as_it_ends_its_step_leaves_its_message_alone(world: World):
    job_id = _running_job(world)
    _before_nth(world, "records.merge", END_OF_STEP, world.take_over(job_id, "feed"))

    message = world.deliver()

    # (the next step's message went midway: it waits for whoever holds the record)
    assert world.untouched(message) and world.log.delays == [0]
    assert world.task(job_id, "feed").owner == OTHER_WORKER


def test_a_step_that_cannot_be_ended_leaves_its_message_to_come_back(world: World):
    job_id = _running_job(world)
    _before_nth(
        world, "records.merge", END_OF_STEP, lambda: world.meanwhile.busy.add("records.merge")
    )

    message = world.deliver()

    world.meanwhile.busy.clear()
    assert world.untouched(message) and world.log.delays == [0]
    feed = world.task(job_id, "feed")
    # It goes on from the first half's cursor: the second half, whose cursor only the
    # end would have written, goes again (the claim deletes those duplicates unrun). The
    # step fed from 100 to the end of the block its room of 50 reaches into (128), its
    # first half 14
    assert (feed.state, world.progress(feed)) == ("running", 114)


def test_a_step_whose_next_message_is_not_sent_keeps_its_own(world: World):
    job_id = _running_job(world)
    world.meanwhile.busy.add("queues.send")

    message = world.deliver()

    assert message.id not in world.log.deleted
    assert world.log.visibility[message.id] == [0]  # it fed: looks again at once
    assert world.task(job_id, "feed").state == "waiting"
    # its room of 50 from chunk 100 fed to the end of the block it reaches into (128)
    assert world.in_queue() == 28 + 1


def test_a_job_of_no_more_than_its_window_has_no_feeder(world: World):
    job_id = world.job(None, params={"payloads": [{"act": "ok"}] * WINDOW})
    world.send(job_id, "plan")

    world.deliver()

    assert world.in_queue() == WINDOW
    with pytest.raises(NotFound):
        world.task(job_id, "feed")


def test_a_next_step_received_while_its_step_runs_waits_for_it(world: World):
    # Given the feed record running under another message, its lease not over
    job_id = _running_job(world)
    lease_until = world.clock.now() + timedelta(seconds=30)
    world.set_task(
        job_id,
        "feed",
        state="running",
        owner=OTHER_WORKER,
        message_id="message-b",
        attempt=1,
        lease_until=lease_until,
    )

    message = world.deliver()

    # Then this message, the feeder's way on, is hidden a moment, not deleted unrun
    assert message.id not in world.log.deleted
    assert world.log.visibility[message.id] == [IDLE_SECONDS]
    assert world.task(job_id, "feed").owner == OTHER_WORKER


def test_a_step_that_ends_sets_the_attempts_of_earlier_dead_steps_back(world: World):
    # Given a feeder whose last step died (one record serves every step; Verdicts allows
    # two attempts)
    job_id = _running_job(world)
    world.set_task(job_id, "feed", state="waiting", attempt=1)

    world.deliver()

    # Then a step that ends well leaves none counted: only steps dying one after another
    # (max_attempts of them) may poison the feeder
    assert world.task(job_id, "feed").attempt == 0


def test_steps_and_their_halves_end_at_block_ends():
    block = layout.SHARD_BLOCK
    # a page reaching into a block stops at the end of the block before it
    assert to_block_end(100, 150, 300) == 128
    assert to_block_end(0, 5 * block + 7, 300) == 5 * block
    # unless that would leave it nothing, or it reaches the last chunk it may feed
    assert to_block_end(100, 114, 128) == 114
    assert to_block_end(100, 150, 150) == 150
    assert to_block_end(100, 160, 150) == 150
    # a page ending at a block's end is kept as it is
    assert to_block_end(64, 128, 300) == 128
