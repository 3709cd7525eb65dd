"""The storage backends every contract test runs on, and how time passes on each.

The embedded store runs on a :class:`FakeClock`, so time is advanced, not slept; Azure
Storage is a private Azurite in real time. The ``backend`` fixture (tests/conftest.py)
makes one per test; test modules import :class:`Backend` from here for their types.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from checkpoint.clock import FakeClock
from checkpoint.storage import Storage

BACKENDS = ["embedded", "azurite"]

#: Azurite's visibility is accurate to ~10 ms; a real wait adds this much for safety.
REAL_TIME_MARGIN_SECONDS = 0.25


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


def real_wait(seconds: float) -> None:
    time.sleep(seconds + REAL_TIME_MARGIN_SECONDS)
