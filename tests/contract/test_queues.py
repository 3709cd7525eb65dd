"""QueueStore contract: Azure Queue storage semantics on every backend."""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from checkpoint.errors import InvalidRequest, LeaseLost, NotFound, TooLarge
from checkpoint.service_targets import (
    DEFAULT_TTL_SECONDS,
    MAX_MESSAGE_BYTES,
    MAX_VISIBILITY_SECONDS,
)
from checkpoint.storage import NEVER_EXPIRES
from tests.contract import close_to, fails_with, only


def _missing_queue() -> str:
    return f"q-missing-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- queues


def test_create_queue_is_idempotent_and_keeps_messages(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"kept")

    queues.create_queue(name)

    assert only(queues.peek(name)).body == b"kept"


def test_delete_queue_removes_it_and_is_idempotent(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"gone with the queue")

    queues.delete_queue(name)
    queues.delete_queue(name)

    assert name not in queues.list_queues(name)
    with fails_with(NotFound, status=404, code="QueueNotFound"):
        queues.peek(name)


def test_delete_missing_queue_is_not_an_error(backend):
    backend.storage.queues.delete_queue(_missing_queue())


def test_list_queues_by_prefix_sorted(backend):
    queues = backend.storage.queues
    prefix = f"lq{uuid.uuid4().hex[:10]}"
    names = [f"{prefix}-b", f"{prefix}-a", f"{prefix}x", f"{prefix}-a1"]
    for name in names:
        queues.create_queue(name)
        backend.made.append(("queue", name))

    assert queues.list_queues(f"{prefix}-") == [f"{prefix}-a", f"{prefix}-a1", f"{prefix}-b"]
    assert queues.list_queues(prefix) == sorted(names)
    everything = queues.list_queues()
    assert everything == sorted(everything)
    assert set(names) <= set(everything)
    assert queues.list_queues(f"{prefix}-zzz") == []


@pytest.mark.parametrize(
    "name",
    [
        "ab",
        "a" * 64,
        "Upper",
        "with_underscore",
        "-leading",
        "trailing-",
        "double--hyphen",
        "",
        "dot.name",
    ],
)
def test_invalid_queue_name_is_refused(backend, name):
    with fails_with(InvalidRequest, status=400, code="InvalidResourceName"):
        backend.storage.queues.create_queue(name)


@pytest.mark.parametrize("operation", ["send", "receive", "peek", "approximate_length"])
def test_invalid_queue_name_is_refused_by_every_operation(backend, operation):
    queues = backend.storage.queues
    call = {
        "send": lambda: queues.send("Bad_Name", b"x"),
        "receive": lambda: queues.receive("Bad_Name"),
        "peek": lambda: queues.peek("Bad_Name"),
        "approximate_length": lambda: queues.approximate_length("Bad_Name"),
    }[operation]
    with fails_with(InvalidRequest, status=400, code="InvalidResourceName"):
        call()


def test_longest_valid_queue_name_works(backend):
    queues = backend.storage.queues
    name = f"q{uuid.uuid4().hex}".ljust(63, "7")
    queues.create_queue(name)
    backend.made.append(("queue", name))
    queues.send(name, b"x")
    assert queues.approximate_length(name) == 1


@pytest.mark.parametrize(
    "operation", ["send", "receive", "peek", "approximate_length", "update", "delete"]
)
def test_operations_on_missing_queue_raise_not_found(backend, operation):
    queues = backend.storage.queues
    name = _missing_queue()
    message_id, receipt = str(uuid.uuid4()), "AgAAAAMAAAAAAAAA"
    call = {
        "send": lambda: queues.send(name, b"x"),
        "receive": lambda: queues.receive(name),
        "peek": lambda: queues.peek(name),
        "approximate_length": lambda: queues.approximate_length(name),
        "update": lambda: queues.update(name, message_id, receipt, visibility_seconds=0),
        "delete": lambda: queues.delete(name, message_id, receipt),
    }[operation]
    with fails_with(NotFound, status=404, code="QueueNotFound"):
        call()


# --------------------------------------------------------------------------- send / receive


BODIES = {
    "empty": b"",
    "text": b"hello",
    "every-byte": bytes(range(256)),
    "nul-bytes": b"\x00" * 17,
    "not-utf8": b"\xff\xfe\xfd<>&'\"",
    "exactly-48KiB": random.Random(48).randbytes(MAX_MESSAGE_BYTES),
}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_send_receive_roundtrip_of_arbitrary_bytes(backend, body):
    queues = backend.storage.queues
    name = backend.queue()

    sent = queues.send(name, body)
    peeked = only(queues.peek(name))
    received = only(queues.receive(name))

    assert sent.body == body
    assert peeked.body == body and isinstance(peeked.body, bytes)
    assert received.body == body and isinstance(received.body, bytes)
    assert peeked.id == received.id == sent.id


def test_body_over_48_kib_is_too_large(backend):
    queues = backend.storage.queues
    name = backend.queue()

    with fails_with(TooLarge, status=413, code="RequestBodyTooLarge"):
        queues.send(name, b"x" * (MAX_MESSAGE_BYTES + 1))

    assert queues.approximate_length(name) == 0


def test_message_metadata_of_send_and_receive(backend):
    queues = backend.storage.queues
    name = backend.queue()

    # Given a message sent with the default TTL
    sent = queues.send(name, b"meta")
    # When it is received for 30 s
    received = only(queues.receive(name, visibility_seconds=30))

    # Then the send reports an unreceived, visible message expiring in 7 days
    assert isinstance(sent.id, str) and sent.id
    assert sent.dequeue_count == 0
    assert sent.inserted_on.tzinfo is not None
    assert sent.expires_on is not None and sent.expires_on.tzinfo is not None
    assert close_to(sent.expires_on - sent.inserted_on, DEFAULT_TTL_SECONDS)
    assert close_to(sent.next_visible_on - sent.inserted_on, 0)
    # And the receive hands it out once, with a receipt, hidden for 30 s
    assert received.id == sent.id
    assert received.dequeue_count == 1
    assert isinstance(received.pop_receipt, str) and received.pop_receipt
    assert received.inserted_on == sent.inserted_on
    assert received.expires_on == sent.expires_on
    assert received.inserted_on <= received.next_visible_on
    assert received.next_visible_on.tzinfo is not None
    assert close_to(received.next_visible_on - received.inserted_on, 30)


def test_never_expiring_message_has_no_expiry(backend):
    queues = backend.storage.queues
    name = backend.queue()

    sent = queues.send(name, b"forever", ttl_seconds=NEVER_EXPIRES)
    backend.advance(1)
    peeked = only(queues.peek(name))
    received = only(queues.receive(name))

    assert sent.expires_on is None
    assert peeked.expires_on is None
    assert received.expires_on is None
    assert received.body == b"forever"


def test_ttl_sets_expires_on(backend):
    queues = backend.storage.queues
    name = backend.queue()

    sent = queues.send(name, b"x", ttl_seconds=3600)

    assert sent.expires_on is not None
    assert close_to(sent.expires_on - sent.inserted_on, 3600)


def test_message_expires_after_its_ttl(backend):
    queues = backend.storage.queues
    name = backend.queue()
    # Given a message living 2 s, received (hidden 1 s) before it expires
    queues.send(name, b"short-lived", ttl_seconds=2)
    held = only(queues.receive(name, visibility_seconds=1))

    # When its TTL passes
    backend.advance(2)

    # Then nobody sees it any more, and its receipt no longer works
    assert queues.receive(name) == []
    assert queues.peek(name) == []
    with fails_with(LeaseLost, status=404, code="MessageNotFound"):
        queues.update(name, held.id, held.pop_receipt, visibility_seconds=0)
    with fails_with(LeaseLost, status=404, code="MessageNotFound"):
        queues.delete(name, held.id, held.pop_receipt)


def test_delayed_message_is_hidden_until_the_delay_passes(backend):
    queues = backend.storage.queues
    name = backend.queue()

    # Given a message sent with a 1 s delay
    sent = queues.send(name, b"later", delay_seconds=1)

    # Then it is counted but neither received nor peeked yet
    assert close_to(sent.next_visible_on - sent.inserted_on, 1)
    assert queues.receive(name) == []
    assert queues.peek(name) == []
    assert queues.approximate_length(name) == 1
    # When the delay passes, it is handed out
    backend.advance(1)
    assert only(queues.receive(name)).body == b"later"


def test_receive_takes_at_most_max_messages_and_never_twice(backend):
    queues = backend.storage.queues
    name = backend.queue()
    sent = {queues.send(name, f"m{i}".encode()).id for i in range(33)}

    first = queues.receive(name, max_messages=32)
    second = queues.receive(name, max_messages=32)
    third = queues.receive(name, max_messages=32)

    assert len(first) == 32
    assert len(second) == 1
    assert third == []
    ids = [m.id for m in first + second]
    assert len(set(ids)) == 33 and set(ids) == sent
    assert all(m.dequeue_count == 1 and m.pop_receipt for m in first + second)


def test_receive_default_takes_one(backend):
    queues = backend.storage.queues
    name = backend.queue()
    for i in range(3):
        queues.send(name, bytes([i]))

    assert len(queues.receive(name)) == 1
    assert len(queues.peek(name, max_messages=32)) == 2


def test_receive_from_empty_queue_returns_nothing(backend):
    name = backend.queue()
    assert backend.storage.queues.receive(name, max_messages=32) == []


def test_concurrent_receivers_never_share_a_message(backend):
    queues = backend.storage.queues
    name = backend.queue()
    sent = {queues.send(name, f"c{i}".encode()).id for i in range(20)}
    taken: list[list[str]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def drain(mine: list[str]) -> None:
        try:
            while batch := queues.receive(name, max_messages=3, visibility_seconds=60):
                mine.extend(m.id for m in batch)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    # When four threads receive from one queue at once
    threads = [threading.Thread(target=drain, args=(mine,)) for mine in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    # Then every message was handed out exactly once
    assert errors == []
    everything = [message_id for mine in taken for message_id in mine]
    assert sorted(everything) == sorted(sent)


@pytest.mark.parametrize("count", [0, 33, -1])
def test_receive_count_out_of_range_is_invalid(backend, count):
    name = backend.queue()
    with fails_with(InvalidRequest, status=400, code="OutOfRangeQueryParameterValue"):
        backend.storage.queues.receive(name, max_messages=count)


@pytest.mark.parametrize("visibility", [0, -1, MAX_VISIBILITY_SECONDS + 1])
def test_receive_visibility_out_of_range_is_invalid(backend, visibility):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")

    with fails_with(InvalidRequest, status=400, code="OutOfRangeQueryParameterValue"):
        queues.receive(name, visibility_seconds=visibility)

    assert only(queues.peek(name)).dequeue_count == 0


@pytest.mark.parametrize("delay", [-1, MAX_VISIBILITY_SECONDS + 1])
def test_send_delay_out_of_range_is_invalid(backend, delay):
    queues = backend.storage.queues
    name = backend.queue()
    with fails_with(InvalidRequest, status=400):
        queues.send(name, b"x", delay_seconds=delay, ttl_seconds=NEVER_EXPIRES)
    assert queues.approximate_length(name) == 0


@pytest.mark.parametrize(
    ("ttl", "delay"),
    [(0, 0), (-2, 0), (5, 5), (5, 10)],
    ids=["zero", "minus-2", "eq-delay", "lt-delay"],
)
def test_ttl_out_of_range_is_invalid(backend, ttl, delay):
    queues = backend.storage.queues
    name = backend.queue()
    with fails_with(InvalidRequest, status=400):
        queues.send(name, b"x", delay_seconds=delay, ttl_seconds=ttl)
    assert queues.approximate_length(name) == 0


# --------------------------------------------------------------------------- peek, length


def test_peek_neither_grants_a_receipt_nor_counts_a_dequeue(backend):
    queues = backend.storage.queues
    name = backend.queue()
    sent = queues.send(name, b"look")

    first = only(queues.peek(name))
    second = only(queues.peek(name))
    received = only(queues.receive(name, visibility_seconds=1))
    backend.advance(1)
    after_receive = only(queues.peek(name))

    assert first.id == second.id == sent.id
    assert first.pop_receipt is None and second.pop_receipt is None
    assert first.dequeue_count == second.dequeue_count == 0
    assert first.expires_on == sent.expires_on
    assert received.dequeue_count == 1
    assert after_receive.dequeue_count == 1 and after_receive.pop_receipt is None


def test_peek_returns_up_to_max_visible_messages(backend):
    queues = backend.storage.queues
    name = backend.queue()
    ids = {queues.send(name, bytes([i])).id for i in range(34)}
    hidden = only(queues.receive(name, visibility_seconds=30))

    peeked = queues.peek(name, max_messages=32)
    assert len(peeked) == 32
    assert len({m.id for m in peeked}) == 32
    assert {m.id for m in peeked} <= ids - {hidden.id}
    assert all(m.pop_receipt is None for m in peeked)
    assert len(queues.peek(name)) == 1
    assert queues.approximate_length(name) == 34


@pytest.mark.parametrize("count", [0, 33])
def test_peek_count_out_of_range_is_invalid(backend, count):
    name = backend.queue()
    with fails_with(InvalidRequest, status=400, code="OutOfRangeQueryParameterValue"):
        backend.storage.queues.peek(name, max_messages=count)


def test_approximate_length_counts_visible_hidden_and_delayed(backend):
    queues = backend.storage.queues
    name = backend.queue()
    assert queues.approximate_length(name) == 0

    queues.send(name, b"visible")
    queues.send(name, b"delayed", delay_seconds=600)
    queues.send(name, b"to be received")
    held = only(queues.receive(name, visibility_seconds=30))
    assert queues.approximate_length(name) == 3

    queues.delete(name, held.id, held.pop_receipt)
    assert queues.approximate_length(name) == 2
