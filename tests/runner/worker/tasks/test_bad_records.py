"""Bad stored data never stops a worker: garbled job and task records, and stored values
that do not decode, poison their one task with a clear reason (semantics §8).

Records are garbled the way another version or a hand edit in a storage explorer would
leave them, by writing to the record store directly; a burst worker then runs in this
process, on both backends. Rows of the embedded store whose bytes are not msgpack at
all (a hand edit of its SQLite file) are written into the file itself.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from checkpoint import codec, layout, messages, retries
from checkpoint.backends import open_storage
from checkpoint.backends.embedded import DATABASE_FILE
from checkpoint.clock import FakeClock
from checkpoint.errors import BadRecord, BatchFailed, Conflict
from checkpoint.records import JobRecord, TaskRecord
from checkpoint.retries import Budget
from checkpoint.storage import ANY_ETAG, BatchOp, Record, Storage, Where
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.cli.commands import cli
from runner.cli.render import render_status
from runner.cli.status import job_status
from runner.worker.loop import WorkerLoop, WorkerSettings
from runner.worker.tasks.life import handle
from tests.azurite import Azurite
from tests.backends import Backend

NOW = datetime(2030, 1, 1, tzinfo=UTC)
STATES = "waiting, running, retrying, done, poisoned"


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``): ``runner status``
    of the whole store reads every active job in full (on the session's Azurite, late
    in a loaded run, 125 s for that one test)."""
    return own_azurite


class Doubling(ChunkedJob):
    queue = "bad-records"
    lease_seconds = 30

    def split(self, params: dict[str, Any]) -> Any:
        return ({"n": n} for n in range(params["chunks"]))

    def process(self, chunk: Chunk) -> Any:
        return chunk.payload["n"] * 2


def _record(**properties: Any) -> Record:
    return Record(partition_key="p", row_key="job-x", properties=properties, etag="e1")


def _task(**properties: Any) -> TaskRecord:
    return TaskRecord.from_record("job-x", "chunk", 7, _record(**properties))


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("properties", "problem"),
    [
        ({"state": 42, "attempt": 0}, f"state 42 is not one of {STATES}"),
        ({"state": "sleeping", "attempt": 0}, f"state 'sleeping' is not one of {STATES}"),
        ({"attempt": 0}, "state is missing"),
        ({"state": "waiting", "attempt": "x"}, "attempt 'x' is not a whole number >= 0"),
        ({"state": "waiting", "attempt": True}, "attempt True is not a whole number >= 0"),
        ({"state": "waiting", "attempt": -1}, "attempt -1 is not a whole number >= 0"),
        ({"state": "waiting"}, "attempt is missing"),
        ({"state": "running", "attempt": 1, "owner": 5}, "owner 5 is not a text"),
        ({"state": "running", "attempt": 1, "message_id": b"m"}, "message_id b'm' is not a text"),
        (
            {"state": "running", "attempt": 1, "lease_until": "tomorrow"},
            "lease_until 'tomorrow' is not a UTC date and time",
        ),
        ({"state": "done", "attempt": 1, "updated_on": 3}, "updated_on 3 is not a UTC date"),
        ({"state": "retrying", "attempt": 1, "error_type": 9}, "error_type 9 is not a text"),
    ],
)
def test_a_garbled_task_record_is_a_bad_record_naming_it_and_the_problem(properties, problem):
    with pytest.raises(BadRecord, match="^chunk 7 of job 'job-x': ") as raised:
        _task(**properties)
    assert problem in str(raised.value)


def test_a_whole_number_read_back_as_a_double_is_a_count():
    # Azure reads an Int32 set by hand back as a double.
    assert _task(state="waiting", attempt=3.0).attempt == 3


@pytest.mark.parametrize(
    ("properties", "problem"),
    [
        ({"queue": "q", "state": "running"}, "job_type is missing"),
        ({"job_type": "m:C", "queue": "", "state": "running"}, "queue '' is not a text"),
        ({"job_type": "m:C", "queue": "q", "state": "stuck"}, "state 'stuck' is not one of"),
        ({"job_type": "m:C", "queue": "q", "state": "running", "total": "9"}, "total '9'"),
        ({"job_type": "m:C", "queue": "q", "state": "failed", "error": 1}, "error 1 is not"),
        (
            {"job_type": "m:C", "queue": "q", "state": "running", "paused": "yes"},
            "paused 'yes' is not true or false",
        ),
        (
            {"job_type": "m:C", "queue": "q", "state": "running", "drain": 1},
            "drain 1 is not true or false",
        ),
    ],
)
def test_a_garbled_job_record_is_a_bad_record_naming_it(properties, problem):
    with pytest.raises(BadRecord, match="^job 'job-x': ") as raised:
        JobRecord.from_record(_record(**properties))
    assert problem in str(raised.value)


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ({"payload": b"\xc1"}, "payload is not valid msgpack"),
        ({"payload": "typed by hand"}, "payload is a str, not msgpack bytes"),
        ({"payload": b"", "payload_blob": 7}, "payload_blob 7 is not a blob name"),
        ({"payload": b"", "payload_blob": "job-x/chunk/7/gone"}, "names no blob"),
    ],
)
def test_a_stored_value_that_cannot_be_read_is_a_bad_record_naming_the_field(
    backend: Backend, stored, problem
):
    store = CheckpointStore(backend.storage)
    store.ensure()
    task = _task(state="waiting", attempt=0, **stored)

    with pytest.raises(BadRecord, match="^chunk 7 of job 'job-x': ") as raised:
        store.value(task.properties, "payload", of=task.name)
    assert problem in str(raised.value)


# --------------------------------------------------------------------------- a worker


def _planned(storage: Storage, chunks: int) -> str:
    """A submitted job, planned by a worker in this process (chunks recorded and
    enqueued, none run yet)."""
    job_id = submit(
        Doubling, {"chunks": chunks}, job_id=f"bad-{uuid.uuid4().hex[:8]}", storage=storage
    )
    context = WorkerLoop(storage, [Doubling]).context
    (plan,) = storage.queues.receive(Doubling.queue, visibility_seconds=60)
    handle(context, Doubling.queue, plan, context.clock.monotonic())
    return job_id


def _garble(storage: Storage, job_id: str, index: int, changes: dict[str, Any]) -> None:
    partition = layout.shard_partition(job_id, layout.shard_of(index))
    storage.records.merge(
        layout.TASKS_TABLE, partition, layout.chunk_row(index), changes, etag=ANY_ETAG
    )


def _poison_reasons(storage: Storage, job_id: str) -> dict[int, str]:
    """Chunk index to reason of the job's messages in the poison queue."""
    found = storage.queues.peek(Doubling.poison_queue(), max_messages=32)
    reasons = {}
    for message in found:
        poisoned = messages.read_poisoned(message.body)
        assert poisoned is not None
        original = messages.decode(bytes(poisoned["original"]))
        if original.job_id == job_id:
            assert original.index not in reasons, "poisoned twice"
            reasons[original.index] = poisoned["reason"]
    return reasons


def _status(backend: Backend, location: str, *args: str, whole_store: bool = False) -> Any:
    result = CliRunner().invoke(cli, ["status", *args, "--storage", location])
    assert result.exception is None, result.output
    assert result.exit_code == 0
    # The whole store may hold other tests' failed tasks, shown with their tracebacks.
    assert whole_store or "Traceback" not in result.output
    return result.output


def _location(backend: Backend, request: pytest.FixtureRequest, tmp_path) -> str:
    if backend.name == "embedded":
        return str(tmp_path / "store")  # where the backend fixture opened it
    return request.getfixturevalue("azurite").connection_string


def test_three_garbled_chunks_are_poisoned_and_the_job_ends_failed(
    backend: Backend, request: pytest.FixtureRequest, tmp_path
):
    # Given a planned job of six chunks, three of whose records were then garbled
    storage = backend.storage
    job_id = _planned(storage, chunks=6)
    _garble(storage, job_id, 1, {"payload": "typed in a storage explorer"})
    _garble(storage, job_id, 2, {"state": 42, "attempt": "x"})
    _garble(storage, job_id, 3, {"payload": codec.encode({"n": 3})[:-1]})

    # When a burst worker runs until no work is left
    exit_code = WorkerLoop(storage, [Doubling], WorkerSettings(burst=True)).run()

    # Then each garbled chunk is poisoned with what is wrong with it, once
    assert exit_code == 0
    store = CheckpointStore(storage)
    expected = {
        1: f"chunk 1 of job {job_id!r}: payload is a str, not msgpack bytes",
        2: f"chunk 2 of job {job_id!r}: state 42 is not one of {STATES}",
        3: f"chunk 3 of job {job_id!r}: payload is not valid msgpack",
    }
    for index, reason in expected.items():
        task = store.get_task(job_id, "chunk", index)
        assert task.state == "poisoned"
        assert task.error is not None and task.error["type"] == "BadRecord"
        assert task.error["message"].startswith(reason)
    reasons = _poison_reasons(storage, job_id)
    assert sorted(reasons) == [1, 2, 3]
    assert all(reasons[i].startswith(reason) for i, reason in expected.items())
    # and the others are done, and the job failed instead of waiting for ever
    assert list(store.results(job_id)) == [(0, 0), (4, 8), (5, 10)]
    assert store.counts(job_id) == {"done": 3, "poisoned": 3}
    job = store.get_job(job_id)
    assert job.state == "failed" and job.error is not None and "3 chunk(s)" in job.error

    # And status shows them, one line each, without a traceback
    location = _location(backend, request, tmp_path)
    text = _status(backend, location, job_id)
    for index, reason in expected.items():
        assert f"poisoned chunk #{index} after" in text and reason in text
    report = json.loads(_status(backend, location, job_id, "--json"))
    assert report["state"] == "failed"
    assert {c["index"] for c in report["poisoned"]} == {1, 2, 3}


def test_a_chunk_whose_record_lost_its_payload_is_poisoned_never_run_on_none(
    backend: Backend,
):
    # Given a planned job whose chunk 1 record was replaced by one without its payload
    # (as after a row that could not be read was written over, then redriven)
    storage = backend.storage
    job_id = _planned(storage, chunks=2)
    partition = layout.shard_partition(job_id, layout.shard_of(1))
    storage.records.replace(
        layout.TASKS_TABLE,
        partition,
        layout.chunk_row(1),
        {"state": "waiting", "attempt": 0},
        etag=ANY_ETAG,
    )

    # When a burst worker runs, then the chunk is poisoned before any user code
    assert WorkerLoop(storage, [Doubling], WorkerSettings(burst=True)).run() == 0
    task = CheckpointStore(storage).get_task(job_id, "chunk", 1)
    assert task.state == "poisoned" and task.error is not None
    assert task.error["message"] == f"chunk 1 of job {job_id!r}: payload is missing"
    assert _poison_reasons(storage, job_id) == {1: task.error["message"]}


def test_status_shows_unreadable_records_without_a_traceback(
    backend: Backend, request: pytest.FixtureRequest, tmp_path
):
    # Given a running job with one chunk garbled while running, and a garbled job
    storage = backend.storage
    store = CheckpointStore(storage)
    good = f"ok-{uuid.uuid4().hex[:8]}"
    job, _ = store.create_job(good, "tests:Job", "status-q", {})
    store.add_chunks(good, 0, [0, 1])
    store.update_job(job, state="running", total=2)
    _garble(storage, good, 1, {"state": "running", "attempt": "x"})
    bad = f"bad-{uuid.uuid4().hex[:8]}"
    store.create_job(bad, "tests:Job", "status-q", {})
    storage.records.merge(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, bad, {"state": 42}, etag=ANY_ETAG
    )
    location = _location(backend, request, tmp_path)
    try:
        # When status is asked for, then each shows its problem in one line
        text = _status(backend, location, good)
        assert f"unreadable: chunk 1 of job {good!r}: attempt 'x' is not a whole" in text
        assert _status(backend, location, bad).strip() == (
            f"{bad}  unreadable: job {bad!r}: state 42 is not one of waiting, planning, "
            "running, finalizing, done, failed, cancelled"
        )
        everything = json.loads(_status(backend, location, "--json", whole_store=True))
        by_id = {entry["job_id"]: entry for entry in everything}
        assert "Traceback" not in json.dumps([by_id[bad], by_id[good]])
        assert by_id[bad]["state"] == "unreadable"
        assert by_id[good]["unreadable"] == [
            {
                "kind": "chunk",
                "index": 1,
                "problem": f"chunk 1 of job {good!r}: attempt 'x' is not a whole number >= 0",
            }
        ]
        # and the good chunk is still counted
        report = job_status(store, store.get_job(good), NOW)
        assert report.chunks.waiting == 2
        assert "unreadable" in render_status([report])
        # and a worker's list of jobs leaves the unreadable one out
        assert bad not in {j.job_id for j in store.list_jobs()}
    finally:
        # Azurite's tables are shared by the module's tests: leave no unreadable job behind
        storage.records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, bad, etag=ANY_ETAG)


def test_a_garbled_job_record_poisons_its_message_and_the_worker_goes_on(backend: Backend):
    # Given a planned job whose record was then garbled
    storage = backend.storage
    job_id = _planned(storage, chunks=2)
    storage.records.merge(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, {"total": "two"}, etag=ANY_ETAG
    )
    try:
        # When a worker receives its chunk messages
        context = WorkerLoop(storage, [Doubling]).context
        received = storage.queues.receive(Doubling.queue, max_messages=2, visibility_seconds=60)
        for message in received:
            assert handle(context, Doubling.queue, message, context.clock.monotonic()) is None

        # Then both are poisoned with the reason, and nothing was raised
        reasons = _poison_reasons(storage, job_id)
        assert sorted(reasons) == [0, 1]
        assert all(f"job {job_id!r}: total 'two'" in reason for reason in reasons.values())
        assert storage.queues.approximate_length(Doubling.queue) == 0
    finally:
        storage.records.delete(layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, etag=ANY_ETAG)


def test_poisoned_tasks_go_past_garbled_records_naming_them(backend: Backend):
    # Given a poisoned finalize and a done planning, both garbled afterwards
    store = CheckpointStore(backend.storage)
    job_id = f"pt-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "tests:Job", "pt-q", {})
    for kind, row, state in (
        ("plan", layout.PLAN_ROW, "done"),
        ("final", layout.FINAL_ROW, "poisoned"),
    ):
        store.write_task(store.ensure_task(job_id, kind), {"state": state})
        backend.storage.records.merge(
            layout.TASKS_TABLE,
            layout.control_partition(job_id),
            row,
            {"attempt": "x"},
            etag=ANY_ETAG,
        )

    # When the poisoned tasks are listed, the garbled finalize is named, unread; the
    # planning, garbled but saying it is done, is not poisoned and not listed
    (found,) = store.poisoned_tasks(job_id)
    kind, index, bad = found
    assert (kind, index) == ("final", 0) and isinstance(bad, BadRecord)
    assert str(bad).startswith(f"final of job {job_id!r}: attempt 'x'")


# --------------------------------------------------------------------------- undecodable rows

#: What a hand edit of the embedded store's file may leave in a record's row.
GARBAGE = b"\xff\xfe garbage"


@pytest.fixture
def embedded(tmp_path) -> Any:
    storage = open_storage(str(tmp_path / "store"))
    yield storage
    storage.close()


def _overwrite_row(tmp_path, table: str, partition: str, row: str, data: Any) -> None:
    """Write ``data`` over a record's stored bytes, as a hand edit of the SQLite file
    would: straight into the row, its ETag and time left as they were."""
    with closing(sqlite3.connect(tmp_path / "store" / DATABASE_FILE)) as conn, conn:
        changed = conn.execute(
            "UPDATE records SET props = ? WHERE tbl = ? AND pk = ? AND rk = ?",
            (data, table.lower(), partition, row),
        ).rowcount
    assert changed == 1


def _overwrite_chunk(tmp_path, job_id: str, index: int, data: Any = GARBAGE) -> None:
    partition = layout.shard_partition(job_id, layout.shard_of(index))
    _overwrite_row(tmp_path, layout.TASKS_TABLE, partition, layout.chunk_row(index), data)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (GARBAGE, "its stored row is not valid msgpack: "),
        (b"\x93\x01\x02\x03", "its stored row is a msgpack list, not a map of properties"),
        (codec.encode({"state": [1]}), "its stored row holds 'state': [1], not a property value"),
        (codec.encode({"n": 2**64 - 1}), "holds 'n': 18446744073709551615, not a property"),
        ("typed by hand", "its stored row is a str, not msgpack bytes"),
    ],
)
def test_an_undecodable_row_is_a_bad_record_naming_the_record_and_its_row(
    embedded: Storage, tmp_path, data, problem
):
    # Given a waiting chunk whose stored row was overwritten by hand
    store = CheckpointStore(embedded)
    job_id = f"rows-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "tests:Job", "rows-q", {})
    store.add_chunks(job_id, 0, [{"n": 0}, {"n": 1}])
    _overwrite_chunk(tmp_path, job_id, 1, data)
    partition = layout.shard_partition(job_id, layout.shard_of(1))

    # Then reading it raises BadRecord naming the chunk, its row and what is wrong
    row = f"row {layout.TASKS_TABLE}/{partition}/{layout.chunk_row(1)}: "
    with pytest.raises(BadRecord) as raised:
        store.get_task(job_id, "chunk", 1)
    assert str(raised.value).startswith(f"chunk 1 of job {job_id!r}: {row}")
    assert problem in str(raised.value)
    # and a scan lists it as unreadable, whatever state it asks for, and goes on
    for states in ((), ("running",), ("waiting", "done")):
        found = list(store.scan_chunks(job_id, states))
        assert [index for index, _ in found] == (
            [0, 1] if "waiting" in states or not states else [1]
        )
        assert isinstance(found[-1][1], BadRecord) and problem in str(found[-1][1])


def test_an_undecodable_row_is_written_over_only_by_who_saw_it_unreadable(
    embedded: Storage, tmp_path
):
    # Given a record read whole, then overwritten by hand (its ETag kept)
    records = embedded.records
    records.create_table("rows")
    etag = records.insert("rows", "p", "r", {"state": "waiting", "payload": b"planned"})
    _overwrite_row(tmp_path, "rows", "p", "r", GARBAGE)

    # When it is read, it comes with its keys and a time, no properties, and an ETag of
    # its own
    found = records.get("rows", "p", "r")
    assert (found.partition_key, found.row_key, found.properties) == ("p", "r", {})
    assert found.unreadable is not None and "not valid msgpack" in found.unreadable
    assert found.timestamp is not None and found.etag != etag
    # a query returns it whatever its conditions on properties, so nothing hides it
    for where in ([], [Where("state", "eq", "done")], [Where("RowKey", "eq", "r")]):
        assert [r.etag for r in records.query("rows", "p", where)] == [found.etag]
    assert list(records.query("rows", "p", [Where("RowKey", "gt", "r")])) == []
    assert [r.unreadable for r in records.query("rows", "p", select=["state"])] == [
        found.unreadable
    ]

    # Then a merge by whoever saw it readable (or planned it) is refused: it would keep
    # nothing of what it never saw
    with pytest.raises(Conflict):
        records.merge("rows", "p", "r", {"state": "running"}, etag=etag)
    with pytest.raises(BatchFailed):
        records.batch("rows", "p", [BatchOp("merge", "r", {"state": "running"}, etag)])
    # and the one who saw it unreadable writes a readable record over it
    records.merge("rows", "p", "r", {"state": "poisoned"}, etag=found.etag)
    assert records.get("rows", "p", "r").properties == {"state": "poisoned"}
    # a write with that ETag after it is stale, as for any ETag
    with pytest.raises(Conflict):
        records.merge("rows", "p", "r", {"state": "waiting"}, etag=found.etag)


def test_an_undecodable_row_can_be_replaced_or_deleted_by_its_etag(embedded: Storage, tmp_path):
    records = embedded.records
    records.create_table("rows")
    for row in ("a", "b"):
        records.insert("rows", "p", row, {"n": 1})
        _overwrite_row(tmp_path, "rows", "p", row, GARBAGE)
    first, second = records.get("rows", "p", "a"), records.get("rows", "p", "b")

    records.replace("rows", "p", "a", {"n": 2}, etag=first.etag)
    records.delete("rows", "p", "b", etag=second.etag)

    assert records.get("rows", "p", "a").properties == {"n": 2}
    assert [r.row_key for r in records.query("rows", "p")] == ["a"]


def test_an_undecodable_counter_row_is_a_bad_record(embedded: Storage, tmp_path):
    store = CheckpointStore(embedded)
    job_id = f"rows-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "tests:Job", "rows-q", {})
    partition = layout.shard_partition(job_id, 3)
    _overwrite_row(tmp_path, layout.TASKS_TABLE, partition, layout.COUNTS_ROW, GARBAGE)

    with pytest.raises(BadRecord, match="^shard 3 counter of job .*not valid msgpack"):
        store.counts(job_id)


def test_an_undecodable_waiting_chunk_is_poisoned_and_the_job_ends(embedded: Storage, tmp_path):
    # Given a planned job of three chunks, the row of waiting chunk 1 overwritten by hand
    job_id = _planned(embedded, chunks=3)
    _overwrite_chunk(tmp_path, job_id, 1)
    location = str(tmp_path / "store")
    # (status names it at once, and shows the rest)
    report = json.loads(_status_of(location, job_id, "--json"))
    (unreadable,) = report["unreadable"]
    assert (unreadable["kind"], unreadable["index"]) == ("chunk", 1)
    assert "its stored row is not valid msgpack" in unreadable["problem"]

    # When a burst worker runs until no work is left
    exit_code = WorkerLoop(embedded, [Doubling], WorkerSettings(burst=True)).run()

    # Then the chunk is poisoned with the reason, once, and the job ended failed
    assert exit_code == 0
    store = CheckpointStore(embedded)
    reason = f"chunk 1 of job {job_id!r}: row {layout.TASKS_TABLE}/"
    task = store.get_task(job_id, "chunk", 1)
    assert task.state == "poisoned"
    assert task.error is not None and task.error["type"] == "BadRecord"
    assert task.error["message"].startswith(reason)
    assert "its stored row is not valid msgpack" in task.error["message"]
    reasons = _poison_reasons(embedded, job_id)
    assert list(reasons) == [1] and reasons[1] == task.error["message"]
    assert list(store.results(job_id)) == [(0, 0), (2, 4)]
    assert store.counts(job_id) == {"done": 2, "poisoned": 1}
    assert store.get_job(job_id).state == "failed"
    # and status shows why, in one line, without a traceback
    text = _status_of(location, job_id)
    assert "poisoned chunk #1 after" in text and "its stored row is not valid msgpack" in text
    assert "Traceback" not in text and "unexpected" not in text


def test_a_row_garbled_under_a_running_chunk_fences_its_checkpoint(embedded: Storage, tmp_path):
    # Given a chunk claimed and running, whose row is then overwritten by hand
    store = CheckpointStore(embedded)
    job_id = f"rows-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, "tests:Job", "rows-q", {})
    store.add_chunks(job_id, 0, [{"n": 0}])
    claimed = store.write_task(store.get_task(job_id, "chunk", 0), {"state": "running"})
    _overwrite_chunk(tmp_path, job_id, 0)

    # When it checkpoints, the write is refused as another writer's would be
    with pytest.raises(Conflict):
        store.write_task(claimed, {}, {"progress": 5})
    # and the record is still unreadable, not a record missing its payload
    with pytest.raises(BadRecord, match="not valid msgpack"):
        store.get_task(job_id, "chunk", 0)


def _status_of(location: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["status", *args, "--storage", location])
    assert result.exit_code == 0, result.output
    return result.output


def test_redrive_goes_past_an_unreadable_poisoned_record(embedded: Storage, tmp_path):
    # Given a job whose chunks 0 and 2 were poisoned, and then chunk 2's record garbled
    job_id = _planned(embedded, chunks=3)
    _garble(embedded, job_id, 0, {"payload": "typed in a storage explorer"})
    _garble(embedded, job_id, 2, {"payload": "typed in a storage explorer"})
    WorkerLoop(embedded, [Doubling], WorkerSettings(burst=True)).run()
    store = CheckpointStore(embedded)
    assert store.counts(job_id) == {"done": 1, "poisoned": 2}
    _garble(embedded, job_id, 0, {"payload": codec.encode({"n": 0})})  # mended
    _garble(embedded, job_id, 2, {"attempt": "x"})  # garbled again, still poisoned

    # When its poisoned chunks are redriven
    result = CliRunner().invoke(
        cli, ["poison", "redrive", job_id, "--storage", str(tmp_path / "store")]
    )

    # Then the readable one is redriven and the unreadable one listed, left as it is
    assert result.exit_code == 1
    assert f"redrove 1 poisoned task(s) of {job_id}" in result.output
    assert (
        f"not redriven, unreadable: chunk 2 of job {job_id!r}: attempt 'x' is not a whole"
        in result.output
    )
    assert isinstance(result.exception, BadRecord)  # `runner` prints it as its error line
    assert str(result.exception).startswith(f"1 record(s) of {job_id} cannot be read")
    assert store.get_task(job_id, "chunk", 0).state == "waiting"
    assert store.get_job(job_id).state == "running"
    # its poison message stays in the poison queue (hidden 30 s by the scan that went
    # past it); chunk 0's went back
    assert embedded.queues.approximate_length(Doubling.poison_queue()) == 1
    WorkerLoop(embedded, [Doubling], WorkerSettings(burst=True)).run()
    assert dict(store.results(job_id)) == {0: 0, 1: 2}


def test_a_stale_unreadable_heartbeat_is_removed_by_its_write_time(embedded: Storage, tmp_path):
    # Given two heartbeat rows overwritten by hand: one written long ago, one just now
    book = WorkerBook(embedded.records)
    clock = FakeClock()
    budget = Budget(retries.STANDALONE, clock)
    embedded.records.create_table(layout.WORKERS_TABLE)
    for worker in ("old", "new"):
        embedded.records.upsert(layout.WORKERS_TABLE, layout.WORKERS_PARTITION, worker, {"x": 1})
        _overwrite_row(tmp_path, layout.WORKERS_TABLE, layout.WORKERS_PARTITION, worker, GARBAGE)
    written = embedded.records.get(layout.WORKERS_TABLE, layout.WORKERS_PARTITION, "new").timestamp
    assert written is not None
    with closing(sqlite3.connect(tmp_path / "store" / DATABASE_FILE)) as conn, conn:
        conn.execute("UPDATE records SET ts = 0 WHERE rk = 'old'")

    # When stale heartbeats are removed
    removed = book.remove_stale(written + timedelta(seconds=1), budget)

    # Then only the old one went; both were listed as unreadable
    assert removed == 1
    left = embedded.records.query(layout.WORKERS_TABLE, layout.WORKERS_PARTITION)
    assert [r.row_key for r in left] == ["new"]
    (bad,) = book.scan(budget)
    assert isinstance(bad, BadRecord) and "worker 'new': row " in str(bad)
