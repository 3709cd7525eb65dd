"""QueueStore contract: leases on messages (visibility, pop receipts, update, delete)."""

from __future__ import annotations

import uuid

import pytest

from checkpoint.errors import InvalidRequest, LeaseLost, TooLarge
from checkpoint.service_targets import MAX_MESSAGE_BYTES, MAX_VISIBILITY_SECONDS
from checkpoint.storage import NEVER_EXPIRES
from tests.contract import close_to, fails_with, only

# --------------------------------------------------------------------------- visibility


def test_received_message_reappears_after_visibility_with_new_receipt(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"lease")

    # Given a message received for 1 s
    first = only(queues.receive(name, visibility_seconds=1))
    # Then it is hidden from receive and peek, but still counted
    assert queues.receive(name) == []
    assert queues.peek(name) == []
    assert queues.approximate_length(name) == 1

    # When the visibility passes, it is handed out again
    backend.advance(1)
    second = only(queues.receive(name, visibility_seconds=30))

    # Then with a fresh receipt and the dequeue count bumped
    assert second.id == first.id
    assert second.body == b"lease"
    assert second.dequeue_count == 2
    assert second.pop_receipt and second.pop_receipt != first.pop_receipt
    assert second.next_visible_on > first.next_visible_on


def test_dequeue_count_increments_on_every_receive(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"again")

    counts = []
    for _ in range(3):
        message = only(queues.receive(name, visibility_seconds=30))
        counts.append(message.dequeue_count)
        queues.update(name, message.id, message.pop_receipt, visibility_seconds=0)

    assert counts == [1, 2, 3]


# --------------------------------------------------------------------------- update


def test_update_returns_new_receipt_and_old_one_stops_working(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"renew me")
    held = only(queues.receive(name, visibility_seconds=30))

    # When the lease is renewed for 60 s
    renewed = queues.update(name, held.id, held.pop_receipt, visibility_seconds=60)

    # Then a new receipt and a later visibility come back
    assert renewed.pop_receipt and renewed.pop_receipt != held.pop_receipt
    assert close_to(renewed.next_visible_on - held.next_visible_on, 30)
    assert renewed.next_visible_on.tzinfo is not None
    # And the old receipt is refused by update and delete
    with fails_with(LeaseLost, status=400, code="PopReceiptMismatch"):
        queues.update(name, held.id, held.pop_receipt, visibility_seconds=60)
    with fails_with(LeaseLost, status=400, code="PopReceiptMismatch"):
        queues.delete(name, held.id, held.pop_receipt)
    # And the message stays hidden; the new receipt still works
    assert queues.receive(name) == []
    queues.delete(name, held.id, renewed.pop_receipt)
    assert queues.approximate_length(name) == 0


def test_a_sent_messages_receipt_brings_it_back_before_its_delay_until_it_is_received(backend):
    # What a resume relies on (checkpoint.parks): a send's receipt reaches the message
    queues = backend.storage.queues
    name = backend.queue()
    sent = queues.send(name, b"parked", delay_seconds=600)
    assert sent.pop_receipt and queues.receive(name) == []

    # When it is made visible with the receipt the send returned
    back = queues.update(name, sent.id, sent.pop_receipt, visibility_seconds=0)

    # Then it is received at once, its first delivery
    received = only(queues.receive(name))
    assert received.id == sent.id and received.dequeue_count == 1
    # And the send's receipt, and the update's, stopped working with the receive
    for stale in (sent.pop_receipt, back.pop_receipt):
        with fails_with(LeaseLost, status=400, code="PopReceiptMismatch"):
            queues.update(name, sent.id, stale, visibility_seconds=0)


def test_update_chain_always_uses_the_newest_receipt(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")
    held = only(queues.receive(name, visibility_seconds=30))

    receipts = [held.pop_receipt]
    for _ in range(3):
        receipts.append(
            queues.update(name, held.id, receipts[-1], visibility_seconds=30).pop_receipt
        )

    assert len(set(receipts)) == 4
    for stale in receipts[:-1]:
        with fails_with(LeaseLost, status=400, code="PopReceiptMismatch"):
            queues.update(name, held.id, stale, visibility_seconds=30)
    queues.delete(name, held.id, receipts[-1])


def test_update_with_zero_visibility_makes_it_visible_at_once(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"release")
    held = only(queues.receive(name, visibility_seconds=30))

    released = queues.update(name, held.id, held.pop_receipt, visibility_seconds=0)

    peeked = only(queues.peek(name))
    assert peeked.id == held.id and peeked.dequeue_count == 1
    assert close_to(released.next_visible_on - held.inserted_on, 0)
    again = only(queues.receive(name))
    assert again.id == held.id and again.dequeue_count == 2
    assert again.pop_receipt != released.pop_receipt


def test_update_hides_for_the_new_visibility(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")
    held = only(queues.receive(name, visibility_seconds=30))

    queues.update(name, held.id, held.pop_receipt, visibility_seconds=1)
    assert queues.receive(name) == []
    backend.advance(1)

    assert only(queues.receive(name)).id == held.id


def test_update_with_body_replaces_content(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"old content")
    held = only(queues.receive(name, visibility_seconds=30))

    queues.update(name, held.id, held.pop_receipt, visibility_seconds=0, body=b"\x00new\xff")

    assert only(queues.peek(name)).body == b"\x00new\xff"
    received = only(queues.receive(name))
    assert received.body == b"\x00new\xff"
    assert received.id == held.id


def test_update_without_body_keeps_content(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"unchanged")
    held = only(queues.receive(name, visibility_seconds=30))

    queues.update(name, held.id, held.pop_receipt, visibility_seconds=0)

    assert only(queues.receive(name)).body == b"unchanged"


def test_update_with_too_large_body_is_refused(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"small")
    held = only(queues.receive(name, visibility_seconds=30))

    with fails_with(TooLarge, status=413, code="RequestBodyTooLarge"):
        queues.update(
            name,
            held.id,
            held.pop_receipt,
            visibility_seconds=0,
            body=b"x" * (MAX_MESSAGE_BYTES + 1),
        )

    # The refused update changed nothing: the receipt still works, the body is intact
    queues.update(name, held.id, held.pop_receipt, visibility_seconds=0)
    assert only(queues.peek(name)).body == b"small"


@pytest.mark.parametrize("visibility", [-1, MAX_VISIBILITY_SECONDS + 1])
def test_update_visibility_out_of_range_is_invalid(backend, visibility):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x", ttl_seconds=NEVER_EXPIRES)
    held = only(queues.receive(name, visibility_seconds=30))

    with fails_with(InvalidRequest, status=400, code="OutOfRangeQueryParameterValue"):
        queues.update(name, held.id, held.pop_receipt, visibility_seconds=visibility)

    queues.delete(name, held.id, held.pop_receipt)


def test_update_of_deleted_message_is_lease_lost(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")
    held = only(queues.receive(name, visibility_seconds=30))
    queues.delete(name, held.id, held.pop_receipt)

    with fails_with(LeaseLost, status=404, code="MessageNotFound"):
        queues.update(name, held.id, held.pop_receipt, visibility_seconds=30)


def test_update_after_someone_else_received_it_is_lease_lost(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")
    mine = only(queues.receive(name, visibility_seconds=1))
    backend.advance(1)
    theirs = only(queues.receive(name, visibility_seconds=30))

    with fails_with(LeaseLost, status=400, code="PopReceiptMismatch"):
        queues.update(name, mine.id, mine.pop_receipt, visibility_seconds=30)

    queues.update(name, theirs.id, theirs.pop_receipt, visibility_seconds=30)


# --------------------------------------------------------------------------- delete


def test_delete_removes_the_message(backend):
    queues = backend.storage.queues
    name = backend.queue()
    done = queues.send(name, b"done")
    held = only(queues.receive(name, visibility_seconds=1))
    queues.send(name, b"other")
    assert held.id == done.id

    queues.delete(name, held.id, held.pop_receipt)
    backend.advance(1)

    remaining = queues.receive(name, max_messages=32)
    assert [m.body for m in remaining] == [b"other"]
    assert queues.approximate_length(name) == 1


def test_delete_twice_is_lease_lost_message_not_found(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")
    held = only(queues.receive(name))
    queues.delete(name, held.id, held.pop_receipt)

    with fails_with(LeaseLost, status=404, code="MessageNotFound"):
        queues.delete(name, held.id, held.pop_receipt)


def test_delete_of_unknown_message_is_lease_lost(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")
    held = only(queues.receive(name))

    with fails_with(LeaseLost, status=404, code="MessageNotFound"):
        queues.delete(name, str(uuid.uuid4()), held.pop_receipt)

    assert queues.approximate_length(name) == 1


def test_delete_after_someone_else_received_it_is_lease_lost(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")

    # Given my lease ran out and another worker received the message
    mine = only(queues.receive(name, visibility_seconds=1))
    backend.advance(1)
    theirs = only(queues.receive(name, visibility_seconds=30))

    # Then my delete is refused and the message stays theirs
    with fails_with(LeaseLost, status=400, code="PopReceiptMismatch"):
        queues.delete(name, mine.id, mine.pop_receipt)
    assert queues.approximate_length(name) == 1
    queues.delete(name, theirs.id, theirs.pop_receipt)
    assert queues.approximate_length(name) == 0


def test_delete_with_expired_lease_before_anyone_received_it_succeeds(backend):
    queues = backend.storage.queues
    name = backend.queue()
    queues.send(name, b"x")

    # Given my lease ran out but nobody received the message since (Azure keeps the
    # receipt valid until the next receive or update)
    mine = only(queues.receive(name, visibility_seconds=1))
    backend.advance(1)
    assert only(queues.peek(name)).id == mine.id

    # When I delete with my old receipt, it works
    queues.delete(name, mine.id, mine.pop_receipt)

    assert queues.peek(name) == []
    assert queues.receive(name) == []
    assert queues.approximate_length(name) == 0


@pytest.mark.parametrize("operation", ["delete", "update", "delete_many", "no_message_id"])
def test_an_empty_pop_receipt_or_message_id_is_refused_as_azure_does(backend, operation):
    queues = backend.storage.queues
    queue = backend.queue()
    message = queues.send(queue, b"x")
    call = {
        "delete": lambda: queues.delete(queue, message.id, ""),
        "update": lambda: queues.update(queue, message.id, "", visibility_seconds=1),
        "delete_many": lambda: queues.delete_many(queue, [(message.id, "")]),
        "no_message_id": lambda: queues.delete(queue, "", "receipt"),
    }[operation]

    with fails_with(InvalidRequest, status=400, code="MissingRequiredQueryParameter"):
        call()
    assert queues.approximate_length(queue) == 1


def test_a_batch_delete_with_one_empty_receipt_deletes_none_of_it(backend):
    queues = backend.storage.queues
    queue = backend.queue()
    queues.send(queue, b"x")
    held = only(queues.receive(queue, visibility_seconds=30))

    with fails_with(InvalidRequest, status=400, code="MissingRequiredQueryParameter"):
        queues.delete_many(queue, [(held.id, held.pop_receipt), (held.id, "")])
    assert queues.approximate_length(queue) == 1
