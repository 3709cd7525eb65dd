"""Azure backend: values to and from table entities, conditions to OData filters.

Pure functions, no network. The round trips through a real service are in the contract
suite (``tests/contract``); these pin the SDK traps the conversions work around.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from azure.data.tables import EdmType, EntityProperty, TableEntity
from azure.data.tables._deserialize import _convert_to_entity

from checkpoint.backends.azure.entities import (
    build_filter,
    from_sdk,
    select_list,
    to_entity,
    to_record,
    tolerate_undecodable_values,
)
from checkpoint.errors import InvalidRequest
from checkpoint.storage import Where


def test_every_int_is_written_as_int64_and_none_is_left_out():
    entity = to_entity("p", "r", {"small": 1, "big": 2**40, "flag": True, "gone": None})

    assert entity["small"] == EntityProperty(1, EdmType.INT64)
    assert entity["big"] == EntityProperty(2**40, EdmType.INT64)
    assert entity["flag"] is True
    assert "gone" not in entity


def test_int_conditions_get_an_int64_literal_even_for_0_and_1():
    # The SDK would write 0 and 1 as false and true, and small ints without the L
    query, parameters = build_filter("p", [Where("n", "eq", 0), Where("m", "lt", 1)])

    assert query == "PartitionKey eq @pk and n eq 0L and m lt 1L"
    assert parameters == {"pk": "p"}


def test_other_values_go_through_parameters_never_into_the_text():
    hostile = "x' or RowKey ne 'y"
    when = datetime(2030, 1, 1, tzinfo=UTC)

    query, parameters = build_filter(
        "p", [Where("s", "eq", hostile), Where("t", "ge", when), Where("b", "eq", b"\x00")]
    )

    assert hostile not in query
    assert query == "PartitionKey eq @pk and s eq @p0 and t ge @p1 and b eq @p2"
    assert parameters == {"pk": "p", "p0": hostile, "p1": when, "p2": b"\x00"}


@pytest.mark.parametrize(
    "condition",
    [
        Where("bad name", "eq", 1),
        Where("n) or (x", "eq", 1),
        Where("PartitionKey", "eq", "p"),
        Where("n", "like", 1),  # type: ignore[arg-type]
        Where("n", "eq", None),
        Where("n", "eq", float("nan")),
        Where("n", "eq", 2**63),
        Where("t", "eq", datetime(2030, 1, 1)),
        Where("n", "eq", [1]),  # type: ignore[arg-type]
    ],
)
def test_bad_conditions_are_refused_before_any_request(condition):
    with pytest.raises(InvalidRequest):
        build_filter("p", [condition])


def test_row_key_can_be_queried():
    query, _ = build_filter("p", [Where("RowKey", "gt", "b")])

    assert query == "PartitionKey eq @pk and RowKey gt @p0"


def test_select_always_includes_keys_and_timestamp():
    assert select_list(None) is None
    assert select_list([]) == ["PartitionKey", "RowKey", "Timestamp"]
    assert select_list(["a", "RowKey", "a"]) == ["PartitionKey", "RowKey", "Timestamp", "a"]
    with pytest.raises(InvalidRequest):
        select_list("a")


def test_values_read_back_in_the_types_written():
    # Given the wire format Azure answers with: typed Int64 and DateTime, and an
    # integral double without a type (Azure/azure-sdk-for-js#19899)
    entity = _convert_to_entity(
        {
            "PartitionKey": "p",
            "RowKey": "r",
            "n@odata.type": "Edm.Int64",
            "n": "7",
            "f": 3,
            "t@odata.type": "Edm.DateTime",
            "t": "2030-01-02T03:04:05.1234567Z",
            "raw@odata.type": "Edm.Binary",
            "raw": "AAE=",
            "flag": True,
            "s": "x",
        }
    )
    assert isinstance(entity, TableEntity)

    values = {name: from_sdk(value) for name, value in entity.items()}

    assert values["n"] == 7 and type(values["n"]) is int
    assert values["f"] == 3.0 and type(values["f"]) is float
    assert values["t"] == datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert type(values["t"]) is datetime  # not the SDK's TablesEntityDatetime
    assert values["raw"] == b"\x00\x01"
    assert values["flag"] is True and values["s"] == "x"


def test_datetimes_in_other_zones_read_back_as_utc():
    moment = datetime(2030, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))

    assert from_sdk(moment) == moment
    assert from_sdk(moment).tzinfo is UTC


def test_binary_values_of_any_buffer_type_are_written_as_bytes():
    entity = to_entity("p", "r", {"raw": bytearray(b"ab"), "view": memoryview(b"cd")})

    assert entity["raw"] == b"ab" and type(entity["raw"]) is bytes
    assert entity["view"] == b"cd" and type(entity["view"]) is bytes


def test_a_value_of_another_writer_of_no_type_we_write_reads_back_as_text():
    guid = uuid.UUID("12345678-1234-5678-1234-567812345678")

    assert from_sdk(guid) == "12345678-1234-5678-1234-567812345678"
    assert from_sdk(EntityProperty(guid, EdmType.GUID)) == str(guid)


@pytest.mark.parametrize(
    ("edm", "text", "why"),
    [
        ("Edm.Int64", "7x", "property 'v' is Edm.Int64 '7x', not a whole number"),
        ("Edm.Double", "fast", "property 'v' is Edm.Double 'fast', not a valid Edm.Double"),
        ("Edm.DateTime", "soon", "property 'v' is Edm.DateTime 'soon', not a valid Edm.DateTime"),
    ],
)
def test_a_typed_value_its_type_cannot_hold_makes_the_record_unreadable(
    edm: str, text: str, why: str
):
    # Given an answer of another writer's entity, read once the SDK is made tolerant
    tolerate_undecodable_values()
    tolerate_undecodable_values()  # again: idempotent, not wrapped twice
    answer = {"PartitionKey": "p", "RowKey": "r", "v@odata.type": edm, "v": text, "n": "x"}
    answer["odata.etag"] = 'W/"1"'

    # When it is read, then the record says why and holds no property
    record = to_record(_convert_to_entity(answer))
    assert (record.unreadable, record.properties, record.etag) == (why, {}, 'W/"1"')
    # And a good value of that type still reads as before
    good = {"Edm.Int64": "7", "Edm.Double": "1.5", "Edm.DateTime": "2030-01-02T03:04:05Z"}
    fine = to_record(_convert_to_entity({**answer, "v": good[edm]}))
    assert fine.unreadable is None and fine.properties["n"] == "x"
