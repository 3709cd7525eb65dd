"""Deleting jobs (``jobs.delete``, ``jobs.purge``, ``runner delete|purge``) and what a
worker does with a deleted job's leftover messages (docs/semantics.md §17), in this
process on both backends.

A worker is driven as in tests/runner/worker/tasks/test_task_lifecycle.py (:class:`World`: one
worker serving a fresh queue, messages received and handed to ``runner.worker.tasks.life.handle``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from checkpoint import deletion, layout, messages
from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError, JobNotEnded, JobNotFound, NotFound
from checkpoint.records import SPILL_BYTES
from checkpoint.storage import ANY_ETAG, NEVER_EXPIRES, QueueMessage, Storage
from checkpoint.store import CheckpointStore
from jobs import delete, purge, submit
from jobs.retention import parse_age
from runner.cli.commands import cli
from runner.cli.redrive import redrive
from runner.worker.loop import assemble
from runner.worker.tasks.life import handle
from tests.backends import Backend
from tests.e2e.processes import ROOT
from tests.runner.world import FINALIZED, LEASE_SECONDS, VERDICTS, Verdicts, World

BIG = "x" * SPILL_BYTES  # makes a value spill to a blob


@pytest.fixture
def world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = World(backend, monkeypatch)
    yield made
    assert made.meanwhile.unused == []


def _submit(world: World, payloads: list[Any], params: dict[str, Any] | None = None) -> str:
    """A job submitted as a user does (its planning message on the world's queue)."""
    job_id = f"r-{uuid.uuid4().hex[:10]}"
    return submit(
        Verdicts, {"payloads": payloads, **(params or {})}, job_id=job_id, storage=_plain(world)
    )


def _plain(world: World) -> Storage:
    return world.backend.storage


def _run(world: World, job_id: str) -> None:
    """Hand every visible message to the worker until the job's queue has none left."""
    while batch := world.receive_all():
        for message in batch:
            handle(world.worker, world.queue, message, world.clock.monotonic())
    assert world.job_record(job_id).state == "done"


def _send(world: World, job_id: str, queue: str | None = None, index: int = 0) -> bytes:
    """A chunk message of the job (as it stands now), put on ``queue``."""
    job = world.job_record(job_id)
    task = messages.TaskMessage("chunk", VERDICTS, job_id, index, incarnation=job.incarnation)
    body = messages.encode(task)
    world.backend.storage.queues.send(queue or world.queue, body, ttl_seconds=NEVER_EXPIRES)
    return body


def _poisoned_copy(world: World, body: bytes) -> None:
    """The message's copy in the poison queue, as the poison router leaves it."""
    record = messages.poisoned(body, world.queue, "failed", datetime.now(UTC).isoformat())
    queues = world.backend.storage.queues
    queues.send(Verdicts.poison_queue(), record, ttl_seconds=NEVER_EXPIRES)


def _stored(world: World, job_id: str) -> dict[str, Any]:
    """Everything of the job in storage: its record's and task records' ETags, its
    blobs and its visible messages in both queues."""
    storage = world.backend.storage
    records = {}
    for partition in deletion.task_partitions(job_id):
        for record in storage.records.query(layout.TASKS_TABLE, partition):
            records[(partition, record.row_key)] = record.etag
    try:
        job = storage.records.get(layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id)
        records[("jobs", job_id)] = job.etag
    except NotFound:
        pass
    blobs = sorted(b.name for b in storage.blobs.list(layout.DATA_CONTAINER, f"{job_id}/"))
    return {"records": records, "blobs": blobs, "messages": _messages(world, job_id)}


def _messages(world: World, job_id: str) -> list[tuple[str, bytes]]:
    found = []
    for queue in (world.queue, Verdicts.poison_queue()):
        for message in world.backend.storage.queues.peek(queue, max_messages=32):
            task = messages.named_task(message.body)
            if task is not None and task.job_id == job_id:
                found.append((message.id, message.body))
    return sorted(found)


# --------------------------------------------------------------------------- delete


def test_delete_removes_all_of_the_job_and_nothing_of_another_on_its_queue(world: World):
    # Given a job with spilled params and payloads that ran to done, a duplicate of one
    # of its chunk messages still on the queue and a copy in the poison queue
    gone = _submit(world, [{"act": "ok", "pad": BIG}] * 2, {"pad": BIG})
    _run(world, gone)
    # And another job of the same type on the same queue, planned, with spilled values,
    # its chunk messages waiting and a message of its own in the poison queue
    kept = _submit(world, [{"act": "ok", "pad": BIG}] * 3, {"pad": BIG})
    world.deliver()  # its planning
    _poisoned_copy(world, _send(world, kept, index=2))
    _poisoned_copy(world, _send(world, gone))
    before = _stored(world, kept)
    assert len(before["messages"]) == 5 and len(before["blobs"]) == 4
    assert len(_stored(world, gone)["messages"]) == 2

    deleted = delete(gone, storage=_plain(world))

    # Then every record, blob and visible message of the job is gone: its record, its
    # planning, finalize and two chunks, its 16 shard counters; its params and payloads
    assert (deleted.job_id, deleted.state, deleted.dry_run) == (gone, "done", False)
    assert (deleted.records, deleted.blobs, deleted.messages) == (1 + 2 + 2 + 16, 3, 2)
    assert _stored(world, gone) == {"records": {}, "blobs": [], "messages": []}
    with pytest.raises(JobNotFound):
        world.job_record(gone)
    # And nothing of the other job changed (its messages were handed back visible)
    assert _stored(world, kept) == before
    assert world.store.counts(kept) == {"done": 0, "poisoned": 0}

    # And it still runs to done
    _run(world, kept)
    assert FINALIZED[kept] == [[(0, 0), (1, 10), (2, 20)]]


def test_a_deleted_jobs_id_runs_again_and_its_old_messages_are_deleted_unrun(
    world: World, caplog: pytest.LogCaptureFixture
):
    # Given a running job of three chunks: one done here (this worker remembers its
    # record and its total), two chunk messages held unfinished (by a worker, by a
    # backoff) when it is cancelled and deleted
    job_id = _submit(world, [{"act": "ok"}] * 3)
    world.deliver()
    first, *held = world.receive_all()
    handle(world.worker, world.queue, first, world.clock.monotonic())
    old = world.job_record(job_id)
    deleted = delete(job_id, force=True, storage=_plain(world))
    assert deleted.state == "cancelled" and deleted.messages == 0  # both invisible

    # When the id is submitted again, with two chunks, and planned by another worker
    assert _submit_again(world, job_id, [{"act": "ok"}] * 2) == job_id
    new = world.job_record(job_id)
    assert new.incarnation not in (None, old.incarnation)
    other = assemble(_plain(world), [Verdicts], world.clock, "worker-b")
    handle(other, world.queue, world.receive(), world.clock.monotonic())
    assert world.job_record(job_id).total == 2
    # And the old job's messages surface here, beside the new job's
    for message in held:
        world.let_pass(LEASE_SECONDS, message)
    received = world.receive_all()
    leftovers = [m for m in received if m.id in {h.id for h in held}]
    assert len(leftovers) == 2 and len(received) == 4
    caplog.set_level(logging.INFO, logger="runner.worker.tasks")
    for message in leftovers:
        handle(world.worker, world.queue, message, world.clock.monotonic())

    # Then they are deleted unrun, not poisoned, and the new job's chunks are untouched
    assert {m.id for m in leftovers} <= set(world.log.deleted)
    assert world.poisoned() == []
    assert [(t.state, t.attempt) for t in world.store.chunks(job_id)] == [("waiting", 0)] * 2
    assert caplog.text.count("left over from an earlier job of that id, deleted since") == 2
    # And the new job runs to done here, finalized once with its own results
    for message in received:
        if message not in leftovers:
            handle(world.worker, world.queue, message, world.clock.monotonic())
    _run(world, job_id)
    assert FINALIZED[job_id] == [[(0, 0), (1, 10)]]


def _submit_again(world: World, job_id: str, payloads: list[Any]) -> str:
    return submit(Verdicts, {"payloads": payloads}, job_id=job_id, storage=_plain(world))


def test_a_message_whose_job_was_deleted_is_deleted_unrun_not_poisoned(world: World):
    # Given a chunk message held while its job (done) was deleted
    job_id = _submit(world, [{"act": "ok"}])
    _run(world, job_id)
    _send(world, job_id)
    message = world.receive()
    delete(job_id, storage=_plain(world))

    world.let_pass(LEASE_SECONDS, message)
    world.deliver()

    assert world.in_queue() == 0 and world.poisoned() == []


def test_a_remembered_job_deleted_since_is_looked_up_again_for_a_chunk_gone(world: World):
    # Given a worker that ran a chunk of a job (and remembers its record), and another
    # chunk message held while the job was cancelled and deleted
    job_id = _submit(world, [{"act": "ok"}] * 2)
    world.deliver()
    first, second = world.receive_all()
    handle(world.worker, world.queue, first, world.clock.monotonic())
    delete(job_id, force=True, storage=_plain(world))

    world.let_pass(LEASE_SECONDS, second)
    world.deliver()

    # Then its missing record is no reason to poison it: the job is gone
    assert world.in_queue() == 0 and world.poisoned() == []


def test_delete_refuses_a_job_that_has_not_ended_and_with_force_cancels_it_first(
    world: World,
):
    job_id = _submit(world, [{"act": "ok"}] * 2)
    world.deliver()

    with pytest.raises(JobNotEnded, match=f"job '{job_id}' is running, not ended"):
        delete(job_id, storage=_plain(world))
    assert world.job_record(job_id).state == "running"

    deleted = delete(job_id, force=True, storage=_plain(world))

    assert deleted.state == "cancelled"
    assert deleted.messages == 2 and world.in_queue() == 0
    assert _stored(world, job_id) == {"records": {}, "blobs": [], "messages": []}


def test_deleting_a_missing_job_is_a_clear_error(world: World):
    with pytest.raises(JobNotFound, match="no job 'never-submitted' in "):
        delete("never-submitted", storage=_plain(world))


@pytest.mark.parametrize("crash_at", ["second partition", "blobs", "sweep", "job record"])
def test_deleting_again_after_a_crash_midway_finishes_the_job(
    world: World, monkeypatch: pytest.MonkeyPatch, crash_at: str
):
    # Given a done job with spilled values and a message left on its queue, whose
    # deletion dies midway
    job_id = _submit(world, [{"act": "ok", "pad": BIG}] * 3, {"pad": BIG})
    _run(world, job_id)
    _send(world, job_id)
    with monkeypatch.context() as patched:
        _crash(patched, world, crash_at)
        with pytest.raises(_Crash):
            delete(job_id, storage=_plain(world))

    # Then the job is still listed, marked as being deleted, and a worker meeting one
    # of its messages deletes it unrun
    job = world.job_record(job_id)
    assert job.state == "done" and job.deleting_on is not None
    assert job.stop_order == "cancelled"  # its running tasks stop as a cancelled job's
    assert job_id in [j.job_id for j in world.store.list_jobs()]
    if crash_at != "job record":  # else its message was swept already
        world.deliver()
        assert world.in_queue() == 0 and world.poisoned() == []

    # And deleting again finishes it
    deleted = delete(job_id, storage=_plain(world))
    assert deleted.state == "done"
    assert _stored(world, job_id) == {"records": {}, "blobs": [], "messages": []}


class _Crash(Exception):
    """The process died here."""


def _crash(patched: pytest.MonkeyPatch, world: World, where: str) -> None:
    def crash(*args: Any, **kwargs: Any) -> Any:
        raise _Crash(where)

    if where == "second partition":
        real = deletion.delete_partition
        calls = []

        def once(*args: Any) -> int:
            calls.append(args)
            if len(calls) == 2:
                raise _Crash(where)
            return real(*args)

        patched.setattr(deletion, "delete_partition", once)
    elif where == "blobs":
        patched.setattr(deletion, "delete_blobs", crash)
    elif where == "sweep":
        patched.setattr(deletion, "sweep", crash)
    else:  # the job record is deleted in a batch with its index rows
        records = world.backend.storage.records
        real_batch = records.batch

        def crash_on_jobs(table: str, *args: Any, **kwargs: Any) -> Any:
            if table == layout.JOBS_TABLE:
                raise _Crash(where)
            return real_batch(table, *args, **kwargs)

        patched.setattr(records, "batch", crash_on_jobs)


def test_a_redrive_leaves_an_earlier_jobs_poison_messages_of_that_id_alone(world: World):
    # Given a failed job with a poisoned chunk whose poison message is gone, and in the
    # poison queue a message of an earlier job of that id (deleted since)
    job_id = world.job([{"act": "ok"}])
    world.end_chunk(job_id, "poisoned")
    world.store.change_job(job_id, lambda job: {"state": "failed"})
    earlier = messages.TaskMessage("chunk", VERDICTS, job_id, 0, incarnation="e" * 16)
    _poisoned_copy(world, messages.encode(earlier))

    assert redrive(world.store, world.backend.storage.queues, job_id).count == 1

    # Then the chunk gets a fresh message of its own job; the earlier one stays put
    current = world.job_record(job_id).incarnation
    assert [(m.index, m.incarnation) for m in world.visible()] == [(0, current)]
    assert world.backend.storage.queues.approximate_length(Verdicts.poison_queue()) == 1


# --------------------------------------------------------------------------- the sweep


def test_the_sweep_looks_at_each_message_once_and_hands_the_others_back(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    # Given 40 messages of other jobs and, past them, two of the job; a sweep that may
    # look at 36
    others = [_send(world, world.job([{"act": "ok"}])) for _ in range(40)]
    job_id = world.job([{"act": "ok"}] * 2)
    mine = [_send(world, job_id, index=i) for i in range(2)]
    monkeypatch.setattr(deletion, "SWEEP_MAX_MESSAGES", 36)
    receives = _count_receives(world, monkeypatch)

    deleted = deletion.sweep(
        world.backend.storage.queues, world.queue, job_id, world.store.budget()
    )

    # Then it stopped after two receives; every other job's message it saw is visible
    # again at once, and it deleted only the job's messages it reached
    assert len(receives) == 2
    left = _visible_bodies(world)
    assert set(others) <= set(left)
    assert deleted == 2 - sum(body in left for body in mine)


def test_a_sweep_racing_workers_that_hand_messages_back_ends(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    # Given a queue of other jobs' messages that competing workers keep handing back
    # (visible again before each receive)
    for _ in range(5):
        _send(world, world.job([{"act": "ok"}]))
    queues = world.backend.storage.queues
    real = queues.receive
    seen: dict[str, str] = {}

    def receive(queue: str, **options: Any) -> list[QueueMessage]:
        for message_id, receipt in list(seen.items()):
            seen[message_id] = queues.update(
                queue, message_id, receipt, visibility_seconds=0
            ).pop_receipt
        found = real(queue, **options)
        seen.update({m.id: m.pop_receipt or "" for m in found})
        return found

    monkeypatch.setattr(queues, "receive", receive)

    assert deletion.sweep(queues, world.queue, "r-nobody", world.store.budget()) == 0
    monkeypatch.setattr(queues, "receive", real)

    # Then it ended at the first receive that brought nothing new
    assert len(_visible_bodies(world)) == 5


def _count_receives(world: World, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    queues = world.backend.storage.queues
    real = queues.receive
    calls: list[int] = []

    def receive(queue: str, **options: Any) -> list[QueueMessage]:
        found = real(queue, **options)
        calls.append(len(found))
        return found

    monkeypatch.setattr(queues, "receive", receive)
    return calls


def _visible_bodies(world: World) -> list[bytes]:
    queues = world.backend.storage.queues
    found = queues.receive(world.queue, max_messages=32, visibility_seconds=1)
    found += queues.receive(world.queue, max_messages=32, visibility_seconds=1)
    return [m.body for m in found]


# --------------------------------------------------------------------------- purge


def test_purge_selects_ended_jobs_by_age_and_state_and_a_dry_run_deletes_nothing(
    world: World,
):
    # Given jobs of each ended state last updated 8 days ago, a done one updated 6 days
    # ago and a running one updated 8 days ago
    jobs = {
        name: _aged(world, state, days)
        for name, state, days in [
            ("old done", "done", 8),
            ("old failed", "failed", 8),
            ("old cancelled", "cancelled", 8),
            ("recent done", "done", 6),
            ("old running", "running", 8),
        ]
    }
    ours = set(jobs.values())

    def chosen(found: list[Any]) -> set[str]:
        return {d.job_id for d in found if d.job_id in ours}

    # When a dry run asks for done and failed jobs over 7 days old
    seven_days = parse_age("7d")
    dry = purge(seven_days, states=["done", "failed"], dry_run=True, storage=_plain(world))

    # Then it names the old done and failed jobs, and deletes nothing
    assert chosen(dry) == {jobs["old done"], jobs["old failed"]}
    assert all(d.dry_run and d.records == 0 for d in dry)
    assert {j.job_id for j in world.store.list_jobs()} >= ours

    # When purged for real, every ended state
    done = purge(seven_days, storage=_plain(world))

    # Then exactly the old ended jobs are gone
    assert chosen(done) == {jobs["old done"], jobs["old failed"], jobs["old cancelled"]}
    assert all(d.records == 1 + 16 + 1 and not d.dry_run for d in done if d.job_id in ours)
    left = {j.job_id for j in world.store.list_jobs()} & ours
    assert left == {jobs["recent done"], jobs["old running"]}


def _aged(world: World, state: str, days: int) -> str:
    """A job of one chunk in ``state``, last updated ``days`` ago by the real clock."""
    job_id = world.job([{"act": "ok"}])
    updated = datetime.now(UTC) - timedelta(days=days)
    world.backend.storage.records.merge(
        layout.JOBS_TABLE,
        layout.JOBS_PARTITION,
        job_id,
        {"state": state, "updated_on": updated},
        etag=ANY_ETAG,
    )
    return job_id


@pytest.mark.parametrize(
    ("text", "seconds"), [("45s", 45), ("30m", 1800), ("12h", 43200), ("7d", 604800)]
)
def test_an_age_is_a_whole_number_and_a_unit(text: str, seconds: int):
    assert parse_age(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["7", "7w", "-1d", "1.5h", "d", ""])
def test_anything_else_is_not_an_age(text: str):
    with pytest.raises(ConfigurationError, match="is not an age: use a whole number and a unit"):
        parse_age(text)


def test_purge_refuses_a_state_that_is_not_an_end(tmp_path):
    with pytest.raises(ConfigurationError, match="choose from done, failed, cancelled"):
        purge(timedelta(days=1), states=["running"], storage=str(tmp_path))


# --------------------------------------------------------------------------- the command


def test_the_commands_delete_purge_and_refuse_as_documented(tmp_path):
    # Given a store with a done job, a running one, and a done one a week old
    location = str(tmp_path / "store")
    with_store = CheckpointStore(open_storage(location))
    done, running, old = (f"cli-{name}" for name in ("done", "running", "old"))
    for job_id, state in [(done, "done"), (running, "running"), (old, "done")]:
        with_store.create_job(job_id, "tests:Job", "cli-q", {})
        with_store.change_job(job_id, lambda job, s=state: {"state": s})
    with_store.storage.records.merge(
        layout.JOBS_TABLE,
        layout.JOBS_PARTITION,
        old,
        {"updated_on": datetime.now(UTC) - timedelta(days=8)},
        etag=ANY_ETAG,
    )
    invoke = CliRunner().invoke

    deleted = invoke(cli, ["delete", done, "--json", "--storage", location])
    assert deleted.exit_code == 0, deleted.output
    assert '"records": 17' in deleted.output and '"state": "done"' in deleted.output

    dry = invoke(cli, ["purge", "--older-than", "7d", "--dry-run", "--storage", location])
    assert dry.exit_code == 0, dry.output
    assert f"would delete {old} (done, updated " in dry.output
    assert dry.output.rstrip().endswith("would delete 1 job(s) (dry run)")

    purged = invoke(cli, ["purge", "--older-than", "7d", "--state", "done", "--storage", location])
    assert purged.output.splitlines() == [
        f"deleted {old} (done): 17 record(s), 0 blob(s), 0 message(s)",
        "deleted 1 job(s)",
    ]

    bad_age = invoke(cli, ["purge", "--older-than", "7 weeks", "--storage", location])
    assert bad_age.exit_code == 2
    assert "Invalid value for '--older-than': '7 weeks' is not an age" in bad_age.output

    # And a running job is refused in one line, exit 1; --force cancels and deletes it
    refused = _runner("delete", running, "--storage", location)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"runner: error: job '{running}' is running, not ended; --force (force=True) "
        "cancels it first, then deletes it"
    ]
    forced = invoke(cli, ["delete", running, "--force", "--storage", location])
    assert forced.output.startswith(f"deleted {running} (cancelled): 17 record(s)")
    assert with_store.list_jobs() == []


def _runner(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console entry point, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", "from runner.cli.entry import main; main()", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_delete_and_purge_sweep_dead_attempts_beside_published_outputs(world: World, tmp_path):
    # Given a job that ended without finalize, whose chunk published an output at a
    # plain path beside a dead attempt's directory, and one at a URI nothing local reaches
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    out = tmp_path / "out" / job_id
    published, dead = out / "chunk-000000", out / "_attempts" / "chunk-000000.deadbeef0000"
    for folder in (published, dead):
        folder.mkdir(parents=True)
        (folder / "part-0.parquet").write_bytes(b"rows")
    record = {
        "rows": 1,
        "checksum": None,
        "format": "parquet",
        "attempt": "0123456789ab",
        "path": str(published),
    }
    uri = "abfss://c@a.dfs.core.windows.net/out/chunk-000001"
    world.set_task(job_id, values={"outputs": {str(published): record, uri: record}})
    world.store.update_job(world.job_record(job_id), state="failed")

    delete(job_id, storage=_plain(world))

    # Then the dead attempt's litter went, the published output stayed
    assert not dead.exists() and not (out / "_attempts").exists()
    assert (published / "part-0.parquet").read_bytes() == b"rows"


def test_a_chunk_whose_outputs_cannot_be_read_is_deleted_unswept(world: World):
    # Given a job whose one chunk's outputs field is garbled and the other's record
    job_id = world.job([{"act": "ok"}, {"act": "ok"}])
    world.garble(job_id, {"outputs": b"\xc1 not msgpack"})
    world.garble(job_id, {"state": "sideways"}, row=layout.chunk_row(1))
    world.store.update_job(world.job_record(job_id), state="failed")

    delete(job_id, storage=_plain(world))

    with pytest.raises(JobNotFound):
        world.job_record(job_id)
