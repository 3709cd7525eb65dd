"""Azure's rules, checked once for every backend (pure functions, no storage needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from checkpoint import service_targets
from checkpoint.errors import InvalidRequest, TooLarge

UTC = UTC


@pytest.mark.parametrize("name", ["abc", "a-b-c", "q1", "x" * 63, "0jobs", "migrate-orders-poison"])
def test_good_queue_names(name):
    if len(name) < 3:
        with pytest.raises(InvalidRequest):
            service_targets.check_queue_name(name)
    else:
        assert service_targets.check_queue_name(name) == name


@pytest.mark.parametrize(
    "name", ["ab", "x" * 64, "Upper", "-lead", "trail-", "dou--ble", "under_score", ""]
)
def test_bad_queue_and_container_names(name):
    with pytest.raises(InvalidRequest, match="invalid queue name"):
        service_targets.check_queue_name(name)
    with pytest.raises(InvalidRequest, match="invalid container name"):
        service_targets.check_container_name(name)


@pytest.mark.parametrize(
    "name, good",
    [
        ("Jobs", True),
        ("jobs2", True),
        ("2jobs", False),
        ("jo", False),
        ("tables", False),
        ("with-dash", False),
    ],
)
def test_table_names(name, good):
    if good:
        assert service_targets.check_table_name(name) == name
    else:
        with pytest.raises(InvalidRequest, match="invalid table name"):
            service_targets.check_table_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "dir/file.txt",
        "a/b/c",
        "/".join(["x" * 255] * 4)[:1024],
        "spaces ok/é",
        "/".join("s" * 254),
    ],
)
def test_good_blob_names(name):
    assert service_targets.check_blob_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/lead",
        "trail/",
        "a//b",
        "../up",
        "a/./b",
        "x" * 1025,
        "tab\tname",
        "x" * 256,
        "/".join("s" * 255),
    ],
)
def test_bad_blob_names(name):
    with pytest.raises(InvalidRequest, match="invalid blob name"):
        service_targets.check_blob_name(name)


def test_message_body_size_is_48_kib_raw():
    assert (
        len(service_targets.check_message_body(b"x" * service_targets.MAX_MESSAGE_BYTES)) == 49_152
    )
    with pytest.raises(TooLarge) as caught:
        service_targets.check_message_body(b"x" * (service_targets.MAX_MESSAGE_BYTES + 1))
    assert (caught.value.status, caught.value.code) == (413, "RequestBodyTooLarge")
    with pytest.raises(InvalidRequest, match="bytes, not str"):
        service_targets.check_message_body("text")  # type: ignore[arg-type]


@pytest.mark.parametrize("ttl, delay, expected", [(None, 0, 604_800), (-1, 5, -1), (10, 5, 10)])
def test_ttl_accepted(ttl, delay, expected):
    assert service_targets.check_ttl(ttl, delay) == expected


@pytest.mark.parametrize("ttl, delay", [(0, 0), (-2, 0), (5, 5), (1.5, 0), (True, 0)])
def test_ttl_refused(ttl, delay):
    with pytest.raises(InvalidRequest, match="ttl_seconds"):
        service_targets.check_ttl(ttl, delay)


@pytest.mark.parametrize("value", [-1, 604_801, 1.5, True, "3"])
def test_visibility_out_of_range(value):
    with pytest.raises(InvalidRequest, match="visibility_seconds must be a whole number"):
        service_targets.check_whole(value, "visibility_seconds", 0)


def test_max_messages_is_1_to_32():
    assert service_targets.check_max_messages(32) == 32
    for bad in (0, 33):
        with pytest.raises(InvalidRequest, match="max_messages must be a whole number of messages"):
            service_targets.check_max_messages(bad)


@pytest.mark.parametrize("key", ["a/b", "a\\b", "a#b", "a?b", "a\x00b", "a\x7fb", "a\x85b"])
def test_forbidden_key_characters(key):
    with pytest.raises(InvalidRequest, match="forbids"):
        service_targets.check_key(key, "RowKey")


def test_key_size_counts_utf16_bytes():
    assert service_targets.check_key("k" * 512, "RowKey")
    with pytest.raises(TooLarge):
        service_targets.check_key("k" * 513, "RowKey")


def test_entity_size_formula_matches_azure():
    # 4 + keys (2 chars each, UTF-16) + per property 8 + name + value.
    size = service_targets.check_entity(
        "pk",
        "rk",
        {
            "s": "abc",
            "n": 1,
            "f": 0.5,
            "b": True,
            "d": datetime(2030, 1, 1, tzinfo=UTC),
            "y": b"\x00\x01",
            "gone": None,
        },
    )
    expected = (
        4
        + 4
        + 4
        + (8 + 2 + 4 + 6)
        + (8 + 2 + 8)
        + (8 + 2 + 8)
        + (8 + 2 + 1)
        + (8 + 2 + 8)
        + (8 + 2 + 4 + 2)
    )
    assert size == expected


def test_string_property_size_is_64_kib_in_utf16():
    service_targets.check_entity("p", "r", {"s": "x" * 32_768})
    with pytest.raises(TooLarge, match="over Azure's 65,536-byte property size") as caught:
        service_targets.check_entity("p", "r", {"s": "x" * 32_769})
    assert caught.value.code == "PropertyValueTooLarge"


def test_binary_property_size_is_64_kib():
    service_targets.check_entity("p", "r", {"b": b"x" * 65_536})
    with pytest.raises(TooLarge):
        service_targets.check_entity("p", "r", {"b": b"x" * 65_537})


def test_entity_size_is_1_mib():
    near = {f"p{i}": b"x" * 60_000 for i in range(17)}
    service_targets.check_entity("p", "r", near)
    near["p17"] = b"x" * 60_000
    with pytest.raises(TooLarge, match="entity size") as caught:
        service_targets.check_entity("p", "r", near)
    assert caught.value.code == "EntityTooLarge"


def test_the_property_count_ignores_none():
    props: dict[str, object] = {f"p{i}": i for i in range(252)}
    props["absent"] = None
    service_targets.check_entity("p", "r", props)
    props["one_more"] = 1
    with pytest.raises(InvalidRequest, match="over Azure's 252"):
        service_targets.check_entity("p", "r", props)


@pytest.mark.parametrize(
    "name", ["RowKey", "PartitionKey", "Timestamp", "etag", "1st", "has-dash", "x" * 256]
)
def test_bad_property_names(name):
    with pytest.raises(InvalidRequest, match="invalid property name"):
        service_targets.check_entity("p", "r", {name: 1})


@pytest.mark.parametrize(
    "value, fragment",
    [
        (2**63, "64 bits"),
        (datetime(2030, 1, 1), "timezone-aware"),
        ([1], "records hold"),
    ],
)
def test_bad_property_values(value, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        service_targets.check_entity("p", "r", {"v": value})


def test_batch_bounds_and_distinct_rows():
    service_targets.check_batch([str(i) for i in range(100)], [10] * 100)
    with pytest.raises(InvalidRequest, match="1 to 100"):
        service_targets.check_batch([str(i) for i in range(101)], [10] * 101)
    with pytest.raises(InvalidRequest, match="1 to 100"):
        service_targets.check_batch([], [])
    with pytest.raises(InvalidRequest, match="only once"):
        service_targets.check_batch(["a", "a"], [1, 1])
    with pytest.raises(TooLarge):
        service_targets.check_batch(["a", "b", "c", "d", "e"], [1024 * 1024] * 5)


def test_keys_and_property_names_must_be_strings():
    with pytest.raises(InvalidRequest, match="RowKey must be a string, not int"):
        service_targets.check_entity("p", 7, {})  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="invalid property name"):
        service_targets.check_entity("p", "r", {1: "x"})  # type: ignore[dict-item]


def test_a_subclass_of_a_stored_type_is_sized_and_checked_as_its_base():
    class Name(str):
        pass

    class Count(int):
        pass

    class Ratio(float):
        pass

    class Raw(bytes):
        pass

    plain = service_targets.check_entity(
        "p", "r", {"name": "abc", "count": 3, "ratio": 0.5, "raw": b"x"}
    )
    subclassed = {"name": Name("abc"), "count": Count(3), "ratio": Ratio(0.5), "raw": Raw(b"x")}
    assert service_targets.check_entity("p", "r", subclassed) == plain
    with pytest.raises(InvalidRequest, match="64 bits"):
        service_targets.check_entity("p", "r", {"count": Count(2**63)})
