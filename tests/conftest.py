"""Test fixtures: every contract test runs once per backend.

``backend`` is parametrised over the embedded store (on a :class:`FakeClock`, so time is
advanced, not slept) and Azure Storage as served by a private Azurite that this test
session starts on free loopback ports and stops at the end. A missing Azurite fails the
run: it never skips (``make test`` installs it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.storage import Storage
from tests import azurite as azurite_process

BACKENDS = ["embedded", "azurite"]

#: Azurite's visibility is accurate to ~10 ms; a real wait adds this much for safety.
REAL_TIME_MARGIN_SECONDS = 0.25


def started_azurite() -> Iterator[azurite_process.Azurite]:
    """A private Azurite until the generator is closed; a missing one fails, never skips."""
    try:
        instance = azurite_process.start()
    except azurite_process.AzuriteMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    yield instance
    instance.stop()


def uses_azurite(item: pytest.Item) -> bool:
    """True if ``item`` needs the session's Azurite: it asks for the fixture, or it is the
    ``azurite`` case of a test parametrised over :data:`BACKENDS` (whose fixtures ask
    for it only then, by ``request.getfixturevalue``)."""
    if "azurite" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "azurite" in callspec.params.values()


def pytest_itemcollected(item: pytest.Item) -> None:
    # Marked as collected, before `-m` deselects: `-m "not azurite"` runs without it.
    if uses_azurite(item):
        item.add_marker(pytest.mark.azurite)


@pytest.fixture(scope="session")
def azurite() -> Iterator[azurite_process.Azurite]:
    """One Azurite for the whole session; tests keep apart by unique names."""
    yield from started_azurite()


@dataclass
class Backend:
    """A storage backend under test, and how to let time pass on it."""

    name: str
    storage: Storage
    advance: Callable[[float], None]
    #: The embedded store's clock; None on Azurite, whose visibility runs on server time.
    clock: FakeClock | None = None
    made: list[tuple[str, str]] = field(default_factory=list)

    def queue(self) -> str:
        """A fresh queue, created; deleted after the test."""
        name = f"q-{uuid.uuid4().hex[:12]}"
        self.storage.queues.create_queue(name)
        self.made.append(("queue", name))
        return name

    def table(self) -> str:
        """A fresh table, created; deleted after the test."""
        name = f"t{uuid.uuid4().hex[:12]}"
        self.storage.records.create_table(name)
        self.made.append(("table", name))
        return name

    def container(self) -> str:
        """A fresh blob container, created; deleted after the test."""
        name = f"c-{uuid.uuid4().hex[:12]}"
        self.storage.blobs.create_container(name)
        self.made.append(("container", name))
        return name

    def clean_up(self) -> None:
        delete = {
            "queue": self.storage.queues.delete_queue,
            "table": self.storage.records.delete_table,
            "container": self.storage.blobs.delete_container,
        }
        for kind, name in self.made:
            delete[kind](name)


def _real_wait(seconds: float) -> None:
    time.sleep(seconds + REAL_TIME_MARGIN_SECONDS)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path) -> Iterator[Backend]:
    """The storage contract's subject: embedded on a fake clock, or Azurite in real time."""
    if request.param == "embedded":
        clock = FakeClock()
        storage = open_storage(str(tmp_path / "store"), clock=clock)
        subject = Backend("embedded", storage, clock.advance, clock)
    else:
        server = request.getfixturevalue("azurite")
        storage = open_storage(server.connection_string, azure_retry_total=1)
        subject = Backend("azurite", storage, _real_wait)
    try:
        yield subject
    finally:
        subject.clean_up()
        storage.close()
