"""msgpack, the one encoding of params, payloads, state and results: what round-trips, what
is refused, and that every way of failing is a CodecError (never a bare msgpack or
Python error, which would escape the runner's handling of bad input)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import msgpack
import pytest

from checkpoint import codec
from checkpoint.errors import CodecError, RunnerError


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**64 - 1,
        -(2**63),
        1.5,
        "",
        "héllo ✓ 😀",
        b"",
        bytes(range(256)),
        [],
        {},
        [1, "two", b"three", None, [4.0]],
        {"nested": {"list": [1, 2, {"deep": True}]}},
        {1: "int key", b"raw": "bytes key"},
        datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
    ],
)
def test_values_round_trip_unchanged(value):
    assert codec.decode(codec.encode(value)) == value


def test_tuples_come_back_as_lists():
    assert codec.decode(codec.encode((1, (2, 3)))) == [1, [2, 3]]


def test_aware_datetimes_come_back_in_utc():
    plus_two = timezone(timedelta(hours=2))
    back = codec.decode(codec.encode(datetime(2030, 1, 1, 12, tzinfo=plus_two)))
    assert back == datetime(2030, 1, 1, 10, tzinfo=UTC)
    assert back.utcoffset() == timedelta(0)


def test_bytes_stay_bytes_and_text_stays_text():
    back = codec.decode(codec.encode({"b": b"x", "s": "x"}))
    assert type(back["b"]) is bytes and type(back["s"]) is str


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        object(),
        datetime(2030, 1, 1),  # naive: ambiguous, refused
        2**64,
        -(2**63) - 1,
        {"deep": [lambda: None]},
    ],
    ids=["set", "object", "naive-datetime", "too-big", "too-small", "nested-function"],
)
def test_values_msgpack_cannot_hold_are_refused_with_codec_error(value):
    with pytest.raises(CodecError, match="chunk state is not msgpack-able") as refused:
        codec.encode(value, "chunk state")
    assert isinstance(refused.value, RunnerError)
    assert refused.value.__cause__ is not None


def test_codec_error_is_a_value_error_for_callers_that_expect_one():
    with pytest.raises(ValueError):
        codec.encode({1, 2})


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x92\x01",  # an array of two holding one
        b"\xc1",  # the one byte msgpack never uses
        b"\x01\x02",  # two values, not one
        b"\x91" * 100_000,  # nested deeper than the unpacker allows
        b"\xc7\x03\xff\x00\x00\x00",  # a timestamp of impossible length
        msgpack.packb({(1, 2): 3}),  # a map keyed by an array: unhashable in Python
        b"\x81\x80\x01",  # a map keyed by a map
    ],
    ids=[
        "empty",
        "truncated",
        "reserved-byte",
        "extra-data",
        "too-deep",
        "bad-timestamp",
        "array-key",
        "map-key",
    ],
)
def test_every_undecodable_input_is_a_codec_error(data):
    with pytest.raises(CodecError, match="progress is not valid msgpack"):
        codec.decode(data, "progress")


def test_random_bytes_decode_or_fail_with_codec_error_only():
    rng = random.Random(20300101)
    for _ in range(3000):
        data = rng.randbytes(rng.randint(1, 40))
        try:
            codec.decode(data)
        except CodecError:
            pass
