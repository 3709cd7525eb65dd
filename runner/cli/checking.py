"""``runner check``: does the storage a location names answer, and is a store there?

Round-trips a message, a record and a blob through scratch resources it then deletes.
It never leaves a store behind where there was none (only ``submit`` and ``start``
create one): on Azure the scratch resources are not the store's; an embedded location
without a store gets a scratch store for the round trip, removed with every directory
made for it.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from checkpoint.backends import (
    CREATES_A_STORE,
    embedded_store_paths,
    open_storage,
    require_store,
)
from checkpoint.errors import StoreNotFound
from checkpoint.location import StorageLocation
from checkpoint.storage import Storage


def check_location(location: StorageLocation) -> list[str]:
    """The lines ``runner check`` prints after ``storage: ...``."""
    with _opened(location) as (opened, found):
        done = round_trip(opened)
    where = location.directory if location.kind == "embedded" else location.description
    store = "found" if found else f"none at {where} yet; {CREATES_A_STORE}"
    return [*done, f"store: {store}"]


@contextmanager
def _opened(location: StorageLocation) -> Iterator[tuple[Storage, bool]]:
    """The location's store (and True), else a storage that leaves none (and False)."""
    try:
        found: Storage | None = open_storage(location, create=False)
    except StoreNotFound:
        found = None
    if found is not None:
        with found:
            yield found, True
    elif location.kind == "embedded":
        assert location.directory is not None
        with _scratch_store(location.directory) as scratch:
            yield scratch, False
    else:
        with open_storage(location) as account:  # opening creates nothing on Azure
            yield account, False


@contextmanager
def _scratch_store(directory: Path) -> Iterator[Storage]:
    """An embedded store in ``directory`` for the length of the block, then removed with
    the directories made for it; what was there before is left as it was. A store that
    got its jobs table meanwhile (a ``submit`` racing the check) is kept."""
    made = [folder for folder in (directory, *directory.parents) if not folder.exists()]
    new = [path for path in embedded_store_paths(directory) if not path.exists()]
    keep = False
    try:
        with open_storage(StorageLocation("embedded", directory=directory)) as opened:
            yield opened
            try:
                require_store(opened)
                keep = True  # a real store now: not ours to remove
            except StoreNotFound:
                pass
    finally:
        if not keep:
            _remove(new, made)


def _remove(paths: list[Path], folders: list[Path]) -> None:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    for folder in folders:  # deepest first
        if folder.is_dir():
            folder.rmdir()


def round_trip(storage: Storage) -> list[str]:
    """Touch each service once through scratch resources; return what was done."""
    tag = uuid.uuid4().hex[:10]
    queue, table, container = f"runner-check-{tag}", f"runnercheck{tag}", f"runner-check-{tag}"
    done = []
    storage.queues.create_queue(queue)
    try:
        storage.queues.send(queue, b"ping")
        (message,) = storage.queues.receive(queue, visibility_seconds=5)
        assert message.pop_receipt is not None  # a receive always grants one
        storage.queues.delete(queue, message.id, message.pop_receipt)
        done.append("queue: send, receive, delete")
    finally:
        storage.queues.delete_queue(queue)
    storage.records.create_table(table)
    try:
        etag = storage.records.insert(table, "check", "row", {"value": 1})
        storage.records.replace(table, "check", "row", {"value": 2}, etag=etag)
        done.append("records: insert, conditional replace")
    finally:
        storage.records.delete_table(table)
    storage.blobs.create_container(container)
    try:
        storage.blobs.put(container, "check/blob", b"ping")
        storage.blobs.get(container, "check/blob")
        done.append("blobs: put, get")
    finally:
        storage.blobs.delete_container(container)
    return done
