"""Azure's service targets for records, refused alike by every backend (Azurite alone is laxer).

Queue and blob targets are tested with their stores; these are the Table service's: keys,
property names, values and sizes, batch sizes. A refused write must leave nothing behind.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from checkpoint.errors import InvalidRequest, TooLarge
from checkpoint.service_targets import (
    MAX_ENTITY_BYTES,
    MAX_KEY_BYTES,
    MAX_PROPERTIES,
    MAX_PROPERTY_BYTES,
)
from checkpoint.storage import ANY_ETAG, BatchOp
from tests.contract import fails_with

#: A string of exactly 64 KiB in UTF-16, the largest property value Azure accepts.
LARGEST_TEXT = "x" * (MAX_PROPERTY_BYTES // 2)
LARGEST_BYTES = b"\xab" * MAX_PROPERTY_BYTES


def _write(records, how: str, table: str, partition: str, row: str, properties) -> None:
    """Write one record by ``how``: each write path checks the same limits."""
    if how == "insert":
        records.insert(table, partition, row, properties)
    elif how == "replace":
        records.replace(table, partition, row, properties, etag=ANY_ETAG)
    elif how == "merge":
        records.merge(table, partition, row, properties, etag=ANY_ETAG)
    elif how == "upsert":
        records.upsert(table, partition, row, properties)
    elif how == "upsert-merge":
        records.upsert(table, partition, row, properties, merge=True)
    else:
        records.batch(table, partition, [BatchOp("upsert_replace", row, properties)])


WRITES = ["insert", "replace", "merge", "upsert", "upsert-merge", "batch"]


def _table_with_record(backend) -> str:
    """A table holding p/r (so replace and merge reach their checks, not NotFound)."""
    table = backend.table()
    backend.storage.records.insert(table, "p", "r", {"v": 1})
    return table


def _unchanged(backend, table: str) -> None:
    records = backend.storage.records
    assert [(r.row_key, dict(r.properties)) for r in records.query(table, "p")] == [("r", {"v": 1})]


# --------------------------------------------------------------------------- values


def test_largest_string_and_binary_values_roundtrip(backend):
    records = backend.storage.records
    table = backend.table()

    records.insert(table, "p", "r", {"text": LARGEST_TEXT, "raw": LARGEST_BYTES})

    assert records.get(table, "p", "r").properties == {"text": LARGEST_TEXT, "raw": LARGEST_BYTES}


@pytest.mark.parametrize(
    "value",
    [LARGEST_TEXT + "x", LARGEST_BYTES + b"x", "😀" * (MAX_PROPERTY_BYTES // 4 + 1)],
    ids=["text", "bytes", "text-counted-in-utf16"],
)
@pytest.mark.parametrize("how", WRITES)
def test_property_over_64_kib_is_too_large(backend, how, value):
    table = _table_with_record(backend)

    with fails_with(TooLarge, status=413, code="PropertyValueTooLarge"):
        _write(backend.storage.records, how, table, "p", "r", {"big": value})

    _unchanged(backend, table)


@pytest.mark.parametrize("how", WRITES)
def test_entity_over_1_mib_is_too_large(backend, how):
    table = _table_with_record(backend)
    count = MAX_ENTITY_BYTES // MAX_PROPERTY_BYTES + 1
    properties = {f"p{i}": LARGEST_BYTES for i in range(count)}

    with fails_with(TooLarge, status=413, code="EntityTooLarge"):
        _write(backend.storage.records, how, table, "p", "r", properties)

    _unchanged(backend, table)


def test_252_properties_are_accepted(backend):
    records = backend.storage.records
    table = backend.table()
    properties = {f"p{i}": i for i in range(MAX_PROPERTIES)}

    records.insert(table, "p", "r", {**properties, "not_counted": None})

    assert records.get(table, "p", "r").properties == properties


@pytest.mark.parametrize("how", WRITES)
def test_more_than_252_properties_are_invalid(backend, how):
    table = _table_with_record(backend)
    properties = {f"p{i}": i for i in range(MAX_PROPERTIES + 1)}

    with fails_with(InvalidRequest, status=400, code="TooManyProperties"):
        _write(backend.storage.records, how, table, "p", "r", properties)

    _unchanged(backend, table)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "1starts_with_digit",
        "has-hyphen",
        "has space",
        "dotted.name",
        "PartitionKey",
        "RowKey",
        "Timestamp",
        "etag",
        "n" * 256,
    ],
)
def test_invalid_property_name_is_refused(backend, name):
    table = _table_with_record(backend)

    with fails_with(InvalidRequest, status=400, code="PropertyNameInvalid"):
        backend.storage.records.insert(table, "p", "new", {name: 1})

    _unchanged(backend, table)


@pytest.mark.parametrize("how", WRITES)
def test_invalid_property_name_is_refused_by_every_write(backend, how):
    table = _table_with_record(backend)

    with fails_with(InvalidRequest, status=400, code="PropertyNameInvalid"):
        _write(backend.storage.records, how, table, "p", "r", {"bad-name": 1})

    _unchanged(backend, table)


def test_longest_and_underscore_property_names_are_accepted(backend):
    records = backend.storage.records
    table = backend.table()
    properties = {"n" * 255: 1, "_leading": 2, "Mixed_Case9": 3}

    records.insert(table, "p", "r", properties)

    assert records.get(table, "p", "r").properties == properties


@pytest.mark.parametrize(
    "value",
    [datetime(2030, 1, 1), 2**63, -(2**63) - 1, [1, 2], {"a": 1}, object()],
    ids=["naive-datetime", "int-over-64-bits", "int-under-64-bits", "list", "dict", "object"],
)
@pytest.mark.parametrize("how", WRITES)
def test_unstorable_value_is_invalid(backend, how, value):
    table = _table_with_record(backend)

    with fails_with(InvalidRequest, status=400):
        _write(backend.storage.records, how, table, "p", "r", {"bad": value})

    _unchanged(backend, table)


def test_aware_datetime_of_the_same_moment_is_accepted(backend):
    records = backend.storage.records
    table = backend.table()
    when = datetime(2030, 1, 1, tzinfo=UTC)

    records.insert(table, "p", "r", {"when": when})

    assert records.get(table, "p", "r").properties == {"when": when}


# --------------------------------------------------------------------------- keys


FORBIDDEN_IN_KEYS = ["/", "\\", "#", "?", "\x00", "\x01", "\x1f", "\x7f", "\x9f"]


@pytest.mark.parametrize(
    "char", FORBIDDEN_IN_KEYS, ids=[f"U+{ord(c):04X}" for c in FORBIDDEN_IN_KEYS]
)
@pytest.mark.parametrize("which", ["PartitionKey", "RowKey"])
def test_forbidden_character_in_key_is_invalid(backend, which, char):
    records = backend.storage.records
    table = backend.table()
    key = f"a{char}b"
    partition, row = (key, "r") if which == "PartitionKey" else ("p", key)

    with fails_with(InvalidRequest, status=400):
        records.insert(table, partition, row, {"v": 1})
    with fails_with(InvalidRequest, status=400):
        records.get(table, partition, row)

    assert list(records.query(table, "p")) == []


@pytest.mark.parametrize("how", [*WRITES, "get", "delete", "query"])
def test_slash_in_key_is_refused_by_every_operation(backend, how):
    records = backend.storage.records
    table = _table_with_record(backend)

    with fails_with(InvalidRequest, status=400):
        if how == "get":
            records.get(table, "p", "a/b")
        elif how == "delete":
            records.delete(table, "p", "a/b", etag=ANY_ETAG)
        elif how == "query":
            list(records.query(table, "a/b"))
        else:
            _write(records, how, table, "p", "a/b", {"v": 2})

    _unchanged(backend, table)


def test_key_of_1_kib_is_accepted(backend):
    records = backend.storage.records
    table = backend.table()
    partition = "p" * (MAX_KEY_BYTES // 2)
    row = "r" * (MAX_KEY_BYTES // 2)

    records.insert(table, partition, row, {"v": 1})

    assert records.get(table, partition, row).properties == {"v": 1}


@pytest.mark.parametrize("which", ["PartitionKey", "RowKey"])
def test_key_over_1_kib_is_too_large(backend, which):
    records = backend.storage.records
    table = backend.table()
    key = "k" * (MAX_KEY_BYTES // 2 + 1)
    partition, row = (key, "r") if which == "PartitionKey" else ("p", key)

    with fails_with(TooLarge, status=413, code="KeyValueTooLarge"):
        records.insert(table, partition, row, {"v": 1})


def test_empty_keys_are_allowed(backend):
    records = backend.storage.records
    table = backend.table()

    records.insert(table, "", "", {"v": 1})

    assert records.get(table, "", "").properties == {"v": 1}


# --------------------------------------------------------------------------- batches


def test_batch_over_4_mib_is_too_large(backend):
    records = backend.storage.records
    table = backend.table()
    # Each record just under 1 MiB, five of them: every record is fine, the batch is not
    near_limit = {f"p{i}": LARGEST_TEXT for i in range(15)}
    operations = [BatchOp("insert", f"r{i}", near_limit) for i in range(5)]

    with fails_with(TooLarge, status=413):
        records.batch(table, "p", operations)

    assert list(records.query(table, "p")) == []


def test_batch_with_one_invalid_record_applies_nothing(backend):
    records = backend.storage.records
    table = backend.table()

    with fails_with(InvalidRequest, status=400):
        records.batch(
            table,
            "p",
            [
                BatchOp("insert", "good", {"v": 1}),
                BatchOp("insert", "bad", {"v": datetime(2030, 1, 1)}),
            ],
        )

    assert list(records.query(table, "p")) == []
