"""RecordStore contract: Azure Table storage semantics on every backend (single records)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from checkpoint.errors import AlreadyExists, Conflict, InvalidRequest, NotFound
from checkpoint.storage import ANY_ETAG
from tests.contract import EVERY_TYPE, assert_same_types, fails_with


def _missing_table() -> str:
    return f"missing{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- tables


def test_create_table_is_idempotent_and_keeps_records(backend):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "r", {"kept": 1})

    records.create_table(table)

    assert records.get(table, "p", "r").properties == {"kept": 1}


def test_delete_table_removes_it_and_is_idempotent(backend):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "r", {"a": 1})

    records.delete_table(table)
    records.delete_table(table)

    with fails_with(NotFound, status=404, code="TableNotFound"):
        records.get(table, "p", "r")


def test_delete_missing_table_is_not_an_error(backend):
    backend.storage.records.delete_table(_missing_table())


@pytest.mark.parametrize(
    "name", ["ab", "1abc", "with-hyphen", "with_underscore", "tables", "a" * 64, ""]
)
def test_invalid_table_name_is_refused(backend, name):
    with fails_with(InvalidRequest, status=400, code="InvalidResourceName"):
        backend.storage.records.create_table(name)


@pytest.mark.parametrize("operation", ["get", "insert", "replace", "merge", "upsert", "query"])
def test_operations_on_missing_table_raise_not_found(backend, operation):
    records = backend.storage.records
    table = _missing_table()
    call = {
        "get": lambda: records.get(table, "p", "r"),
        "insert": lambda: records.insert(table, "p", "r", {"a": 1}),
        "replace": lambda: records.replace(table, "p", "r", {"a": 1}, etag=ANY_ETAG),
        "merge": lambda: records.merge(table, "p", "r", {"a": 1}, etag=ANY_ETAG),
        "upsert": lambda: records.upsert(table, "p", "r", {"a": 1}),
        "query": lambda: list(records.query(table, "p")),
    }[operation]
    with fails_with(NotFound, status=404, code="TableNotFound"):
        call()


# --------------------------------------------------------------------------- insert / get


def test_insert_get_roundtrip_preserves_every_type(backend):
    records = backend.storage.records
    table = backend.table()

    etag = records.insert(table, "part", "row", EVERY_TYPE)
    record = records.get(table, "part", "row")

    assert record.partition_key == "part"
    assert record.row_key == "row"
    assert isinstance(etag, str) and etag
    assert record.etag == etag
    assert_same_types(record.properties, EVERY_TYPE)


def test_datetime_in_another_zone_reads_back_as_the_same_instant(backend):
    records = backend.storage.records
    table = backend.table()
    plus_two = timezone(timedelta(hours=2))
    when = datetime(2030, 6, 1, 12, 30, 0, 250000, tzinfo=plus_two)

    records.insert(table, "p", "r", {"when": when})
    got = records.get(table, "p", "r").properties["when"]

    assert isinstance(got, datetime) and got.tzinfo is not None
    assert got == when


def test_none_property_is_not_stored(backend):
    records = backend.storage.records
    table = backend.table()

    records.insert(table, "p", "r", {"here": "yes", "absent": None})

    assert records.get(table, "p", "r").properties == {"here": "yes"}


def test_record_without_properties_roundtrips(backend):
    records = backend.storage.records
    table = backend.table()

    records.insert(table, "p", "r", {})

    assert records.get(table, "p", "r").properties == {}


def test_keys_with_unicode_spaces_and_punctuation_roundtrip(backend):
    records = backend.storage.records
    table = backend.table()
    partition, row = "jöb 1:chunk-2.x", "ünïcode_ key (0001) ✓"

    records.insert(table, partition, row, {"a": 1})

    record = records.get(table, partition, row)
    assert (record.partition_key, record.row_key) == (partition, row)
    assert [r.row_key for r in records.query(table, partition)] == [row]


def test_insert_existing_record_already_exists(backend):
    records = backend.storage.records
    table = backend.table()
    etag = records.insert(table, "p", "r", {"v": 1})

    with fails_with(AlreadyExists, status=409, code="EntityAlreadyExists"):
        records.insert(table, "p", "r", {"v": 2})

    record = records.get(table, "p", "r")
    assert record.properties == {"v": 1} and record.etag == etag


def test_same_row_key_in_two_partitions_are_two_records(backend):
    records = backend.storage.records
    table = backend.table()

    records.insert(table, "p1", "r", {"v": 1})
    records.insert(table, "p2", "r", {"v": 2})

    assert records.get(table, "p1", "r").properties == {"v": 1}
    assert records.get(table, "p2", "r").properties == {"v": 2}


def test_get_missing_record_not_found(backend):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "other", {})

    with fails_with(NotFound, status=404, code="ResourceNotFound"):
        records.get(table, "p", "r")


# --------------------------------------------------------------------------- replace / merge


def test_replace_with_current_etag_returns_new_etag_and_drops_unlisted(backend):
    records = backend.storage.records
    table = backend.table()
    first = records.insert(table, "p", "r", {"keep": 1, "drop": "x"})

    second = records.replace(table, "p", "r", {"keep": 2, "new": True}, etag=first)

    record = records.get(table, "p", "r")
    assert second and second != first
    assert record.etag == second
    assert_same_types(record.properties, {"keep": 2, "new": True})


def test_replace_with_stale_etag_conflicts(backend):
    records = backend.storage.records
    table = backend.table()
    stale = records.insert(table, "p", "r", {"v": 1})
    current = records.replace(table, "p", "r", {"v": 2}, etag=stale)

    with fails_with(Conflict, status=412, code="UpdateConditionNotSatisfied"):
        records.replace(table, "p", "r", {"v": 3}, etag=stale)

    record = records.get(table, "p", "r")
    assert record.properties == {"v": 2} and record.etag == current


def test_replace_with_any_etag_overwrites(backend):
    records = backend.storage.records
    table = backend.table()
    first = records.insert(table, "p", "r", {"v": 1, "w": 1})

    second = records.replace(table, "p", "r", {"v": 2}, etag=ANY_ETAG)

    record = records.get(table, "p", "r")
    assert second != first and record.etag == second
    assert record.properties == {"v": 2}


@pytest.mark.parametrize("etag", ["current", ANY_ETAG])
def test_replace_of_missing_record_not_found(backend, etag):
    records = backend.storage.records
    table = backend.table()
    old = records.insert(table, "p", "r", {"v": 1})
    records.delete(table, "p", "r", etag=old)

    with fails_with(NotFound, status=404, code="ResourceNotFound"):
        records.replace(table, "p", "r", {"v": 2}, etag=old if etag == "current" else etag)

    with fails_with(NotFound, status=404):
        records.get(table, "p", "r")


def test_replace_with_none_removes_the_property(backend):
    records = backend.storage.records
    table = backend.table()
    etag = records.insert(table, "p", "r", {"a": 1, "b": 2})

    records.replace(table, "p", "r", {"a": 1, "b": None}, etag=etag)

    assert records.get(table, "p", "r").properties == {"a": 1}


def test_merge_keeps_unlisted_properties_and_returns_new_etag(backend):
    records = backend.storage.records
    table = backend.table()
    first = records.insert(table, "p", "r", {"keep": "k", "change": 1, "flag": False})

    second = records.merge(table, "p", "r", {"change": 2, "added": b"\x01"}, etag=first)

    record = records.get(table, "p", "r")
    assert second and second != first and record.etag == second
    assert_same_types(
        record.properties, {"keep": "k", "change": 2, "flag": False, "added": b"\x01"}
    )


def test_merge_can_change_a_property_type(backend):
    records = backend.storage.records
    table = backend.table()
    etag = records.insert(table, "p", "r", {"v": 1})

    records.merge(table, "p", "r", {"v": "one"}, etag=etag)

    assert_same_types(records.get(table, "p", "r").properties, {"v": "one"})


def test_merge_with_stale_etag_conflicts(backend):
    records = backend.storage.records
    table = backend.table()
    stale = records.insert(table, "p", "r", {"v": 1})
    records.merge(table, "p", "r", {"v": 2}, etag=stale)

    with fails_with(Conflict, status=412, code="UpdateConditionNotSatisfied"):
        records.merge(table, "p", "r", {"v": 3, "extra": 1}, etag=stale)

    assert records.get(table, "p", "r").properties == {"v": 2}


def test_merge_with_any_etag_merges(backend):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "r", {"a": 1})

    etag = records.merge(table, "p", "r", {"b": 2}, etag=ANY_ETAG)

    record = records.get(table, "p", "r")
    assert record.etag == etag
    assert record.properties == {"a": 1, "b": 2}


@pytest.mark.parametrize("etag", ["current", ANY_ETAG])
def test_merge_of_missing_record_not_found(backend, etag):
    records = backend.storage.records
    table = backend.table()
    old = records.insert(table, "p", "r", {"v": 1})
    records.delete(table, "p", "r", etag=old)

    with fails_with(NotFound, status=404, code="ResourceNotFound"):
        records.merge(table, "p", "r", {"v": 2}, etag=old if etag == "current" else etag)


def test_etag_changes_on_every_write(backend):
    records = backend.storage.records
    table = backend.table()

    etags = [records.insert(table, "p", "r", {"v": 0})]
    etags.append(records.replace(table, "p", "r", {"v": 1}, etag=etags[-1]))
    etags.append(records.merge(table, "p", "r", {"v": 2}, etag=etags[-1]))
    etags.append(records.upsert(table, "p", "r", {"v": 3}))
    etags.append(records.upsert(table, "p", "r", {"v": 4}, merge=True))
    etags.append(records.replace(table, "p", "r", {"v": 4}, etag=etags[-1]))

    assert len(set(etags)) == len(etags)
    assert records.get(table, "p", "r").etag == etags[-1]


# --------------------------------------------------------------------------- upsert


def test_upsert_creates_a_missing_record(backend):
    records = backend.storage.records
    table = backend.table()

    etag = records.upsert(table, "p", "r", {"v": 1, "s": "x"})

    record = records.get(table, "p", "r")
    assert record.etag == etag
    assert_same_types(record.properties, {"v": 1, "s": "x"})


def test_upsert_overwrites_dropping_unlisted(backend):
    records = backend.storage.records
    table = backend.table()
    first = records.insert(table, "p", "r", {"old": 1, "v": 1})

    second = records.upsert(table, "p", "r", {"v": 2})

    record = records.get(table, "p", "r")
    assert second != first and record.etag == second
    assert record.properties == {"v": 2}


def test_upsert_merge_creates_a_missing_record(backend):
    records = backend.storage.records
    table = backend.table()

    etag = records.upsert(table, "p", "r", {"v": 1}, merge=True)

    record = records.get(table, "p", "r")
    assert record.etag == etag and record.properties == {"v": 1}


def test_upsert_merge_keeps_unlisted(backend):
    records = backend.storage.records
    table = backend.table()
    first = records.insert(table, "p", "r", {"old": 1, "v": 1})

    second = records.upsert(table, "p", "r", {"v": 2, "new": 3.5}, merge=True)

    record = records.get(table, "p", "r")
    assert second != first and record.etag == second
    assert_same_types(record.properties, {"old": 1, "v": 2, "new": 3.5})


# --------------------------------------------------------------------------- delete


def test_delete_with_current_etag_removes_the_record(backend):
    records = backend.storage.records
    table = backend.table()
    etag = records.insert(table, "p", "r", {"v": 1})

    records.delete(table, "p", "r", etag=etag)

    with fails_with(NotFound, status=404, code="ResourceNotFound"):
        records.get(table, "p", "r")
    assert list(records.query(table, "p")) == []


def test_delete_with_any_etag_removes_the_record(backend):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "r", {"v": 1})

    records.delete(table, "p", "r", etag=ANY_ETAG)

    with fails_with(NotFound, status=404):
        records.get(table, "p", "r")


def test_delete_with_stale_etag_conflicts(backend):
    records = backend.storage.records
    table = backend.table()
    stale = records.insert(table, "p", "r", {"v": 1})
    current = records.merge(table, "p", "r", {"v": 2}, etag=stale)

    with fails_with(Conflict, status=412, code="UpdateConditionNotSatisfied"):
        records.delete(table, "p", "r", etag=stale)

    record = records.get(table, "p", "r")
    assert record.etag == current and record.properties == {"v": 2}


@pytest.mark.parametrize("etag", ["old", ANY_ETAG])
def test_delete_of_missing_record_is_not_an_error(backend, etag):
    records = backend.storage.records
    table = backend.table()
    old = records.insert(table, "p", "r", {"v": 1})
    records.delete(table, "p", "r", etag=old)

    records.delete(table, "p", "r", etag=old if etag == "old" else etag)
    records.delete(table, "p", "never-there", etag=ANY_ETAG)

    assert list(records.query(table, "p")) == []


def test_reinsert_after_delete_works(backend):
    records = backend.storage.records
    table = backend.table()
    old = records.insert(table, "p", "r", {"v": 1})
    records.delete(table, "p", "r", etag=old)

    new = records.insert(table, "p", "r", {"v": 2})

    record = records.get(table, "p", "r")
    assert record.etag == new and record.properties == {"v": 2}


@pytest.mark.parametrize("etag", ["", None])
@pytest.mark.parametrize("operation", ["merge", "replace", "delete"])
def test_a_conditional_write_without_an_etag_is_refused(backend, operation, etag):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "r", {"n": 1})
    call = {
        "merge": lambda: records.merge(table, "p", "r", {"n": 2}, etag=etag),
        "replace": lambda: records.replace(table, "p", "r", {"n": 2}, etag=etag),
        "delete": lambda: records.delete(table, "p", "r", etag=etag),
    }[operation]

    with fails_with(InvalidRequest, status=400, code="InvalidInput"):
        call()
    assert records.get(table, "p", "r").properties["n"] == 1
