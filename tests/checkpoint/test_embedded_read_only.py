"""An embedded store this process may read but not write: opened for reading, whether a
writer has it open (its newest commits still in the WAL) or not; every write refused
with StoreReadOnly, nothing changed; no store made where none was.

Made unwritable for real, as root too (tests/unwritable.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError, StoreReadOnly
from checkpoint.store import CheckpointStore
from tests.unwritable import reachable_folder, unwritable


@pytest.fixture
def folder() -> Iterator[Path]:
    with reachable_folder() as made:
        yield made


def _job(storage, job_id: str) -> None:
    store = CheckpointStore(storage)
    job, _ = store.create_job(job_id, "tests:Job", "read-only-q", {"n": 1})
    store.add_chunks(job_id, 0, ["a"])
    store.update_job(job, state="running", total=1)
    storage.queues.create_queue("read-only-q")


def test_a_store_no_writer_has_open_is_read_whole(folder: Path):
    # Given a store that every writer has closed (no -wal, no -shm left)
    with open_storage(str(folder / "store")) as opened:
        _job(opened, "closed-1")
    assert not (folder / "store" / "store.sqlite3-wal").exists()

    # When a process that may not write there reads it
    with unwritable(folder / "store"), open_storage(str(folder / "store"), create=False) as seen:
        store = CheckpointStore(seen)
        job = store.get_job("closed-1")
        chunks = [task.index for task in store.chunks("closed-1", ("waiting",))]
        queues_there = seen.queues.approximate_length("read-only-q")

    # Then it sees everything, and wrote nothing
    assert job.state == "running" and chunks == [0] and queues_there == 0
    assert sorted(path.name for path in (folder / "store").iterdir()) == [
        "blobs",
        "store.sqlite3",
        "store.sqlite3.lock",
    ]


def test_a_store_a_writer_has_open_shows_its_newest_commits(folder: Path):
    # Given a worker of another user writing the store, its last commits in the WAL
    with open_storage(str(folder / "store")) as writer:
        _job(writer, "open-1")
        assert (folder / "store" / "store.sqlite3-wal").stat().st_size > 0

        # When this process, which may not write there, reads it
        with (
            unwritable(folder / "store"),
            open_storage(str(folder / "store"), create=False) as seen,
        ):
            job = CheckpointStore(seen).get_job("open-1")

    # Then it sees them
    assert job.state == "running" and job.total == 1


@pytest.mark.parametrize(
    "write",
    [
        lambda storage: CheckpointStore(storage).create_job("new-1", "tests:Job", "ro-q", {}),
        lambda storage: storage.queues.create_queue("never-made-here"),
        lambda storage: storage.records.create_table("nevermadehere"),
        lambda storage: storage.blobs.create_container("never-made-here"),
        lambda storage: storage.blobs.put(layout.DATA_CONTAINER, "x", b"x"),
    ],
    ids=["create job", "create queue", "create table", "create container", "put blob"],
)
def test_every_write_is_refused_and_changes_nothing(folder: Path, write):
    with open_storage(str(folder / "store")) as opened:
        _job(opened, "kept-1")
    before = (folder / "store" / "store.sqlite3").read_bytes()

    with unwritable(folder / "store"), open_storage(str(folder / "store"), create=False) as seen:
        with pytest.raises(StoreReadOnly) as refused:
            write(seen)

    assert refused.value.status == 403
    assert str(refused.value) == (
        f"the embedded store at {folder / 'store'} is read-only to this process "
        "(store.sqlite3.lock: Permission denied): commands that only read it work, this "
        "one writes"
    )
    assert (folder / "store" / "store.sqlite3").read_bytes() == before


def test_creating_what_a_read_only_store_holds_already_writes_nothing(folder: Path):
    with open_storage(str(folder / "store")) as opened:
        CheckpointStore(opened).ensure()
        opened.queues.create_queue("there-q")

    with unwritable(folder / "store"), open_storage(str(folder / "store"), create=False) as seen:
        CheckpointStore(seen).ensure()  # tables and container: there already
        seen.queues.create_queue("there-q")


def test_no_store_is_made_in_a_folder_that_cannot_be_written(folder: Path):
    (folder / "empty").mkdir()

    with unwritable(folder / "empty"), pytest.raises(ConfigurationError) as refused:
        open_storage(str(folder / "empty"))

    assert str(refused.value) == (
        f"cannot create the embedded store at {folder / 'empty'}: "
        "store.sqlite3.lock: Permission denied"
    )
    assert list((folder / "empty").iterdir()) == []


def test_a_store_whose_database_alone_is_read_only_is_read_only(folder: Path):
    job_id = f"db-{uuid.uuid4().hex[:6]}"
    with open_storage(str(folder / "store")) as opened:
        _job(opened, job_id)
    database = folder / "store" / "store.sqlite3"
    # Only the database is unwritable: the folder and the lock file are open to all.
    (folder / "store").chmod(0o777)
    (folder / "store" / "store.sqlite3.lock").chmod(0o666)
    database.chmod(0o444)
    try:
        with unwritable(), open_storage(str(folder / "store"), create=False) as seen:
            assert CheckpointStore(seen).get_job(job_id).state == "running"
            with pytest.raises(StoreReadOnly, match=r"\(store\.sqlite3: Permission denied\)"):
                seen.queues.create_queue("never-made-here")
    finally:
        database.chmod(0o644)


def test_opening_to_write_refuses_a_store_it_can_only_read(folder: Path):
    with open_storage(str(folder / "store")) as opened:
        _job(opened, "kept-2")

    with unwritable(folder / "store"), pytest.raises(StoreReadOnly, match="read-only to this"):
        open_storage(str(folder / "store"))


def test_a_lock_file_that_cannot_be_opened_for_another_reason_keeps_the_systems_error(
    folder: Path,
):
    (folder / "store" / "store.sqlite3.lock").mkdir(parents=True)

    with pytest.raises(IsADirectoryError):
        open_storage(str(folder / "store"))
