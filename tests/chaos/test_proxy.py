"""The fault proxy in front of the session's Azurite: faithful forwarding, and each
fault doing exactly what it says (judged by reading Azurite directly, not through it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from checkpoint.backends import open_storage
from checkpoint.errors import NotFound, Throttled, Unavailable
from checkpoint.storage import BatchOp, Storage
from tests import azurite as azurite_process
from tests.chaos.proxy import FaultChances, FaultProxy

Proxied = Callable[..., tuple[Storage, list[FaultProxy]]]


@pytest.fixture
def direct(azurite: azurite_process.Azurite) -> Iterator[Storage]:
    storage = open_storage(azurite.connection_string, azure_retry_total=0)
    yield storage
    storage.close()


@pytest.fixture
def proxied(azurite: azurite_process.Azurite) -> Iterator[Proxied]:
    """Storage through three proxies (blob, queue, table), all with the same chances."""
    opened: list[tuple[Storage, list[FaultProxy]]] = []

    def make(retry_total: int = 0, **chances: float) -> tuple[Storage, list[FaultProxy]]:
        ports = (azurite.blob_port, azurite.queue_port, azurite.table_port)
        proxies = [
            FaultProxy(port, FaultChances(**chances), seed=n).start()
            for n, port in enumerate(ports)
        ]
        location = azurite_process.connection_string(*(proxy.port for proxy in proxies))
        storage = open_storage(location, azure_retry_total=retry_total)
        opened.append((storage, proxies))
        return storage, proxies

    yield make
    for storage, proxies in opened:
        storage.close()
        for proxy in proxies:
            proxy.stop()


def _names(direct: Storage) -> tuple[str, str]:
    table, queue = f"t{uuid.uuid4().hex[:12]}", f"q-{uuid.uuid4().hex[:12]}"
    direct.records.create_table(table)
    direct.queues.create_queue(queue)
    return table, queue


def test_forwards_table_queue_batch_and_blob_requests_intact(direct, proxied):
    # Given a proxy that injects nothing
    table, queue = _names(direct)
    storage, proxies = proxied()
    body = bytes(range(256)) * 8
    blob = bytes(range(256)) * 4096  # 1 MiB

    # When every kind of request goes through it, a $batch and a 1 MiB blob included
    storage.records.insert(table, "p", "r", {"text": "héllo", "number": 7, "raw": body})
    storage.records.batch(table, "b", [BatchOp("insert", f"r{n}", {"n": n}) for n in range(50)])
    storage.queues.send(queue, body)
    storage.blobs.create_container(f"c-{table}")
    storage.blobs.put(f"c-{table}", "x/blob", blob)

    # Then Azurite, read directly, holds exactly what was sent, and reads through agree
    assert direct.records.get(table, "p", "r").properties == {
        "text": "héllo",
        "number": 7,
        "raw": body,
    }
    assert len(list(direct.records.query(table, "b"))) == 50
    assert [m.body for m in direct.queues.peek(queue)] == [body]
    assert direct.blobs.get(f"c-{table}", "x/blob") == blob
    assert storage.blobs.get(f"c-{table}", "x/blob", offset=256, length=256) == bytes(range(256))
    assert storage.records.get(table, "p", "r").properties["raw"] == body
    # One request per call, none repeated: table insert, batch, get; queue send; blob
    # create container, put, get (each proxy's counts are shown if this fails)
    by_service = [p.counts.snapshot()["requests"] for p in proxies]  # blob, queue, table
    assert by_service == [{"PUT": 2, "GET": 1}, {"POST": 1}, {"POST": 2, "GET": 1}], [
        p.counts.snapshot() for p in proxies
    ]
    assert not any(p.counts.faults for p in proxies)
    direct.blobs.delete_container(f"c-{table}")


def test_busy_answers_503_without_forwarding(direct, proxied):
    # Given a proxy that answers every request 503 ServerBusy
    table, queue = _names(direct)
    storage, proxies = proxied(busy=1.0)

    # When an insert and a send go through it (no retries)
    with pytest.raises(Throttled) as refused:
        storage.records.insert(table, "p", "r", {"a": 1})
    with pytest.raises(Throttled):
        storage.queues.send(queue, b"never")

    # Then the client saw ServerBusy, and Azurite applied neither
    assert refused.value.code == "ServerBusy"
    with pytest.raises(NotFound):
        direct.records.get(table, "p", "r")
    assert direct.queues.peek(queue) == []
    assert sum(p.counts.faults["busy"] for p in proxies) == 2


def test_ambiguous_applies_the_request_and_drops_the_answer(direct, proxied):
    # Given a proxy that forwards every request, then drops the connection unanswered
    table, queue = _names(direct)
    storage, proxies = proxied(ambiguous=1.0)

    # When an insert and a send (POSTs: the SDK does not retry them) go through it
    with pytest.raises(Unavailable):
        storage.records.insert(table, "p", "r", {"a": 1})
    with pytest.raises(Unavailable):
        storage.queues.send(queue, b"applied")

    # Then the client saw a connection error, yet Azurite applied both
    assert direct.records.get(table, "p", "r").properties == {"a": 1}
    assert [m.body for m in direct.queues.peek(queue)] == [b"applied"]
    assert sum(p.counts.faults_by_method["ambiguous POST"] for p in proxies) == 2


def test_delayed_requests_arrive_late_and_applied(direct, proxied):
    table, _ = _names(direct)
    storage, proxies = proxied(delayed=1.0)
    proxies[2].chances.delay_seconds = (0.3, 0.3)

    began = time.monotonic()
    storage.records.insert(table, "p", "r", {"a": 1})

    assert time.monotonic() - began >= 0.3
    assert direct.records.get(table, "p", "r").properties == {"a": 1}
    assert proxies[2].counts.faults == {"delayed": 1}


def test_serve_for_stops_by_itself(azurite):
    proxy = FaultProxy(azurite.queue_port, FaultChances())
    began = time.monotonic()
    proxy.serve_for(0.3)
    assert 0.3 <= time.monotonic() - began < 5


def test_an_outage_refuses_everything_unapplied_and_ends_by_itself(direct, proxied):
    # Given proxies that go down, refusing, for a second
    table, queue = _names(direct)
    storage, proxies = proxied()
    storage.queues.send(queue, b"before")  # a connection kept alive from before
    for proxy in proxies:
        proxy.outage(1.0, "refused")

    # When requests are made meanwhile, on kept-alive and new connections
    with pytest.raises(Unavailable):
        storage.queues.send(queue, b"during")
    with pytest.raises(Unavailable):
        storage.records.insert(table, "p", "r", {"a": 1})

    # Then none was applied, and once the second is over requests go through again
    assert [m.body for m in direct.queues.peek(queue)] == [b"before"]
    with pytest.raises(NotFound):
        direct.records.get(table, "p", "r")
    assert _wait_up(proxies)
    storage.records.insert(table, "p", "r", {"a": 2})
    assert direct.records.get(table, "p", "r").properties == {"a": 2}
    assert sum(p.counts.faults["refused"] for p in proxies) >= 2


def test_a_hanging_outage_answers_nothing_until_it_ends(direct, proxied):
    # Given proxies that hang every request for a second
    table, _ = _names(direct)
    storage, proxies = proxied()
    for proxy in proxies:
        proxy.outage(1.0, "hanging")

    # When a request is made meanwhile, it waits out the outage, then fails unapplied
    began = time.monotonic()
    with pytest.raises(Unavailable):
        storage.records.insert(table, "p", "r", {"a": 1})

    assert time.monotonic() - began >= 0.9
    with pytest.raises(NotFound):
        direct.records.get(table, "p", "r")
    assert proxies[2].counts.faults == {"hanging": 1}
    with pytest.raises(ValueError, match="refused or hanging"):
        proxies[0].outage(1.0, "flaky")


def _wait_up(proxies: list[FaultProxy], seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while any(p.down() is not None for p in proxies):
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)
    return True
