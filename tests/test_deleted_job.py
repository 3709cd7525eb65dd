"""A job deleted while one of its chunks runs (``runner delete --force``): the chunk
stops at its next lease renewal with one line saying so, writes nothing and deletes its
message (docs/semantics.md §17), in this process on both backends with a FakeClock,
through the worker's own code (the :class:`World` of tests/test_task_lifecycle.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from jobs import retention
from runner.jobwatch import FRESH_SECONDS
from tests.conftest import Backend
from tests.test_task_lifecycle import LEASE_SECONDS, World, make_world

RENEWAL_SECONDS = LEASE_SECONDS * 0.7 + 1


@pytest.fixture
def world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    yield from make_world(backend, monkeypatch)


def _renew_now(world: World) -> None:
    """A renewal falls due and is made, as the lease keeper's thread would."""
    world.clock.advance(RENEWAL_SECONDS)
    world.worker.keeper.renew_due()


def _stopped_quietly(world: World, job_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """One INFO line says the job was deleted; nothing at ERROR, no traceback."""
    said = [r for r in caplog.records if f"job {job_id} was deleted" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO], caplog.text
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text


def test_a_running_chunk_of_a_job_deleted_with_force_stops_at_its_next_renewal(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given a chunk running (its checkpoint interval is 60 s: nothing written meanwhile)
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)

    # When its job is deleted with --force (cancelled, then its records, then the job's
    # own record) and the chunk's lease renewal falls due before its next checkpoint
    def delete_then_renew() -> None:
        retention.delete(job_id, force=True, storage=world.backend.storage)
        _renew_now(world)

    world.during(job_id, delete_then_renew)
    with caplog.at_level(logging.DEBUG):
        message = world.deliver()

    # Then the chunk stopped at that checkpoint, unfinished (nothing handed to the
    # finisher, nothing held), saying so in one line, and its message is gone
    _stopped_quietly(world, job_id, caplog)
    assert world.worker.keeper.held() == []
    assert message.id in world.log.deleted and world.in_queue() == 0
    assert world.poisoned() == []


def test_a_running_chunk_of_a_job_being_deleted_stops_without_writing_its_record(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given a chunk running, its job's deletion begun (marked, its records still there)
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    before: list[str] = []

    def mark_then_renew() -> None:
        world.store.change_job(job_id, lambda job: {"deleting_on": world.clock.now()})
        world.clock.advance(FRESH_SECONDS)
        before.append(world.task(job_id).etag)
        _renew_now(world)

    world.during(job_id, mark_then_renew)

    # When the renewal falls due before its next checkpoint
    with caplog.at_level(logging.DEBUG):
        message = world.deliver()

    # Then it stopped there, its record untouched (neither refreshed nor handed back:
    # the deletion removes it) and its message deleted
    _stopped_quietly(world, job_id, caplog)
    task = world.task(job_id)
    assert [task.etag] == before and task.state == "running"
    assert message.id in world.log.deleted and world.in_queue() == 0
