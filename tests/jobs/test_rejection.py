"""The body a rejected submission is moved with (jobs/rejection.py): the reason and the
original kept, as text or base64, cut to fit one queue message, and read back."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from checkpoint.service_targets import MAX_MESSAGE_BYTES
from jobs.intake import SCHEMA, Rejected
from jobs.rejection import (
    ORIGINAL_ROOM,
    REJECTED_SCHEMA,
    read_rejected,
    rejected_body,
    rejection,
)


def body(**fields: Any) -> bytes:
    return json.dumps({"schema": SCHEMA, "submission_id": "s-1", **fields}).encode()


def test_a_rejected_body_keeps_the_reason_and_the_original_text():
    # Given a submission refused for its params
    original = body(params={"rows": -1})
    found = rejection(
        original,
        Rejected("params", "rows must be >= 0"),
        queue="intake-orders-intake",
        at="2026-11-25T10:00:00.000000Z",
        message_id="m-1",
        inserted_on="2026-11-25T09:59:59.000000Z",
        dequeue_count=1,
    )
    # When it is written and read back
    written = rejected_body(found)
    document = json.loads(written)

    # Then it is JSON of the rejected schema, with the reason and the original as text
    assert document["schema"] == REJECTED_SCHEMA
    assert document["reason"] == "params: rows must be >= 0"
    assert (document["field"], document["problem"]) == ("params", "rows must be >= 0")
    assert document["original"] == original.decode()
    assert (document["original_base64"], document["truncated"]) == (None, False)
    assert document["submission_id"] == "s-1"
    assert read_rejected(written) == found


def test_a_body_that_is_not_text_is_kept_in_base64_and_a_long_one_cut():
    binary = rejection(b"\x00\xff" * 10, Rejected(None, "not JSON"), **_where(), dequeue_count=1)
    assert binary.original is None
    assert base64.b64decode(binary.original_base64 or "") == b"\x00\xff" * 10
    assert binary.submission_id is None

    # A long text cut inside a character keeps the whole characters before it
    long = b"x" + ("é" * ORIGINAL_ROOM).encode()
    cut = rejection(long, Rejected(None, "too long"), **_where(), dequeue_count=1)
    assert cut.truncated and cut.original is not None
    assert len(cut.original.encode()) == ORIGINAL_ROOM - 1
    assert cut.original == "x" + "é" * (ORIGINAL_ROOM // 2 - 1)
    # A reason is cut at a character's end too
    said = rejection(b"{}", Rejected("after", "ü" * 3000), **_where(), dequeue_count=1)
    assert len(said.reason.encode()) <= 4000 and said.reason.endswith("ü")


def test_a_rejected_body_fits_one_message_whatever_escaping_json_adds():
    # Given an original of control characters, six times longer once escaped for JSON
    found = rejection(b"\x01" * 45_000, Rejected(None, "not JSON"), **_where(), dequeue_count=1)

    # Then its body is cut to fit one queue message, and says it was cut
    written = rejected_body(found)
    assert len(written) <= MAX_MESSAGE_BYTES
    back = read_rejected(written)
    assert back is not None and back.truncated and back.original
    assert set(back.original) == {"\x01"}

    # as is one kept in base64
    binary = rejection(b"\xff" * 45_000, Rejected(None, "x"), **_where(), dequeue_count=1)
    long = rejected_body(binary.__class__(**{**vars(binary), "reason": "r" * 40_000}))
    assert len(long) <= MAX_MESSAGE_BYTES
    again = read_rejected(long)
    assert again is not None and again.truncated and again.original_base64


@pytest.mark.parametrize(
    "data",
    [b"\xff", b"[1]", b'{"schema": "other"}', json.dumps({"schema": REJECTED_SCHEMA}).encode()],
)
def test_what_holds_no_rejection_reads_as_none(data: bytes):
    assert read_rejected(data) is None


def _where() -> dict[str, Any]:
    return {
        "queue": "intake-orders-intake",
        "at": "2026-11-25T10:00:00.000000Z",
        "message_id": "m-1",
        "inserted_on": "2026-11-25T09:59:59.000000Z",
    }
