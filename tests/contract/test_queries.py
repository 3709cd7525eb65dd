"""RecordStore contract: queries of one partition (Azure's OData filter semantics)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from checkpoint.errors import InvalidRequest
from checkpoint.storage import BatchOp, Where
from tests.contract import EVERY_TYPE, assert_same_types, fails_with


def _at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


#: Rows a < b < c hold increasing values of every type; row m lacks all of them.
#: Binary values are compared only with eq/ne (Azurite orders binary by its base64 text,
#: b"\xff" < b"\x01" there, so ordering bytes is refused by both backends).
ROWS = {
    "a": {
        "s": "Zebra",
        "n": -(2**40),
        "f": -1.5,
        "raw": b"\x00\x10",
        "t": _at(2030, 1, 1),
        "flag": False,
    },
    "b": {
        "s": "apple",
        "n": 7,
        "f": 0.25,
        "raw": b"\x01\x00",
        "t": _at(2030, 6, 1, 12, 0, 0, 500000),
        "flag": True,
    },
    "c": {
        "s": "apricot",
        "n": 2**40,
        "f": 1e10,
        "raw": b"\x02\x00",
        "t": _at(2031, 1, 1),
        "flag": True,
    },
    "m": {"only_here": 1},
}

#: Comparing with row b's value selects these rows (never m, which lacks the property).
AGAINST_MIDDLE = {
    "eq": ["b"],
    "ne": ["a", "c"],
    "gt": ["c"],
    "ge": ["b", "c"],
    "lt": ["a"],
    "le": ["a", "b"],
}
#: Comparing ``flag`` (False, True, True) with True.
AGAINST_TRUE = {
    "eq": ["b", "c"],
    "ne": ["a"],
    "gt": [],
    "ge": ["b", "c"],
    "lt": ["a"],
    "le": ["a", "b", "c"],
}
#: Comparing ``n`` with 2**40, a value only a 64-bit integer holds.
AGAINST_INT64 = {
    "eq": ["c"],
    "ne": ["a", "b"],
    "gt": [],
    "ge": ["c"],
    "lt": ["a", "b"],
    "le": ["a", "b", "c"],
}
#: Comparing RowKey with "b" (row m has every property's absence but still a RowKey).
ROW_KEY_AGAINST_B = {
    "eq": ["b"],
    "ne": ["a", "c", "m"],
    "gt": ["c", "m"],
    "ge": ["b", "c", "m"],
    "lt": ["a"],
    "le": ["a", "b"],
}

CASES = [
    *[
        (prop, op, ROWS["b"][prop], rows)
        for prop in ("s", "n", "f", "t")
        for op, rows in AGAINST_MIDDLE.items()
    ],
    *[("raw", op, ROWS["b"]["raw"], AGAINST_MIDDLE[op]) for op in ("eq", "ne")],
    *[("flag", op, True, rows) for op, rows in AGAINST_TRUE.items()],
    *[("n", op, 2**40, rows) for op, rows in AGAINST_INT64.items()],
    *[("RowKey", op, "b", rows) for op, rows in ROW_KEY_AGAINST_B.items()],
]


def _seeded(backend) -> str:
    """A table holding ROWS in partition "p" and the same rows in partition "other"."""
    records = backend.storage.records
    table = backend.table()
    for partition in ("p", "other"):
        for row_key in ("c", "m", "a", "b"):
            records.insert(table, partition, row_key, ROWS[row_key])
    return table


def _row_keys(records) -> list[str]:
    return [record.row_key for record in records]


@pytest.mark.parametrize(
    ("prop", "op", "value", "expected"),
    CASES,
    ids=[
        f"{prop}-{op}-{type(value).__name__}" + ("64" if value == 2**40 else "")
        for prop, op, value, _ in CASES
    ],
)
def test_each_comparison_on_each_type(backend, prop, op, value, expected):
    table = _seeded(backend)

    found = list(backend.storage.records.query(table, "p", [Where(prop, op, value)]))

    assert _row_keys(found) == expected
    assert all(record.partition_key == "p" for record in found)


def test_query_without_conditions_returns_the_partition_in_row_key_order(backend):
    records = backend.storage.records
    table = backend.table()
    keys = ["b", "B", "a0", "a", "10", "9", "_", "a-"]
    for key in keys:
        records.insert(table, "p", key, {"k": key})
    records.insert(table, "p2", "0", {"k": "elsewhere"})
    records.insert(table, "o", "0", {"k": "elsewhere"})

    found = list(records.query(table, "p"))

    assert _row_keys(found) == ["10", "9", "B", "_", "a", "a-", "a0", "b"]
    assert all(record.properties == {"k": record.row_key} for record in found)


def test_query_returns_records_with_types_and_etags_intact(backend):
    records = backend.storage.records
    table = backend.table()
    etag = records.insert(table, "p", "r", EVERY_TYPE)

    (found,) = records.query(table, "p")

    assert found.etag == etag
    assert (found.partition_key, found.row_key) == ("p", "r")
    assert_same_types(found.properties, EVERY_TYPE)


def test_query_of_an_empty_partition_returns_nothing(backend):
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "r", {})
    assert list(records.query(table, "empty")) == []


def test_conditions_are_anded(backend):
    records = backend.storage.records
    table = _seeded(backend)

    both = records.query(table, "p", [Where("n", "ge", 7), Where("s", "lt", "apricot")])
    three = records.query(
        table,
        "p",
        [Where("RowKey", "gt", "a"), Where("flag", "eq", True), Where("f", "lt", 1.0)],
    )
    none = records.query(table, "p", [Where("n", "gt", 7), Where("n", "lt", 7)])

    assert _row_keys(both) == ["b"]
    assert _row_keys(three) == ["b"]
    assert _row_keys(none) == []


@pytest.mark.parametrize("op", ["eq", "ne", "gt", "ge", "lt", "le"])
def test_a_missing_property_fails_every_condition(backend, op):
    table = _seeded(backend)

    found = backend.storage.records.query(table, "p", [Where("nowhere", op, 1)])

    assert _row_keys(found) == []


def test_a_property_only_some_records_hold(backend):
    records = backend.storage.records
    table = _seeded(backend)

    assert _row_keys(records.query(table, "p", [Where("only_here", "eq", 1)])) == ["m"]
    assert _row_keys(records.query(table, "p", [Where("s", "ne", "x")])) == ["a", "b", "c"]
    assert _row_keys(records.query(table, "p", [Where("only_here", "ne", 2)])) == ["m"]


def test_other_partitions_are_never_returned(backend):
    records = backend.storage.records
    table = _seeded(backend)

    found = list(records.query(table, "other", [Where("n", "ge", 7)]))

    assert _row_keys(found) == ["b", "c"]
    assert all(record.partition_key == "other" for record in found)


def test_select_keeps_only_the_named_properties(backend):
    records = backend.storage.records
    table = _seeded(backend)

    found = list(records.query(table, "p", select=["s", "n", "not_anywhere"]))

    assert _row_keys(found) == ["a", "b", "c", "m"]
    for record in found[:3]:
        assert dict(record.properties) == {
            "s": ROWS[record.row_key]["s"],
            "n": ROWS[record.row_key]["n"],
        }
    assert dict(found[3].properties) == {}
    for record in found:
        assert record.partition_key == "p"
        assert record.etag == records.get(table, "p", record.row_key).etag


def test_select_with_conditions_on_unselected_properties(backend):
    records = backend.storage.records
    table = _seeded(backend)

    found = list(records.query(table, "p", [Where("flag", "eq", True)], select=["f"]))

    assert _row_keys(found) == ["b", "c"]
    assert [dict(r.properties) for r in found] == [{"f": 0.25}, {"f": 1e10}]


def test_limit_stops_after_that_many_in_row_key_order(backend):
    records = backend.storage.records
    table = _seeded(backend)

    assert _row_keys(records.query(table, "p", limit=2)) == ["a", "b"]
    assert _row_keys(records.query(table, "p", limit=1)) == ["a"]
    assert _row_keys(records.query(table, "p", limit=10)) == ["a", "b", "c", "m"]
    assert _row_keys(records.query(table, "p", [Where("flag", "eq", True)], limit=1)) == ["b"]


@pytest.mark.parametrize("value", [True, False])
def test_an_int_property_never_equals_a_bool(backend, value):
    # Only this direction: Azurite answers 500 to a Boolean property compared with an
    # Int64 literal, where Azure (and the embedded store) find no match.
    records = backend.storage.records
    table = backend.table()
    records.insert(table, "p", "one", {"n": 1})
    records.insert(table, "p", "zero", {"n": 0})

    assert _row_keys(records.query(table, "p", [Where("n", "eq", value)])) == []


def test_queries_run_past_the_service_page_of_1000(backend):
    records = backend.storage.records
    table = backend.table()
    # Given 1,100 records (Azure pages query results by 1,000), every 250th one marked
    count = 1100
    for first in range(0, count, 100):
        records.batch(
            table,
            "p",
            [
                BatchOp("insert", f"r{i:05d}", {"i": i, "marked": i % 250 == 0})
                for i in range(first, first + 100)
            ],
        )

    # Then every page is followed, in order, with and without conditions and limits
    everything = list(records.query(table, "p"))
    assert [r.properties["i"] for r in everything] == list(range(count))
    marked = records.query(table, "p", [Where("marked", "eq", True)])
    assert [r.properties["i"] for r in marked] == [0, 250, 500, 750, 1000]
    tail = records.query(table, "p", [Where("RowKey", "ge", "r00990")], select=["i"])
    assert [r.properties["i"] for r in tail] == list(range(990, count))
    assert len(list(records.query(table, "p", limit=1050))) == 1050


@pytest.mark.parametrize(
    "condition",
    [
        Where("t", "eq", datetime(2030, 1, 1)),
        Where("t", "like", 1),
        Where("t", "eq", None),
        Where("t", "eq", [1]),
        Where("raw", "gt", b"\x01"),
        Where("has-dash", "eq", 1),
        Where("Timestamp", "eq", 1),
        Where("n", "eq", 2**63),
        Where("f", "lt", float("nan")),
    ],
    ids=[
        "naive-datetime",
        "unknown-operator",
        "none",
        "list",
        "ordering-bytes",
        "bad-name",
        "reserved-name",
        "int-beyond-64-bits",
        "nan",
    ],
)
def test_a_condition_azure_cannot_express_is_invalid(backend, condition):
    table = _seeded(backend)

    with fails_with(InvalidRequest, status=400):
        list(backend.storage.records.query(table, "p", [condition]))
