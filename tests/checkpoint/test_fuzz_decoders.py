"""The decoders of what others can write never fail but in their own way: a queue
message only with BadMessage, a record only with BadRecord, msgpack and the embedded
store's rows only with CodecError, whatever the input (hypothesis, derandomized so CI
sees the same cases)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint import codec, messages
from checkpoint.backends.embedded import entities
from checkpoint.errors import BadMessage, BadRecord, CodecError
from checkpoint.records import JobRecord, TaskRecord
from checkpoint.storage import Record

FUZZ = settings(max_examples=200, deadline=None, derandomize=True)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.datetimes(timezones=st.just(UTC)),
)
structures = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(scalars, inner, max_size=4),
    max_leaves=12,
)
#: Envelopes close to ours, so the checks past the marker are reached too.
envelopes = st.fixed_dictionaries(
    {messages.MAGIC: st.one_of(st.just(messages.VERSION), structures)},
    optional={
        "k": st.sampled_from(["p", "c", "f", "x"]) | structures,
        "t": st.text(max_size=10) | structures,
        "j": st.from_regex(r"[a-z0-9][a-z0-9._-]{0,8}", fullmatch=True) | structures,
        "i": st.integers(min_value=-2, max_value=2**40) | structures,
        "e": st.text(max_size=5) | structures,
        "p": st.binary(max_size=10) | structures,
    },
)
property_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.datetimes(),
    st.datetimes(timezones=st.just(UTC)),
    st.sampled_from(["waiting", "running", "done", "poisoned", "planning", "failed", ""]),
)
names = st.sampled_from(
    [
        "state", "attempt", "owner", "message_id", "lease_until", "updated_on",
        "error_type", "error_message", "error_traceback", "job_type", "queue", "total",
        "created_on", "error", "payload", "other",
    ]
)  # fmt: skip
properties = st.dictionaries(names, property_values, max_size=10)


def _packed(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True, datetime=True)


@FUZZ
@given(st.binary(max_size=200))
def test_a_message_of_any_bytes_is_decoded_or_a_bad_message(body: bytes):
    try:
        messages.decode(body)
    except BadMessage:
        pass


@FUZZ
@given(st.one_of(structures, envelopes))
def test_a_message_of_any_msgpack_is_decoded_or_a_bad_message(value: Any):
    try:
        body = _packed(value)
    except (TypeError, ValueError, OverflowError):
        return  # not msgpack-able (an int too large for it): no such message can exist
    try:
        decoded = messages.decode(body)
    except BadMessage:
        return
    assert decoded.kind in ("plan", "chunk", "final") and decoded.index >= 0


@FUZZ
@given(st.binary(max_size=200))
def test_codec_decode_of_any_bytes_is_a_value_or_a_codec_error(data: bytes):
    try:
        codec.decode(data)
    except CodecError:
        pass


def _property_values_only(found: dict[str, Any]) -> bool:
    return all(
        isinstance(name, str)
        and (value is None or isinstance(value, (str, int, float, bool, bytes, datetime)))
        for name, value in found.items()
    )


@FUZZ
@given(st.binary(max_size=200))
def test_an_embedded_row_of_any_bytes_is_properties_or_a_codec_error(data: bytes):
    try:
        found = entities.unpack(data)
    except CodecError as error:
        assert str(error).startswith("its stored row ")
        return
    assert isinstance(found, dict) and _property_values_only(found)


@FUZZ
@given(st.one_of(structures, properties))
def test_an_embedded_row_of_any_msgpack_is_properties_or_a_codec_error(value: Any):
    try:
        data = _packed(value)
    except (TypeError, ValueError, OverflowError):
        return  # not msgpack-able: no such row can exist
    try:
        found = entities.unpack(data)
    except CodecError as error:
        assert str(error).startswith("its stored row ")
        return
    assert isinstance(found, dict) and _property_values_only(found)


@FUZZ
@given(st.binary(max_size=200))
def test_a_task_record_of_any_stored_row_is_read_or_a_bad_record(data: bytes):
    try:
        found, unreadable = entities.unpack(data), None
    except CodecError as error:
        found, unreadable = {}, str(error)
    record = Record("p", "c000000000007", found, "e", unreadable=unreadable)
    try:
        TaskRecord.from_record("job-x", "chunk", 7, record)
    except BadRecord as bad:
        assert str(bad).startswith("chunk 7 of job 'job-x': ")
        assert unreadable is None or str(bad).endswith(unreadable)


@FUZZ
@given(properties)
def test_a_task_record_of_any_properties_is_read_or_a_bad_record(found: dict[str, Any]):
    record = Record(partition_key="p", row_key="c000000000007", properties=found, etag="e")
    try:
        task = TaskRecord.from_record("job-x", "chunk", 7, record)
    except BadRecord as bad:
        assert str(bad).startswith("chunk 7 of job 'job-x': ")
        return
    assert task.state in ("waiting", "running", "retrying", "done", "poisoned")
    assert type(task.attempt) is int and task.attempt >= 0
    assert task.lease_until is None or task.lease_until.tzinfo is not None


@FUZZ
@given(properties)
def test_a_job_record_of_any_properties_is_read_or_a_bad_record(found: dict[str, Any]):
    record = Record(partition_key="jobs", row_key="job-x", properties=found, etag="e")
    try:
        job = JobRecord.from_record(record)
    except BadRecord as bad:
        assert str(bad).startswith("job 'job-x': ")
        return
    assert job.job_type and job.queue
    assert job.total is None or (type(job.total) is int and job.total >= 0)


@pytest.mark.parametrize(
    "header",
    [
        b"\xdd\xff\xff\xff\xff",  # array 32 of 4 Gi items
        b"\xdf\xff\xff\xff\xff",  # map 32 of 4 Gi entries
        b"\xdb\xff\xff\xff\xff",  # str 32 of 4 GiB
        b"\xc6\xff\xff\xff\xff",  # bin 32 of 4 GiB
        b"\xc9\xff\xff\xff\xff\x01",  # ext 32 of 4 GiB
        b"\x91\xdd\xff\xff\xff\xff",  # nested inside an array
    ],
    ids=["array", "map", "str", "bin", "ext", "nested"],
)
def test_a_header_claiming_4_gib_fails_at_once_with_a_codec_error(header: bytes):
    with pytest.raises(CodecError):
        codec.decode(header + b"\x00" * 64)
    with pytest.raises(BadMessage, match="not msgpack"):
        messages.decode(header)


def test_limits_still_let_a_large_spilled_value_through():
    value = {"rows": list(range(50_000)), "blob": b"x" * 200_000, "when": datetime.now(UTC)}
    assert codec.decode(codec.encode(value)) == value
