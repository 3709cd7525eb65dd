"""Azure backend: what a queue message's content and the SDK's answers read back as
(pure, no network; the round trips through Azurite are in the contract suite)."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from checkpoint.backends import open_storage
from checkpoint.backends.azure.queues import _body, _required
from checkpoint.backends.azure.times import as_utc
from checkpoint.errors import Throttled, Unavailable


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


def test_send_many_answers_each_refused_body_and_sends_the_rest(azurite, monkeypatch):
    # Given a queue whose service refuses the send of one body (busy)
    storage = open_storage(azurite.connection_string, azure_retry_total=0)
    queues = storage.queues
    name = f"many-{uuid.uuid4().hex[:12]}"
    queues.create_queue(name)
    real_send = queues.send

    def send(queue: str, body: bytes, **options: Any) -> Any:
        if body == b"refused":
            raise Throttled("server busy")
        return real_send(queue, body, **options)

    monkeypatch.setattr(queues, "send", send)
    try:
        # When three bodies are sent at once
        answers = queues.send_many(name, [b"a", b"refused", b"b"])

        # Then the refused one's trouble comes back in its place; the others were sent
        assert [type(answer) for answer in answers] == [type(None), Throttled, type(None)]
        sent = queues.receive(name, max_messages=32)
        assert sorted(m.body for m in sent) == [b"a", b"b"]
    finally:
        queues.delete_queue(name)
        storage.close()
