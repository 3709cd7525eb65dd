"""RecordStore contract: atomic batches in one partition (Azure entity group transactions)."""

from __future__ import annotations

import uuid

import pytest

from checkpoint.errors import (
    AlreadyExists,
    BatchFailed,
    Conflict,
    InvalidRequest,
    NotFound,
    StorageError,
)
from checkpoint.service_targets import MAX_BATCH_OPERATIONS
from checkpoint.storage import BatchOp
from tests.contract import EVERY_TYPE, assert_same_types, fails_with


def _state(records, table: str, partition: str = "p") -> dict[str, tuple[dict, str]]:
    """Every record of a partition as {row key: (properties, etag)}."""
    return {r.row_key: (dict(r.properties), r.etag) for r in records.query(table, partition)}


def test_batch_applies_every_kind_and_returns_each_etag(backend):
    records = backend.storage.records
    table = backend.table()
    # Given four existing records
    old = {
        key: records.insert(table, "p", key, {"v": 0, "keep": "k"})
        for key in ("replace", "merge", "upsert-r", "upsert-m", "delete")
    }

    # When one batch applies every kind of operation
    etags = records.batch(
        table,
        "p",
        [
            BatchOp("insert", "new", {"v": 1}),
            BatchOp("replace", "replace", {"v": 2}, etag=old["replace"]),
            BatchOp("merge", "merge", {"v": 3}, etag=old["merge"]),
            BatchOp("upsert_replace", "upsert-r", {"v": 4}),
            BatchOp("upsert_merge", "upsert-m", {"v": 5}),
            BatchOp("delete", "delete", etag=old["delete"]),
            BatchOp("upsert_replace", "created-r", {"v": 6}),
            BatchOp("upsert_merge", "created-m", {"v": 7}),
        ],
    )

    # Then each took effect, and each returned ETag is the record's current one
    state = _state(records, table)
    assert {key: props for key, (props, _) in state.items()} == {
        "new": {"v": 1},
        "replace": {"v": 2},
        "merge": {"v": 3, "keep": "k"},
        "upsert-r": {"v": 4},
        "upsert-m": {"v": 5, "keep": "k"},
        "created-r": {"v": 6},
        "created-m": {"v": 7},
    }
    order = ["new", "replace", "merge", "upsert-r", "upsert-m", "delete", "created-r", "created-m"]
    assert len(etags) == len(order)
    assert etags[5] == ""
    for key, etag in zip(order, etags, strict=True):
        if key != "delete":
            assert etag and etag == state[key][1], key
            assert etag != old.get(key), key


def test_batch_preserves_every_type(backend):
    records = backend.storage.records
    table = backend.table()

    (etag,) = records.batch(table, "p", [BatchOp("insert", "r", EVERY_TYPE)])

    record = records.get(table, "p", "r")
    assert record.etag == etag
    assert_same_types(record.properties, EVERY_TYPE)


def test_batch_without_etags_is_unconditional(backend):
    records = backend.storage.records
    table = backend.table()
    for key in ("r", "m", "d"):
        stale = records.insert(table, "p", key, {"v": 0, "keep": 1})
        records.replace(table, "p", key, {"v": 1, "keep": 1}, etag=stale)

    records.batch(
        table,
        "p",
        [
            BatchOp("replace", "r", {"v": 2}),
            BatchOp("merge", "m", {"v": 2}),
            BatchOp("delete", "d"),
        ],
    )

    assert {k: props for k, (props, _) in _state(records, table).items()} == {
        "r": {"v": 2},
        "m": {"v": 2, "keep": 1},
    }


def test_batch_only_touches_its_partition(backend):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "other", "r", {"v": "other"})

    records.batch(table, "p", [BatchOp("insert", "r", {"v": "p"})])

    assert records.get(table, "other", "r").properties == {"v": "other"}
    assert records.get(table, "p", "r").properties == {"v": "p"}


def _assert_failed_batch_applied_nothing(records, table, before) -> None:
    assert _state(records, table) == before


def test_stale_etag_fails_the_whole_batch(backend):
    records = backend.storage.records
    table = backend.table()
    # Given a record whose ETag has moved on since we read it
    stale = records.insert(table, "p", "moved", {"v": 0})
    records.merge(table, "p", "moved", {"v": 1}, etag=stale)
    records.insert(table, "p", "merged", {"v": 0})
    before = _state(records, table)

    # When a batch replaces it with the stale ETag as its third operation
    with fails_with(BatchFailed, status=412) as caught:
        records.batch(
            table,
            "p",
            [
                BatchOp("insert", "new", {"v": 1}),
                BatchOp("merge", "merged", {"v": 2}, etag=before["merged"][1]),
                BatchOp("replace", "moved", {"v": 3}, etag=stale),
                BatchOp("upsert_replace", "late", {"v": 4}),
            ],
        )

    # Then it names operation 2 and a Conflict, and none of the batch was applied
    assert caught.value.index == 2
    assert isinstance(caught.value.reason, Conflict)
    assert caught.value.reason.status == 412
    assert caught.value.reason.code == caught.value.code == "UpdateConditionNotSatisfied"
    _assert_failed_batch_applied_nothing(records, table, before)


def test_inserting_an_existing_record_fails_the_whole_batch(backend):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "exists", {"v": 0})
    before = _state(records, table)

    with fails_with(BatchFailed, status=409) as caught:
        records.batch(
            table,
            "p",
            [
                BatchOp("upsert_merge", "fresh", {"v": 1}),
                BatchOp("insert", "exists", {"v": 2}),
            ],
        )

    assert caught.value.index == 1
    assert isinstance(caught.value.reason, AlreadyExists)
    assert caught.value.reason.status == 409
    assert caught.value.reason.code == "EntityAlreadyExists"
    _assert_failed_batch_applied_nothing(records, table, before)


@pytest.mark.parametrize("kind", ["replace", "merge"])
def test_updating_a_missing_record_fails_the_whole_batch(backend, kind):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "exists", {"v": 0})
    before = _state(records, table)

    with fails_with(BatchFailed, status=404) as caught:
        records.batch(
            table,
            "p",
            [
                BatchOp("delete", "exists", etag=before["exists"][1]),
                BatchOp("insert", "fresh", {"v": 1}),
                BatchOp(kind, "missing", {"v": 2}),
            ],
        )

    assert caught.value.index == 2
    assert isinstance(caught.value.reason, NotFound)
    assert caught.value.reason.status == 404
    _assert_failed_batch_applied_nothing(records, table, before)


def test_delete_with_stale_etag_fails_the_whole_batch(backend):
    records = backend.storage.records
    table = backend.table()
    stale = records.insert(table, "p", "d", {"v": 0})
    records.replace(table, "p", "d", {"v": 1}, etag=stale)
    before = _state(records, table)

    with fails_with(BatchFailed, status=412) as caught:
        records.batch(
            table,
            "p",
            [
                BatchOp("delete", "d", etag=stale),
                BatchOp("insert", "fresh", {"v": 1}),
            ],
        )

    assert caught.value.index == 0
    assert isinstance(caught.value.reason, Conflict)
    _assert_failed_batch_applied_nothing(records, table, before)


def test_batch_of_100_operations_is_applied(backend):
    records = backend.storage.records
    table = backend.table()
    operations = [BatchOp("insert", f"r{i:03d}", {"i": i}) for i in range(MAX_BATCH_OPERATIONS)]

    etags = records.batch(table, "p", operations)

    state = _state(records, table)
    assert len(etags) == len(state) == MAX_BATCH_OPERATIONS
    assert [props["i"] for props, _ in state.values()] == list(range(MAX_BATCH_OPERATIONS))
    assert etags == [etag for _, etag in state.values()]


@pytest.mark.parametrize("count", [0, MAX_BATCH_OPERATIONS + 1])
def test_batch_of_0_or_101_operations_is_invalid(backend, count):
    records = backend.storage.records
    table = backend.table()
    operations = [BatchOp("insert", f"r{i:03d}", {"i": i}) for i in range(count)]

    with fails_with(InvalidRequest, status=400):
        records.batch(table, "p", operations)

    assert _state(records, table) == {}


def test_batch_touching_one_row_twice_is_invalid(backend):
    records = backend.storage.records
    table = backend.table()

    with fails_with(InvalidRequest, status=400, code="InvalidDuplicateRow"):
        records.batch(
            table,
            "p",
            [
                BatchOp("insert", "a", {"v": 1}),
                BatchOp("insert", "b", {"v": 1}),
                BatchOp("upsert_merge", "a", {"w": 2}),
            ],
        )

    assert _state(records, table) == {}


def test_batch_on_missing_table_is_not_found(backend):
    records = backend.storage.records
    table = f"missing{uuid.uuid4().hex[:12]}"

    with pytest.raises(StorageError) as caught:
        records.batch(table, "p", [BatchOp("insert", "r", {"v": 1})])

    # Azure reports it as the failure of operation 0; either form names TableNotFound
    error = caught.value
    reason = error.reason if isinstance(error, BatchFailed) else error
    assert isinstance(reason, NotFound)
    assert error.status == reason.status == 404
    assert error.code == reason.code == "TableNotFound"


@pytest.mark.parametrize(
    "op",
    [BatchOp("frobnicate", "b", {"n": 1}), BatchOp("merge", "a", {"n": 2}, etag=5)],
    ids=["unknown-kind", "etag-not-text"],
)
def test_a_malformed_operation_is_refused_before_anything_is_written(backend, op):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "a", {"n": 1})

    with fails_with(InvalidRequest, status=400, code="InvalidInput"):
        records.batch(table, "p", [BatchOp("insert", "c", {"n": 3}), op])

    assert [r.row_key for r in records.query(table, "p")] == ["a"]
