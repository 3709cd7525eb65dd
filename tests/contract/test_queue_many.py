"""QueueStore contract for the calls on many messages: ``send_many`` and ``delete_many``.

The embedded store makes each one transaction; Azure has no batch call for queues, so
its backend sends the single calls concurrently. Either way the results are per message.
"""

from __future__ import annotations

import uuid

import pytest

from checkpoint.errors import InvalidRequest, LeaseLost, NotFound, TooLarge
from checkpoint.service_targets import MAX_MESSAGE_BYTES
from checkpoint.storage import NEVER_EXPIRES
from tests.contract import fails_with


def _missing_queue() -> str:
    return f"q-missing-{uuid.uuid4().hex[:12]}"


def _receive_all(queues, name: str) -> list:
    got = []
    while batch := queues.receive(name, max_messages=32, visibility_seconds=60):
        got.extend(batch)
    return got


def test_send_many_sends_every_body_visible_at_once(backend):
    queues = backend.storage.queues
    name = backend.queue()
    bodies = [f"m{i}".encode() for i in range(40)]

    assert queues.send_many(name, bodies, ttl_seconds=NEVER_EXPIRES) == [None] * 40

    got = _receive_all(queues, name)
    assert sorted(m.body for m in got) == sorted(bodies)
    assert all(m.expires_on is None and m.dequeue_count == 1 for m in got)


def test_send_many_of_nothing_sends_nothing(backend):
    queues = backend.storage.queues
    name = backend.queue()
    assert queues.send_many(name, []) == []
    assert queues.peek(name) == []


def test_send_many_with_one_bad_body_sends_none(backend):
    queues = backend.storage.queues
    name = backend.queue()
    with fails_with(TooLarge, status=413, code="RequestBodyTooLarge"):
        queues.send_many(name, [b"fine", b"x" * (MAX_MESSAGE_BYTES + 1)])
    with pytest.raises(InvalidRequest):
        queues.send_many(name, [b"fine", "text"])  # type: ignore[list-item]
    assert queues.peek(name) == []


def test_send_many_to_a_missing_queue_is_not_found(backend):
    with fails_with(NotFound, status=404, code="QueueNotFound"):
        backend.storage.queues.send_many(_missing_queue(), [b"a", b"b"])


def test_delete_many_deletes_each_and_reports_each_stale_receipt(backend):
    # Given four received messages, one of them received again since (stale receipt)
    # and one deleted already
    queues = backend.storage.queues
    name = backend.queue()
    queues.send_many(name, [b"a", b"b", b"c", b"d"])
    got = sorted(queues.receive(name, max_messages=4, visibility_seconds=1), key=lambda m: m.body)
    assert [m.body for m in got] == [b"a", b"b", b"c", b"d"]
    stale = got[1]
    queues.update(name, stale.id, stale.pop_receipt, visibility_seconds=0)
    gone = got[3]
    queues.delete(name, gone.id, gone.pop_receipt)

    # When all four are deleted in one call
    errors = queues.delete_many(name, [(m.id, m.pop_receipt) for m in got])

    # Then the two still held are gone, and each of the others has its own error
    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], LeaseLost) and errors[1].status == 400
    assert isinstance(errors[3], LeaseLost) and errors[3].status == 404
    assert [m.body for m in queues.peek(name, max_messages=32)] == [b"b"]


def test_delete_many_of_nothing_is_nothing(backend):
    assert backend.storage.queues.delete_many(backend.queue(), []) == []


def test_delete_many_on_a_missing_queue_raises(backend):
    with pytest.raises(NotFound):
        backend.storage.queues.delete_many(_missing_queue(), [("id", "receipt")])
