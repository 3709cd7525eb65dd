"""A job deleted while one of its chunks runs (``runner delete --force``): the chunk
stops within 2 s (the worker's stop-order watcher) with one line saying so, writes
nothing and deletes its message (docs/semantics.md §17), in this process on both backends
with a FakeClock, through the worker's own code (the :class:`World` of
tests/runner/worker/tasks/test_task_lifecycle.py).
"""

from __future__ import annotations

import logging

import pytest

from jobs import retention
from runner.worker.job_cache import FRESH_SECONDS
from runner.worker.stop_orders import CHECK_SECONDS
from tests.runner.world import World


def _look_now(world: World) -> None:
    """The stop-order watcher's look at the job falls due and is made, as its thread would
    (long before a lease renewal)."""
    world.clock.advance(CHECK_SECONDS)
    world.worker.stop_orders.check_due()


def _stopped_quietly(world: World, job_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """One INFO line says the job was deleted; nothing at ERROR, no traceback."""
    said = [r for r in caplog.records if f"job {job_id} was deleted" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO], caplog.text
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text


def test_a_running_chunk_of_a_job_deleted_with_force_stops_within_2_s(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given a chunk running (its checkpoint interval is 60 s: nothing written meanwhile)
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)

    # When its job is deleted with --force (cancelled, then its records, then the job's
    # own record) and the worker's look at the job falls due before its next checkpoint
    def delete_then_look() -> None:
        retention.delete(job_id, force=True, storage=world.backend.storage)
        _look_now(world)

    world.during(job_id, delete_then_look)
    with caplog.at_level(logging.DEBUG):
        message = world.deliver()

    # Then the chunk stopped at that checkpoint, unfinished (nothing handed to the
    # finisher, nothing held), saying so in one line, and its message is gone
    _stopped_quietly(world, job_id, caplog)
    assert world.worker.keeper.leased() == []
    assert message.id in world.log.deleted and world.in_queue() == 0
    assert world.poisoned() == []


def test_a_running_chunk_of_a_job_being_deleted_stops_without_writing_its_record(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given a chunk running, its job's deletion begun (marked, its records still there)
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    before: list[str] = []

    def mark_then_look() -> None:
        world.store.change_job(job_id, lambda job: {"deleting_on": world.clock.now()})
        world.clock.advance(FRESH_SECONDS)
        before.append(world.task(job_id).etag)
        _look_now(world)

    world.during(job_id, mark_then_look)

    # When the worker looks at the job before the chunk's next checkpoint
    with caplog.at_level(logging.DEBUG):
        message = world.deliver()

    # Then it stopped there, its record untouched (neither refreshed nor handed back:
    # the deletion removes it) and its message deleted
    _stopped_quietly(world, job_id, caplog)
    task = world.task(job_id)
    assert [task.etag] == before and task.state == "running"
    assert message.id in world.log.deleted and world.in_queue() == 0
