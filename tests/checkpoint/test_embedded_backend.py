"""Tests only the embedded backend needs: processes, files, reopening, locking.

The storage semantics themselves are pinned by the contract suite (``tests/contract``),
which runs on this backend too. Here: several processes and several ``Storage`` objects
sharing one directory, persistence, the blob folder on disk, batch rollback and the
translation of a locked database. Timing uses a :class:`FakeClock`, except the
multi-process test, which runs on the real clock with leases far longer than it takes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from checkpoint.backends import open_storage
from checkpoint.backends.embedded import blobs as embedded_blobs
from checkpoint.backends.embedded import db as embedded_db
from checkpoint.backends.embedded import open_embedded
from checkpoint.clock import FakeClock
from checkpoint.errors import (
    AlreadyExists,
    BatchFailed,
    Conflict,
    LeaseLost,
    NotFound,
    StorageError,
    Throttled,
)
from checkpoint.storage import ANY_ETAG, BatchOp, PropertyValue, Storage, Where

EVERY_TYPE: dict[str, PropertyValue] = {
    "text": "héllo ✓ 😀",
    "empty": "",
    "count": 7,
    "big": 2**63 - 1,
    "small": -(2**63),
    "ratio": 0.5,
    "whole_float": 2.0,
    "yes": True,
    "no": False,
    "raw": bytes(range(256)),
    "when": datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock):
    storage = open_embedded(tmp_path / "store", clock=clock)
    yield storage
    storage.close()


def _assert_same_types(actual, expected) -> None:
    assert dict(actual) == dict(expected)
    for name, value in expected.items():
        assert type(actual[name]) is type(value), name
    assert actual["when"].tzinfo is not None


# --------------------------------------------------------------------------- processes


def _receive_all(directory: str, queue: str, ready, result_file: str) -> None:
    """Child process: receive in batches with a long lease until the queue looks empty,
    then write what it got (id, dequeue count) to ``result_file``."""
    got: list[tuple[str, int]] = []
    with open_embedded(Path(directory)) as storage:
        storage.queues.approximate_length(queue)  # connect before the race starts
        ready.wait(60)  # all four start receiving together
        while batch := storage.queues.receive(queue, max_messages=8, visibility_seconds=3600):
            got.extend((message.id, message.dequeue_count) for message in batch)
    Path(result_file).write_text(json.dumps(got))


def test_four_processes_never_receive_one_message_twice(tmp_path: Path):
    # Given 2,000 messages in one embedded queue on the real clock
    directory = tmp_path / "store"
    with open_embedded(directory) as storage:
        storage.queues.create_queue("work")
        sent = {storage.queues.send("work", f"m{i}".encode()).id for i in range(2000)}

    # When 4 processes receive from it at once, each hiding what it takes for an hour
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(4)
    results = [tmp_path / f"got-{i}.json" for i in range(4)]
    workers = [
        context.Process(target=_receive_all, args=(str(directory), "work", ready, str(result)))
        for result in results
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]

    # Then every message was handed out exactly once, on its first dequeue
    got = [tuple(item) for result in results for item in json.loads(result.read_text())]
    ids = Counter(message_id for message_id, _ in got)
    twice = [message_id for message_id, times in ids.items() if times > 1]
    assert not twice, f"{len(twice)} messages were handed to two receivers"
    assert len(sent - set(ids)) == 0, f"{len(sent - set(ids))} messages were lost"
    assert {count for _, count in got} == {1}
    # and the processes really did race for the messages (no one drained them alone)
    assert sum(1 for result in results if json.loads(result.read_text())) >= 2


def _open_fresh_and_write(directory: str, ready, result_file: str) -> None:
    """Child process: open a store nobody created yet, at the same moment as the others,
    and write to it."""
    ready.wait(60)
    with open_embedded(Path(directory)) as storage:
        storage.queues.create_queue("work")
        storage.queues.send("work", str(os.getpid()).encode())
    Path(result_file).write_text("ok")


def test_processes_opening_one_fresh_store_at_once_all_succeed(tmp_path: Path):
    # Setting up a fresh SQLite file (PRAGMA journal_mode = WAL) does not wait for a lock:
    # without the store's process lock, all but one of these failed at once "locked".
    directory = tmp_path / "fresh"
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(4)
    results = [tmp_path / f"opened-{i}" for i in range(4)]
    openers = [
        context.Process(target=_open_fresh_and_write, args=(str(directory), ready, str(result)))
        for result in results
    ]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(120)
    assert [opener.exitcode for opener in openers] == [0, 0, 0, 0]
    with open_embedded(directory) as storage:
        assert storage.queues.approximate_length("work") == 4


def test_a_process_waits_for_another_holding_the_write_lock(tmp_path: Path):
    # Given a process holding the store's write lock (as inside a transaction)
    directory = tmp_path / "store"
    with open_embedded(directory) as storage:
        storage.queues.create_queue("work")
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    holder = context.Process(target=_hold_write_lock, args=(str(directory), held, release))
    holder.start()
    try:
        assert held.wait(60)
        # When this process opens the store and writes meanwhile, it waits; once the
        # other lets go, its write lands
        threading.Timer(0.3, release.set).start()
        with open_embedded(directory) as storage:
            storage.queues.send("work", b"after the other")
            assert release.is_set(), "the write did not wait for the other process"
            assert storage.queues.approximate_length("work") == 1
    finally:
        release.set()
        holder.join(60)
    assert holder.exitcode == 0


def _hold_write_lock(directory: str, held, release) -> None:
    with open_embedded(Path(directory)) as storage:
        database = storage.queues._db  # type: ignore[attr-defined]
        with database.write():
            held.set()
            release.wait(60)


# --------------------------------------------------------------------------- sharing


def test_everything_survives_close_and_reopen(tmp_path: Path, clock: FakeClock):
    directory = tmp_path / "store"
    with open_embedded(directory, clock=clock) as first:
        first.queues.create_queue("jobs")
        kept = first.queues.send("jobs", b"kept", ttl_seconds=-1)
        hidden = first.queues.send("jobs", b"hidden")
        received = first.queues.receive("jobs", visibility_seconds=60)
        first.records.create_table("Chunks")
        etag = first.records.insert("Chunks", "job", "1", EVERY_TYPE)
        first.blobs.create_container("spill")
        first.blobs.put("spill", "a/b.bin", b"bytes")

    with open_embedded(directory, clock=clock) as second:
        # The received message is still hidden, with its receipt still valid
        assert [m.id for m in received] == [kept.id]
        assert [m.id for m in second.queues.peek("jobs", max_messages=32)] == [hidden.id]
        assert received[0].pop_receipt is not None
        second.queues.delete("jobs", kept.id, received[0].pop_receipt)
        record = second.records.get("Chunks", "job", "1")
        assert record.etag == etag
        _assert_same_types(record.properties, EVERY_TYPE)
        assert second.blobs.get("spill", "a/b.bin") == b"bytes"


def test_two_storages_on_one_directory_see_each_others_writes(tmp_path: Path, clock):
    with (
        open_embedded(tmp_path / "s", clock=clock) as one,
        open_embedded(tmp_path / "s", clock=clock) as two,
    ):
        one.queues.create_queue("shared")
        two.queues.send("shared", b"hello")
        taken = one.queues.receive("shared", visibility_seconds=30)
        assert [m.body for m in taken] == [b"hello"]
        assert two.queues.receive("shared") == []  # hidden from the other store too

        one.records.create_table("shared")
        etag = two.records.insert("shared", "p", "r", {"n": 1})
        new = one.records.replace("shared", "p", "r", {"n": 2}, etag=etag)
        with pytest.raises(Conflict):
            two.records.replace("shared", "p", "r", {"n": 3}, etag=etag)
        assert two.records.get("shared", "p", "r").etag == new

        one.blobs.create_container("shared")
        info = two.blobs.put("shared", "x", b"1")
        assert one.blobs.info("shared", "x").etag == info.etag


def test_open_storage_creates_the_directory_and_describes_it(tmp_path: Path):
    directory = tmp_path / "deep" / "store"
    storage = open_storage(str(directory))
    try:
        assert directory.is_dir() and (directory / "store.sqlite3").is_file()
        assert storage.description == f"embedded:{directory.resolve()}"
        assert repr(storage) == f"Storage(embedded:{directory.resolve()})"
    finally:
        storage.close()


def test_a_closed_store_refuses_work(store: Storage):
    store.queues.create_queue("q-closed")
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.queues.send("q-closed", b"x")


# --------------------------------------------------------------------------- threads


def _race(threads: int, attempt) -> list[object]:
    """Run ``attempt()`` on ``threads`` threads released together; return the outcomes
    (a value, or the StorageError raised)."""
    barrier = threading.Barrier(threads)
    outcomes: list[object] = []

    def run() -> None:
        barrier.wait(10)
        try:
            outcomes.append(attempt())
        except StorageError as err:
            outcomes.append(err)

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(30)
    return outcomes


def test_concurrent_compare_and_swap_has_exactly_one_winner(store: Storage):
    store.records.create_table("cas")
    etag = store.records.insert("cas", "p", "r", {"owner": "nobody"})

    outcomes = _race(8, lambda: store.records.replace("cas", "p", "r", {"v": 1}, etag=etag))

    winners = [o for o in outcomes if isinstance(o, str)]
    assert len(winners) == 1 and len(outcomes) == 8
    assert all(isinstance(o, Conflict) and o.status == 412 for o in outcomes if o not in winners)
    assert store.records.get("cas", "p", "r").etag == winners[0]


def test_concurrent_conditional_blob_creation_has_exactly_one_winner(store: Storage):
    store.blobs.create_container("cas")

    outcomes = _race(8, lambda: store.blobs.put("cas", "lock", b"x", if_none_match=True))

    assert sum(1 for o in outcomes if isinstance(o, AlreadyExists)) == 7


def test_concurrent_deletes_with_one_receipt_have_exactly_one_winner(store: Storage):
    store.queues.create_queue("race")
    store.queues.send("race", b"x")
    (message,) = store.queues.receive("race")
    receipt = message.pop_receipt
    assert receipt is not None

    outcomes = _race(8, lambda: store.queues.delete("race", message.id, receipt))

    assert outcomes.count(None) == 1
    assert all(o.code == "MessageNotFound" for o in outcomes if isinstance(o, LeaseLost))


# --------------------------------------------------------------------------- queues


def test_expired_messages_are_swept_and_never_handed_out(store: Storage, clock: FakeClock):
    queues = store.queues
    queues.create_queue("ttl")
    short = queues.send("ttl", b"short", ttl_seconds=10)
    forever = queues.send("ttl", b"forever", ttl_seconds=-1)
    held = {
        m.id: m.pop_receipt for m in queues.receive("ttl", max_messages=2, visibility_seconds=5)
    }

    clock.advance(10)  # expiry is at now >= expires_on, exactly as on Azure

    assert [m.id for m in queues.receive("ttl", max_messages=32)] == [forever.id]
    assert queues.approximate_length("ttl") == 1
    with pytest.raises(LeaseLost) as lost:
        queues.delete("ttl", short.id, str(held[short.id]))
    assert lost.value.code == "MessageNotFound"


def test_messages_come_out_in_the_order_they_became_visible(store: Storage, clock: FakeClock):
    queues = store.queues
    queues.create_queue("order")
    late = queues.send("order", b"late", delay_seconds=5)
    first = queues.send("order", b"first")
    clock.advance(1)
    second = queues.send("order", b"second")
    clock.advance(5)

    taken = [queues.receive("order")[0].id for _ in range(3)]

    assert taken == [first.id, second.id, late.id]


# --------------------------------------------------------------------------- records


def test_batch_failure_rolls_back_every_operation(store: Storage):
    records = store.records
    records.create_table("batch")
    etag = records.insert("batch", "p", "kept", {"v": 1})
    records.insert("batch", "p", "exists", {"v": 1})
    operations = [
        BatchOp("replace", "kept", {"v": 2}, etag),
        BatchOp("insert", "new", {"v": 1}),
        BatchOp("insert", "exists", {"v": 2}),
    ]

    with pytest.raises(BatchFailed) as failed:
        records.batch("batch", "p", operations)

    assert failed.value.index == 2 and isinstance(failed.value.reason, AlreadyExists)
    assert failed.value.status == 409
    assert records.get("batch", "p", "kept").etag == etag
    with pytest.raises(NotFound):
        records.get("batch", "p", "new")


def test_batch_applies_every_kind_and_returns_etags(store: Storage):
    records = store.records
    records.create_table("batch")
    old = {row: records.insert("batch", "p", row, {"a": 1}) for row in ("r", "m", "d")}

    etags = records.batch(
        "batch",
        "p",
        [
            BatchOp("insert", "i", {"a": 1}),
            BatchOp("replace", "r", {"b": 2}, old["r"]),
            BatchOp("merge", "m", {"b": 2}, ANY_ETAG),
            BatchOp("upsert_replace", "ur", {"b": 2}),
            BatchOp("upsert_merge", "um", {"b": 2}),
            BatchOp("delete", "d", etag=old["d"]),
        ],
    )

    assert etags[-1] == "" and all(etags[:-1])
    rows = {r.row_key: dict(r.properties) for r in records.query("batch", "p")}
    assert rows == {
        "i": {"a": 1},
        "m": {"a": 1, "b": 2},
        "r": {"b": 2},
        "ur": {"b": 2},
        "um": {"b": 2},
    }
    assert records.get("batch", "p", "m").etag == etags[2]


def test_batch_delete_of_a_missing_record_fails_as_on_azure(store: Storage):
    store.records.create_table("batch")
    with pytest.raises(BatchFailed) as failed:
        store.records.batch("batch", "p", [BatchOp("delete", "ghost")])
    assert isinstance(failed.value.reason, NotFound) and failed.value.index == 0


def test_query_pages_through_a_large_partition(store: Storage, monkeypatch):
    from checkpoint.backends.embedded import records as embedded_records

    monkeypatch.setattr(embedded_records, "QUERY_PAGE_SIZE", 7)
    store.records.create_table("paged")
    for i in range(50):
        store.records.insert("paged", "p", f"{i:03d}", {"i": i, "even": i % 2 == 0})

    rows = store.records.query(
        "paged",
        "p",
        [Where("RowKey", "ge", "010"), Where("RowKey", "lt", "040"), Where("even", "eq", True)],
    )

    assert [r.properties["i"] for r in rows] == list(range(10, 40, 2))


def test_record_timestamp_comes_from_the_clock(store: Storage, clock: FakeClock):
    store.records.create_table("stamps")
    store.records.insert("stamps", "p", "r", {})
    clock.advance(90)
    store.records.upsert("stamps", "p", "r", {"a": 1}, merge=True)
    assert store.records.get("stamps", "p", "r").timestamp == clock.now()


def test_table_names_ignore_case(store: Storage):
    store.records.create_table("Chunks")
    store.records.insert("chunks", "p", "r", {})
    assert store.records.get("CHUNKS", "p", "r").row_key == "r"


# --------------------------------------------------------------------------- blobs


def test_blobs_are_plain_files_under_their_container(store: Storage, tmp_path: Path):
    store.blobs.create_container("spill")
    store.blobs.put("spill", "job-1/chunk 7/state.bin", b"state")
    path = tmp_path / "store" / "blobs" / "spill" / "job-1" / "chunk 7" / "state.bin"
    assert path.read_bytes() == b"state"

    store.blobs.delete("spill", "job-1/chunk 7/state.bin")
    assert not path.exists() and not path.parent.exists()  # empty folders pruned
    assert (tmp_path / "store" / "blobs" / "spill").is_dir()

    store.blobs.put("spill", "x", b"1")
    store.blobs.delete_container("spill")
    assert not (tmp_path / "store" / "blobs" / "spill").exists()


def test_a_blob_and_a_folder_of_one_name_can_both_exist(store: Storage):
    blobs = store.blobs
    blobs.create_container("names")
    blobs.put("names", "a", b"file a")
    blobs.put("names", "a/b", b"file a/b")  # "a" is a file: this one goes elsewhere
    blobs.put("names", "c/d", b"file c/d")
    blobs.put("names", "c", b"file c")  # "c" is a folder: likewise

    assert [(i.name, blobs.get("names", i.name)) for i in blobs.list("names")] == [
        ("a", b"file a"),
        ("a/b", b"file a/b"),
        ("c", b"file c"),
        ("c/d", b"file c/d"),
    ]
    blobs.delete("names", "a")
    blobs.put("names", "a/b", b"moved back")  # its natural place is free again
    assert blobs.get("names", "a/b") == b"moved back"
    blobs.delete_container("names")


def test_a_name_the_file_system_refuses_is_still_stored(tmp_path: Path):
    # Given a store deep enough that a valid 1,023-character name of 4-byte characters
    # (over 4 KiB of UTF-8) makes a path longer than Linux's 4,096-byte limit
    root = tmp_path / ("deep" * 50) / "store"
    name = "/".join(["😀" * 63] * 16)
    with open_embedded(root, clock=FakeClock()) as storage:
        blobs = storage.blobs
        blobs.create_container("long")
        # When it is stored, it is kept under the clash folder, nothing left behind
        blobs.put("long", name, b"kept")
        assert blobs.get("long", name) == b"kept"
        assert [info.name for info in blobs.list("long", prefix="😀")] == [name]
        assert list((root / "blobs" / "long").iterdir()) == []
        assert len(list((root / "blobs" / ".clashes" / "long").iterdir())) == 1
        # And deleted like any other
        blobs.delete("long", name)
        with pytest.raises(NotFound):
            blobs.info("long", name)


def test_blob_names_differing_only_in_case_stay_apart(store: Storage):
    store.blobs.create_container("case")
    store.blobs.put("case", "Report", b"upper")
    store.blobs.put("case", "report", b"lower")
    assert store.blobs.get("case", "Report") == b"upper"
    assert store.blobs.get("case", "report") == b"lower"


def test_blob_ranges_and_conditions(store: Storage, clock: FakeClock):
    blobs = store.blobs
    blobs.create_container("range")
    first = blobs.put("range", "b", b"0123456789")
    clock.advance(1)
    assert blobs.get("range", "b", offset=3, length=4) == b"3456"
    assert blobs.get("range", "b", offset=8) == b"89"
    with pytest.raises(Conflict) as stale:
        blobs.put("range", "missing", b"", if_match=first.etag)
    assert stale.value.code == "ConditionNotMet"
    second = blobs.put("range", "b", b"new", if_match=first.etag)
    assert second.etag != first.etag and second.last_modified == clock.now()
    assert blobs.info("range", "b").size == 3
    with pytest.raises(Conflict):
        blobs.delete("range", "b", if_match=first.etag)
    with pytest.raises(NotFound) as missing:
        blobs.get("nowhere", "b")
    assert missing.value.code == "ContainerNotFound"


# --------------------------------------------------------------------------- locking


def test_a_database_locked_past_the_busy_timeout_is_throttled(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded_db, "BUSY_TIMEOUT_SECONDS", 0.05)
    with open_embedded(tmp_path / "s", clock=FakeClock()) as storage:
        storage.queues.create_queue("busy")
        holder = embedded_db.Database(tmp_path / "s" / "store.sqlite3", ())
        try:
            # While another connection holds the write lock...
            with holder.write():
                with pytest.raises(Throttled) as busy:
                    storage.queues.send("busy", b"x")
            assert busy.value.status == 503
            # ...and once it lets go, the store works again.
            storage.queues.send("busy", b"x")
        finally:
            holder.close()


def test_a_forked_child_opens_its_own_connection(store: Storage):
    assert hasattr(os, "fork"), "the project runs on Linux, where fork exists"
    store.queues.create_queue("fork")
    store.queues.send("fork", b"parent")  # the parent's connection exists now
    context = multiprocessing.get_context("fork")
    child = context.Process(target=store.queues.send, args=("fork", b"child"))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert sorted(m.body for m in store.queues.peek("fork", max_messages=32)) == [
        b"child",
        b"parent",
    ]


def test_datetimes_round_trip_as_utc(store: Storage):
    store.records.create_table("zones")
    zone = timezone(timedelta(hours=5, minutes=30))
    store.records.insert("zones", "p", "r", {"at": datetime(2030, 1, 1, 12, tzinfo=zone)})
    got = store.records.get("zones", "p", "r").properties["at"]
    assert isinstance(got, datetime) and got.utcoffset() == timedelta(0)
    assert got == datetime(2030, 1, 1, 6, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raised", "expected", "status"),
    [
        (sqlite3.OperationalError("database is locked"), Throttled, 503),
        (sqlite3.OperationalError("database table is busy"), Throttled, 503),
        (sqlite3.OperationalError("disk I/O error"), StorageError, 500),
        (sqlite3.IntegrityError("UNIQUE constraint failed"), StorageError, 500),
    ],
)
def test_sqlite_errors_leave_the_backend_as_storage_errors(raised, expected, status):
    with pytest.raises(expected) as caught:
        with embedded_db.translated():
            raise raised

    assert type(caught.value) is expected
    assert caught.value.status == status and caught.value.__cause__ is raised
    assert str(raised) in str(caught.value)


def test_blob_listing_pages_through_a_large_container(store: Storage, monkeypatch):
    monkeypatch.setattr(embedded_blobs, "LIST_PAGE_SIZE", 2)
    store.blobs.create_container("many")
    names = [f"b/{n:02d}" for n in range(7)] + ["c/other"]
    for name in names:
        store.blobs.put("many", name, b"x")

    assert [blob.name for blob in store.blobs.list("many", "b/")] == names[:7]
    assert [blob.name for blob in store.blobs.list("many")] == names
