"""Running a long job: cancel, pause and resume, the failure policy, and what status
and the failure report say (docs/semantics.md §16), in this process on both backends
with a FakeClock, through the worker's own code (the :class:`World` of
tests/runner/worker/tasks/test_task_lifecycle.py).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from checkpoint import layout, messages
from checkpoint.storage import Record
from jobs import ChunkFailed, manage
from jobs.errors import JobEnded
from jobs.retention import delete as delete_job
from jobs.submit import submit
from runner.cli import commands as cli
from runner.cli.json_form import to_json
from runner.cli.redrive import redrive
from runner.cli.render import render_status
from runner.cli.status import REPORT_COLUMNS, failure_report, job_status
from runner.worker.job_cache import FRESH_SECONDS
from runner.worker.loop import WorkerSettings
from runner.worker.stop_orders import CHECK_SECONDS
from runner.worker.tasks.parking import PARK_MAX_SECONDS, PARK_MIN_SECONDS, park_seconds
from tests.backends import Backend
from tests.runner.world import FINALIZED, Unclosed, Verdicts, World, make_world

#: The longest a resumed job may wait for its work to start again (issue 22, item 5).
RESUME_BOUND_SECONDS = 5.0
#: The longest a running chunk may go on after a cancel or a pause (issue 22, item 4).
HOLD_BOUND_SECONDS = 2.0


def _cancel(world: World, job_id: str, reason: str = "wrong input") -> None:
    manage.cancel(job_id, reason, storage=world.backend.storage, clock=world.clock)
    world.clock.advance(FRESH_SECONDS)  # what the worker knew of the job is stale now


def _look_now(world: World) -> None:
    """The worker's stop-order watcher looks at its running jobs, as its thread does each
    CHECK_SECONDS (no lease renewal falls due: they are LEASE_SECONDS long)."""
    world.clock.advance(CHECK_SECONDS)
    world.worker.stop_orders.check_due()


# --------------------------------------------------------------------------- cancel


def test_a_cancelled_jobs_waiting_message_is_deleted_unrun(world: World):
    job_id = world.job([{"act": "ok"}])
    _cancel(world, job_id)
    world.send(job_id)

    message = world.deliver()

    assert message.id in world.log.deleted and world.in_queue() == 0
    task = world.task(job_id)
    assert task.state == "waiting" and task.attempt == 0  # never claimed
    job = world.job_record(job_id)
    assert job.state == "cancelled" and job.cancel_reason == "wrong input"
    assert job.cancelled_on is not None
    assert world.poisoned() == []


def test_a_running_chunk_learns_of_a_cancel_within_2_s_whatever_its_lease(world: World):
    _a_cancel_reaches_a_running_chunk(world, lease_left_seconds=20)


@pytest.fixture
def long_lease_world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """A world whose type's lease is sized by the workers, and grown to 600 s (its bounds)."""
    monkeypatch.setattr(Verdicts, "lease_seconds", None)
    monkeypatch.setattr(Verdicts, "lease_bounds", (600, 600))
    yield from make_world(backend, monkeypatch)


def test_a_cancel_reaches_a_chunk_within_2_s_under_an_adaptive_lease_grown_long(
    long_lease_world: World,
):
    _a_cancel_reaches_a_running_chunk(long_lease_world, lease_left_seconds=500)


def _a_cancel_reaches_a_running_chunk(world: World, lease_left_seconds: float) -> None:
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    started = world.clock.monotonic()

    def cancel_then_look() -> None:
        # A cancel recorded just after this worker read the job's record
        manage.cancel(job_id, "wrong input", storage=world.backend.storage, clock=world.clock)
        _look_now(world)
        left = world.worker.keeper.leased()[0].visible_at - world.clock.monotonic()
        assert left > lease_left_seconds

    world.during(job_id, cancel_then_look)
    message = world.deliver()

    # Then, long before the lease's first renewal (21 s), its checkpoint saved the
    # state and stopped it; the message is gone, unfailed
    assert world.clock.monotonic() - started <= HOLD_BOUND_SECONDS
    assert world.log.visibility.get(message.id) is None  # no renewal was made
    task = world.task(job_id)
    assert task.state == "waiting" and task.attempt == 0 and task.error is None
    assert world.progress(task) == "half"
    assert message.id in world.log.deleted and world.in_queue() == 0
    assert world.poisoned() == []


def test_a_cancelled_job_is_not_finalized(world: World):
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    world.send(job_id, index=0)
    world.deliver()
    _cancel(world, job_id)
    world.send(job_id, index=1)
    world.deliver()
    world.send(job_id, "final")
    world.deliver()

    assert world.job_record(job_id).state == "cancelled"
    assert job_id not in FINALIZED
    assert world.in_queue() == 0


def test_cancel_again_keeps_a_new_reason_and_is_refused_for_an_ended_job(world: World):
    job_id = world.job([{"act": "ok"}])
    _cancel(world, job_id, "first")
    cancelled_on = world.job_record(job_id).cancelled_on
    _cancel(world, job_id, "second")
    again = world.job_record(job_id)
    assert again.cancel_reason == "second" and again.cancelled_on == cancelled_on
    _cancel(world, job_id, "")  # no reason given: the one there stays
    assert world.job_record(job_id).cancel_reason == "second"

    done = world.job([])
    world.store.change_job(done, lambda job: {"state": "done"})
    with pytest.raises(JobEnded, match=r"has ended \(done\); it cannot be cancelled"):
        _cancel(world, done)


# --------------------------------------------------------------------------- pause


def test_a_paused_jobs_message_is_parked_as_a_fresh_copy_and_runs_after_resume(world: World):
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id)

    first = world.deliver()

    # Then the message was replaced by a copy delayed PARK_MIN_SECONDS: no attempt, no
    # delivery counted against it; where the copy is was noted
    assert first.id in world.log.deleted
    assert world.log.delays == [PARK_MIN_SECONDS]
    assert world.task(job_id).attempt == 0 and world.visible() == []
    assert world.in_queue() == 1
    (note,) = _notes(world, job_id)
    assert note.properties["message_id"] == world.log.sent[0].id
    # And a resume brings the copy back at once, its note dropped
    _resume(world, job_id)
    again = world.receive()
    assert again.id != first.id and again.dequeue_count == 1
    assert _notes(world, job_id) == []
    world.deliver(again)
    assert world.task(job_id).state == "done" and world.task(job_id).attempt == 1


def test_a_running_chunk_of_a_paused_job_hands_back_its_state_and_attempt(world: World):
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)

    def pause_then_look() -> None:
        manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
        _look_now(world)

    world.during(job_id, pause_then_look)
    message = world.deliver()

    task = world.task(job_id)
    assert task.state == "waiting" and task.attempt == 0  # the attempt given back
    assert world.progress(task) == "half"
    assert message.id in world.log.deleted and world.in_queue() == 1  # parked copy
    assert world.poisoned() == []


def test_a_pause_that_drains_lets_running_chunks_finish(world: World):
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    world.send(job_id, index=0)

    def pause_then_look() -> None:
        manage.pause(job_id, drain=True, storage=world.backend.storage, clock=world.clock)
        _look_now(world)

    world.during(job_id, pause_then_look)
    world.deliver()
    assert world.task(job_id, index=0).state == "done"
    # but nothing new starts
    world.send(job_id, index=1)
    world.deliver()
    assert world.task(job_id, index=1).attempt == 0


def test_a_second_pause_asking_to_drain_is_applied_to_running_chunks(world: World):
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)

    def pause_twice_then_look() -> None:
        manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
        manage.pause(job_id, drain=True, storage=world.backend.storage, clock=world.clock)
        _look_now(world)

    world.during(job_id, pause_twice_then_look)
    world.deliver()
    assert world.task(job_id).state == "done" and world.job_record(job_id).drain


def test_nothing_is_poisoned_while_a_job_is_paused(world: World):
    # Given a chunk delivered far more often than its attempts allow
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id)
    message = world.receive()
    for _ in range(Verdicts.max_attempts * 4):
        world.log.make_visible(world.queue, message.id)
        message = world.receive()
    assert message.dequeue_count > Verdicts.max_attempts * 4

    world.deliver(message)

    assert world.poisoned() == [] and world.task(job_id).state == "waiting"


def test_pause_and_resume_are_idempotent_and_refused_for_an_ended_job(world: World):
    job_id = world.job([{"act": "ok"}])
    first = manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    again = manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    assert again.paused_on == first.paused_on and again.etag == first.etag
    # A second pause asking to drain is applied; the pause keeps its start
    drained = manage.pause(job_id, drain=True, storage=world.backend.storage, clock=world.clock)
    assert drained.paused_on == first.paused_on and drained.drain
    undrained = manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    assert undrained.paused_on == first.paused_on and not undrained.drain
    assert manage.resume(job_id, storage=world.backend.storage, clock=world.clock).paused_on is None
    assert manage.resume(job_id, storage=world.backend.storage, clock=world.clock).paused_on is None
    _cancel(world, job_id)
    with pytest.raises(JobEnded, match="cannot be paused"):
        manage.pause(job_id, storage=world.backend.storage, clock=world.clock)


@pytest.mark.parametrize("paused_seconds", [57, 24 * 3600])
def test_a_long_paused_job_resumes_within_5_s_whatever_the_pause_lasted(
    world: World, paused_seconds: int
):
    # Given a job paused for a while, whose message a worker parked just now, for a
    # minute or more
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.clock.advance(paused_seconds)
    world.send(job_id)
    world.deliver()
    (delay,) = world.log.delays
    assert delay == max(PARK_MIN_SECONDS, min(PARK_MAX_SECONDS, paused_seconds // 4))

    # When the job is resumed
    asked_at = world.clock.monotonic()
    manage.resume(job_id, storage=world.backend.storage, clock=world.clock)

    # Then the copy is visible although its park has a minute or more to go, and runs at the
    # worker's next poll: within 5 s of the command, its own wait for late parks included
    copy = world.receive()
    world.clock.advance(max(0.0, FRESH_SECONDS - (world.clock.monotonic() - asked_at)))
    world.deliver(copy)
    poll = WorkerSettings().poll_max_seconds
    assert world.clock.monotonic() - asked_at + poll <= RESUME_BOUND_SECONDS
    assert world.task(job_id).state == "done" and world.task(job_id).attempt == 1


def test_a_paused_jobs_message_is_parked_again_for_as_long_as_the_pause_lasts(world: World):
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id)
    world.deliver()
    world.clock.advance(4 * PARK_MIN_SECONDS)  # parks grow with the pause
    world.let_pass(PARK_MIN_SECONDS, world.log.sent[-1])
    world.deliver()
    assert world.log.delays == [PARK_MIN_SECONDS, 5 * PARK_MIN_SECONDS // 4]
    assert world.task(job_id).attempt == 0 and world.in_queue() == 1
    # One note per task, naming its newest copy
    (note,) = _notes(world, job_id)
    assert note.properties["message_id"] == world.log.sent[-1].id


def test_a_parked_message_whose_note_was_lost_runs_once_its_park_ends(world: World):
    # Given a parked message whose note could not be written
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id)
    world.meanwhile.busy.add("records.upsert")
    first = world.deliver()
    world.meanwhile.busy.clear()
    assert first.id in world.log.deleted and _notes(world, job_id) == []

    # When the job is resumed, the resume cannot reach it ...
    _resume(world, job_id)
    assert world.visible() == []

    # ... but it comes back when its park ends, and runs
    world.let_pass(PARK_MIN_SECONDS, world.log.sent[-1])
    world.deliver()
    assert world.task(job_id).state == "done"


def test_a_park_noted_by_a_worker_that_had_not_seen_the_resume_is_brought_back_too(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    # Given a paused job whose first chunk's message is parked
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id, index=0)
    world.deliver()
    sleep = world.clock.sleep

    def park_meanwhile(seconds: float) -> None:
        # The worker, its record of the job still fresh, parks the second chunk's
        # message after the resume's first look at the notes
        monkeypatch.setattr(world.clock, "sleep", sleep)
        world.send(job_id, index=1)
        world.deliver()
        assert len(_notes(world, job_id)) == 1
        sleep(seconds)

    monkeypatch.setattr(world.clock, "sleep", park_meanwhile)

    # When the job is resumed, both are back at once
    _resume(world, job_id)
    back = world.receive_all()
    assert sorted(messages.decode(message.body).index for message in back) == [0, 1]
    assert world.log.delays == [PARK_MIN_SECONDS] * 2 and _notes(world, job_id) == []
    for message in back:
        world.deliver(message)
    assert [world.task(job_id, index=i).state for i in (0, 1)] == ["done", "done"]


def test_a_resume_skips_a_parked_copy_received_since(world: World):
    # Given a parked copy whose park ended: a worker holds it now
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id)
    world.deliver()
    world.let_pass(PARK_MIN_SECONDS, world.log.sent[-1])
    held = world.receive()

    # When the job is resumed, the copy stays with its holder, and the note goes
    _resume(world, job_id)
    assert world.visible() == [] and _notes(world, job_id) == []
    world.deliver(held)
    assert world.task(job_id).state == "done"


def test_a_cancel_brings_parked_messages_back_to_be_deleted_unrun(world: World):
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id)
    world.deliver()

    _cancel(world, job_id)

    copy = world.receive()  # at once, not minutes later
    assert _notes(world, job_id) == []
    world.deliver(copy)
    assert copy.id in world.log.deleted and world.in_queue() == 0
    assert world.task(job_id).attempt == 0


def test_deleting_a_job_removes_the_notes_of_its_parks(world: World):
    # Given a job that ended with a note of a park left (its cancel came before the park)
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id)
    world.deliver()
    world.store.change_job(job_id, lambda job: {"state": "cancelled"})
    assert len(_notes(world, job_id)) == 1

    deleted = world.store.delete_job(job_id)

    assert _notes(world, job_id) == [] and deleted.records >= 2


def test_a_parked_message_waits_a_quarter_of_the_pause_within_bounds():
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert park_seconds(now, now) == park_seconds(None, now) == PARK_MIN_SECONDS
    assert park_seconds(now - timedelta(minutes=40), now) == 600
    assert park_seconds(now - timedelta(days=1), now) == PARK_MAX_SECONDS


def _resume(world: World, job_id: str) -> None:
    manage.resume(job_id, storage=world.backend.storage, clock=world.clock)


def _notes(world: World, job_id: str) -> list[Record]:
    """The notes of the job's parked messages (checkpoint.parks)."""
    partition = layout.park_partition(job_id)
    return list(world.backend.storage.records.query(layout.TASKS_TABLE, partition))


# --------------------------------------------------------------------------- failure policy


def test_chunk_failed_without_retry_is_poisoned_on_its_first_attempt(world: World):
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)

    def bad_row() -> None:
        raise ChunkFailed("row 7 has no customer id", retry=False)

    world.during(job_id, bad_row)
    message = world.deliver()

    task = world.task(job_id)
    assert task.state == "poisoned" and task.attempt == 1
    reason = "failed on attempt 1, not retryable: ChunkFailed('row 7 has no customer id')"
    assert world.poisoned() == [(message.body, reason)]


def test_an_exception_type_listed_as_non_retryable_is_poisoned_at_once(world: World):
    world.monkeypatch.setattr(Verdicts, "non_retryable", (ValueError,))
    job_id = world.job([{"act": "fail"}])
    world.send(job_id)

    world.deliver()

    assert world.task(job_id).state == "poisoned" and world.task(job_id).attempt == 1


def test_within_its_tolerated_failures_a_job_completes_and_finalize_sees_the_poisoned(
    world: World,
):
    world.monkeypatch.setattr(Verdicts, "tolerated_failures", 1)
    world.monkeypatch.setattr(Verdicts, "non_retryable", (ValueError,))
    seen: list[Any] = []
    world.monkeypatch.setattr(
        Verdicts,
        "finalize",
        lambda self, params, summary: seen.append(
            (
                summary.done,
                summary.poisoned,
                [(p.index, p.error_type) for p in summary.poisoned_chunks()],
            )
        ),
    )
    job_id = world.job([{"act": "fail"}, {"act": "ok"}])
    for index in (0, 1):
        world.send(job_id, index=index)
        world.deliver()

    assert world.job_record(job_id).state == "finalizing"
    world.deliver()
    assert world.job_record(job_id).state == "done"
    assert seen == [(1, 1, [(0, "ValueError")])]


def test_past_its_tolerated_failures_a_job_fails_at_once_and_drops_the_rest(world: World):
    # Given a job tolerating 2 failures, whose first four chunks fail for good
    world.monkeypatch.setattr(Verdicts, "tolerated_failures", 2)
    world.monkeypatch.setattr(Verdicts, "non_retryable", (ValueError,))
    job_id = world.job([{"act": "fail"}] * 4 + [{"act": "ok"}])

    # When one worker takes them one after another, within the second it keeps the job's
    # record (no time passes here)
    for index in range(5):
        world.send(job_id, index=index)
        world.deliver()

    # Then the third failure failed the job, and the worker that recorded it started
    # nothing more of it: the other chunks were dropped unrun
    assert [world.task(job_id, index=i).attempt for i in range(5)] == [1, 1, 1, 0, 0]
    assert world.in_queue() == 0 and len(world.poisoned()) == 3
    job = world.job_record(job_id)
    assert job.state == "failed" and job.cancelled_on is not None
    assert job.error == (
        "3 chunk(s) poisoned when the job failed, more than the 2 tolerated; "
        "the remaining chunks were cancelled"
    )
    # and status counts what happened
    counts = to_json(job_status(world.store, job, world.clock.now()))["chunks"]
    assert (counts["poisoned"], counts["done"], counts["running"]) == (3, 0, 0)


def test_a_tolerated_fraction_counts_against_the_jobs_chunks(world: World):
    world.monkeypatch.setattr(Verdicts, "tolerated_failures", 0.5)
    world.monkeypatch.setattr(Verdicts, "non_retryable", (ValueError,))
    job_id = world.job([{"act": "fail"}, {"act": "ok"}, {"act": "ok"}, {"act": "fail"}])
    for index in range(4):
        world.send(job_id, index=index)
        world.deliver()
    assert world.job_record(job_id).state == "finalizing"  # 2 of 4 is within a half


# --------------------------------------------------------------------------- what is shown


def test_a_retrying_planning_shows_its_error_attempt_and_next_try(world: World):
    job_id = world.job(None, params={"split": "fail"})
    world.send(job_id, "plan")
    world.deliver()

    typed = job_status(world.store, world.job_record(job_id), world.clock.now())
    status = to_json(typed)

    (failed,) = status["failed"]
    assert failed["kind"] == "plan" and failed["attempt"] == 1 and failed["max_attempts"] == 2
    assert failed["error_message"] == "split failed" and failed["retry_at"] is not None
    text = render_status([typed])
    assert "  planning failed (attempt 1 of 2), next try at " in text
    assert "ValueError: split failed" in text


def test_status_shows_a_pause_and_a_cancel(world: World):
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, drain=True, storage=world.backend.storage, clock=world.clock)
    paused = job_status(world.store, world.job_record(job_id), world.clock.now())
    assert paused.paused and paused.drain
    assert "(paused since " in render_status([paused])
    _cancel(world, job_id, "input was wrong")
    cancelled = job_status(world.store, world.job_record(job_id), world.clock.now())
    assert cancelled.state == "cancelled" and cancelled.cancel_reason == "input was wrong"
    assert ": input was wrong" in render_status([cancelled])


def test_the_failure_report_lists_every_failed_and_poisoned_chunk(world: World):
    job_id = world.job([{"act": "fail", "row": "x" * 500}, {"act": "ok"}, {"act": "fail"}])
    world.set_task(job_id, state="retrying", attempt=1)  # chunk 0's last attempt next
    for index in (0, 2):
        world.send(job_id, index=index)
        world.deliver()

    entries = list(failure_report(world.store, job_id))

    assert [(e["index"], e["state"], e["attempt"]) for e in entries] == [
        (0, "poisoned", 2),
        (2, "retrying", 1),
    ]
    assert entries[0]["payload"] == {"act": "fail", "row": "x" * 500}  # as JSON, whole
    assert "ValueError: bad row 0" in entries[0]["traceback"]
    assert set(entries[1]) == set(REPORT_COLUMNS)


def test_the_report_command_writes_csv_and_json_lines(world: World, monkeypatch):
    job_id = world.job([{"act": "fail"}])
    world.send(job_id)
    world.deliver()
    storage = world.backend.storage
    monkeypatch.setattr(cli, "open_storage", lambda location, **_: Unclosed(storage))

    as_csv = CliRunner().invoke(cli.cli, ["report", job_id, "--csv"])
    as_json = CliRunner().invoke(cli.cli, ["report", job_id, "--json"])
    as_text = CliRunner().invoke(cli.cli, ["report", job_id])

    rows = list(csv.DictReader(io.StringIO(as_csv.output)))
    assert [row["error_message"] for row in rows] == ["bad row 0"]
    assert [json.loads(line)["state"] for line in as_json.output.splitlines()] == ["retrying"]
    assert "chunk #0 retrying after attempt 1 of 2, next try at" in as_text.output


def test_a_message_kind_survives_the_park(world: World):
    # The parked copy is the same message: its kind, job and index unchanged
    job_id = world.job([{"act": "ok"}])
    manage.pause(job_id, storage=world.backend.storage, clock=world.clock)
    world.send(job_id)
    body = world.deliver().body
    _resume(world, job_id)
    assert messages.decode(world.receive().body) == messages.decode(body)


def test_a_cancelled_job_is_not_redriven_and_the_advice_given_works(world: World):
    job_id = world.job([{"act": "ok"}])
    _cancel(world, job_id, "wrong input")
    with pytest.raises(JobEnded) as refused:
        redrive(world.store, world.backend.storage.queues, job_id)
    assert str(refused.value) == (
        f"job {job_id!r} was cancelled (wrong input) and a cancelled job is not redriven; "
        "to run it again, submit it under a new --job-id, or "
        f"`runner delete {job_id}` first and submit it under this id"
    )
    # Then what it advises runs it: deleted, the id takes a new job
    delete_job(job_id, storage=world.backend.storage)
    submit(Verdicts, {"payloads": []}, job_id=job_id, storage=world.backend.storage)
    assert world.job_record(job_id).state == "planning"
