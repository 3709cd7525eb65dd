"""Azure backend: what a queue message's content and the SDK's answers read back as
(pure, no network; the round trips through Azurite are in the contract suite)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import pytest

from checkpoint.backends.azure.queues import _body, _required
from checkpoint.backends.azure.times import as_utc
from checkpoint.errors import Unavailable


@pytest.mark.parametrize(
    ("content", "body"),
    [
        (base64.b64encode(b"\x00\xffchunk").decode(), b"\x00\xffchunk"),  # ours: base64
        (b"raw bytes", b"raw bytes"),  # an SDK policy that decoded it already
        ("plain text, not base64", b"plain text, not base64"),  # a foreign producer's
        ("héllo", "héllo".encode()),
        (None, b""),
        ("", b""),
    ],
)
def test_a_message_reads_back_as_bytes_whoever_sent_it(content, body):
    assert _body(content) == body


def test_an_answer_missing_a_field_the_service_always_sends_is_unavailable():
    with pytest.raises(Unavailable, match="answered without a pop receipt") as caught:
        _required(None, "a pop receipt")

    assert caught.value.code == "MalformedResponse"
    assert _required("r-1", "a pop receipt") == "r-1"


def test_sdk_times_are_plain_utc_datetimes():
    naive = datetime(2030, 1, 2, 3, 4, 5)  # taken to be UTC already
    other_zone = datetime(2030, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))

    assert as_utc(naive) == as_utc(other_zone) == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert type(as_utc(naive)) is datetime and as_utc(naive).tzinfo is UTC
