"""The queue envelope: what is ours decodes exactly; anything else is a BadMessage (and so
goes to the poison queue), never another exception that would leave it retried forever."""

from __future__ import annotations

import random

import msgpack
import pytest

from checkpoint import layout, messages, service_targets
from checkpoint.errors import BadMessage
from checkpoint.messages import MAGIC, VERSION, TaskMessage

GOOD = {MAGIC: VERSION, "k": "c", "t": "samples.orders:MigrateOrders", "j": "job-1", "i": 3}


def _body(**changes) -> bytes:
    envelope = {**GOOD, **changes}
    return msgpack.packb({k: v for k, v in envelope.items() if v is not _DROP})


_DROP = object()


@pytest.mark.parametrize(
    "message",
    [
        TaskMessage("plan", "samples.orders:MigrateOrders", "job-1"),
        TaskMessage("chunk", "mod:Cls", "j", 0),
        TaskMessage("chunk", "mod:Cls", "a.b_c-D9", 2**40),
        TaskMessage("final", "pkg.mod:Outer.Inner", "x" * 100),
        TaskMessage("chunk", "mod:Cls", "j", 5, "W/\"datetime'2026-11-22T04%3A30Z'\"", b"\x81"),
        TaskMessage("chunk", "mod:Cls", "j", 5, "etag", b"\x81", incarnation="0123456789abcdef"),
        TaskMessage("final", "mod:Cls", "j", incarnation="0123456789abcdef"),
    ],
)
def test_round_trip(message):
    body = messages.encode(message)
    assert messages.decode(body) == message
    assert len(body) < 400  # a claim check, not a payload


def test_encoded_message_is_plain_msgpack_with_the_marker():
    body = messages.encode(TaskMessage("chunk", "m:C", "job", 7))
    assert msgpack.unpackb(body) == {MAGIC: VERSION, "k": "c", "t": "m:C", "j": "job", "i": 7}


BAD_BODIES = {
    "empty": b"",
    "not-msgpack": b"\xc1\xc1",
    "truncated": messages.encode(TaskMessage("chunk", "m:C", "job", 1))[:-3],
    "extra-bytes": messages.encode(TaskMessage("chunk", "m:C", "job", 1)) + b"\x00",
    "json-text": b'{"chunkrunner": 1, "k": "c"}',
    "plain-text": b"hello world",
    "msgpack-int": msgpack.packb(42),
    "msgpack-str": msgpack.packb("chunkrunner"),
    "msgpack-list": msgpack.packb([MAGIC, VERSION, "c", "m:C", "job", 0]),
    "msgpack-nil": msgpack.packb(None),
    "dict-without-marker": msgpack.packb({"k": "c", "t": "m:C", "j": "job", "i": 0}),
    "empty-dict": msgpack.packb({}),
    "wrong-version": _body(**{MAGIC: 2}),
    "version-as-text": _body(**{MAGIC: "1"}),
    "version-none": _body(**{MAGIC: None}),
    "bad-kind": _body(k="x"),
    "kind-spelled-out": _body(k="chunk"),
    "kind-as-list": _body(k=["c"]),
    "kind-as-dict": _body(k={"c": 1}),
    "kind-as-int": _body(k=1),
    "kind-missing": _body(k=_DROP),
    "job-type-not-str": _body(t=7),
    "job-type-bytes": _body(t=b"m:C"),
    "job-type-missing": _body(t=_DROP),
    "job-id-not-str": _body(j=12),
    "job-id-bytes": _body(j=b"job"),
    "job-id-none": _body(j=None),
    "job-id-empty": _body(j=""),
    "job-id-with-slash": _body(j="a/b"),
    "job-id-with-hash": _body(j="a#b"),
    "job-id-too-long": _body(j="x" * 101),
    "index-negative": _body(i=-1),
    "index-bool": _body(i=True),
    "index-float": _body(i=1.0),
    "index-str": _body(i="1"),
    "index-none": _body(i=None),
    "index-missing": _body(i=_DROP),
    "map-keyed-by-array": b"\x81\x92\x01\x02\x01",
    "planned-etag-without-payload": _body(e="etag"),
    "planned-payload-without-etag": _body(p=b"\x01"),
    "planned-etag-empty": _body(e="", p=b"\x01"),
    "planned-etag-bytes": _body(e=b"etag", p=b"\x01"),
    "planned-payload-str": _body(e="etag", p="payload"),
    "planned-record-on-plan": _body(k="p", e="etag", p=b"\x01"),
    "incarnation-empty": _body(n=""),
    "incarnation-bytes": _body(n=b"0123"),
    "incarnation-int": _body(n=7),
    "poison-record": messages.poisoned(b"orig", "q-x", "why", "2030-01-01T00:00:00+00:00"),
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_bad_body_is_a_bad_message(body):
    with pytest.raises(BadMessage) as bad:
        messages.decode(body)
    assert str(bad.value)  # a reason for the log and the poison record


def test_a_planned_record_travels_only_with_both_parts():
    half = TaskMessage("chunk", "m:C", "job", 1, planned_etag="etag")
    assert messages.decode(messages.encode(half)).planned_etag is None


def test_random_bytes_are_bad_messages_and_nothing_else():
    rng = random.Random(7)
    for _ in range(3000):
        body = rng.randbytes(rng.randint(1, 64))
        with pytest.raises(BadMessage):
            messages.decode(body)


def test_mutated_good_bodies_decode_or_are_bad_messages():
    # Given a good body with one byte changed anywhere, to anything
    good = messages.encode(TaskMessage("chunk", "mod:Job", "job-1", 5))
    rng = random.Random(11)
    for _ in range(3000):
        body = bytearray(good)
        body[rng.randrange(len(body))] = rng.randrange(256)
        # Then it is either still a well-formed task or a BadMessage, nothing else
        try:
            decoded = messages.decode(bytes(body))
        except BadMessage:
            continue
        assert isinstance(decoded, TaskMessage)
        assert decoded.kind in ("plan", "chunk", "final")
        assert layout.check_job_id(decoded.job_id) == decoded.job_id


def test_reason_names_what_is_wrong():
    with pytest.raises(BadMessage, match="empty"):
        messages.decode(b"")
    with pytest.raises(BadMessage, match="not a chunkrunner message"):
        messages.decode(msgpack.packb({"other": 1}))
    with pytest.raises(BadMessage, match="version"):
        messages.decode(_body(**{MAGIC: 99}))
    with pytest.raises(BadMessage, match="index"):
        messages.decode(_body(i=-5))


# --------------------------------------------------------------------------- poison


def test_poisoned_keeps_original_reason_queue_and_time():
    original = messages.encode(TaskMessage("chunk", "m:C", "job", 3))
    body = messages.poisoned(original, "orders", "boom", "2030-01-01T00:00:00+00:00")
    record = messages.read_poisoned(body)
    assert record == {
        "reason": "boom",
        "queue": "orders",
        "at": "2030-01-01T00:00:00+00:00",
        "original": original,
        "truncated": False,
    }
    # The original is still decodable from the poison record (redrive relies on it)
    assert messages.decode(record["original"]) == TaskMessage("chunk", "m:C", "job", 3)


def test_poisoned_truncates_a_huge_original_and_says_so():
    original = bytes(range(256)) * 192  # 48 KiB, the largest a queue message can be
    record = messages.read_poisoned(messages.poisoned(original, "q-a", "too big", "now"))
    assert record is not None
    assert record["truncated"] is True
    assert original.startswith(record["original"])
    assert len(record["original"]) < len(original)


@pytest.mark.parametrize("reason_char", ["x", "é", "€", "😀"])
def test_poisoned_body_always_fits_in_a_queue_message(reason_char):
    # Given the largest original and a long reason (user error text may be non-ASCII)
    original = b"\xff" * service_targets.MAX_MESSAGE_BYTES
    body = messages.poisoned(original, "q" * 63, reason_char * 50_000, "2030-01-01T00:00:00Z")
    # Then the poison record can be sent: it is within the queue's limit
    assert len(body) <= service_targets.MAX_MESSAGE_BYTES
    record = messages.read_poisoned(body)
    assert record is not None and record["reason"].startswith(reason_char * 100)


def test_read_poisoned_of_anything_else_is_none():
    assert messages.read_poisoned(b"") is None
    assert messages.read_poisoned(b"\xc1") is None
    assert messages.read_poisoned(messages.encode(TaskMessage("chunk", "m:C", "j", 0))) is None
    assert messages.read_poisoned(msgpack.packb({MAGIC: VERSION, "poison": "text"})) is None
    assert messages.read_poisoned(msgpack.packb([1, 2])) is None


def test_the_task_named_by_a_job_or_a_poison_queue_body():
    # A job-queue body, its copy in a poison queue, and what names no task
    original = messages.encode(TaskMessage("chunk", "m:C", "job", 3, incarnation="abc"))
    poisoned = messages.poisoned(original, "q-x", "why", "2030-01-01T00:00:00+00:00")
    cut = messages.poisoned(original + b"x" * 41_000, "q-x", "why", "2030-01-01T00:00:00+00:00")

    assert messages.named_task(original) == messages.named_task(poisoned)
    assert messages.named_task(original) == TaskMessage("chunk", "m:C", "job", 3, incarnation="abc")
    assert messages.named_task(cut) is None  # its original cut short
    assert messages.named_task(b"hello") is None
    assert messages.named_task(msgpack.packb({MAGIC: VERSION, "poison": {"original": "x"}})) is None
