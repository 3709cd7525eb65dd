"""The poison page's rejected submissions (runner/cli/dashboard/app.py, templates
``_poison.html``): what ``runner poison list`` with no JOB_ID shows, as text never
markup, read once per refresh, and the page still shown when they cannot be read."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import Unavailable
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.intake import Rejected
from jobs.rejection import rejected_body, rejection
from runner.cli.dashboard.app import DashboardSettings, build_app
from tests.azurite import Azurite
from tests.backends import Backend


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``): the poison page
    lists every rejected queue and reads every active job of the store, and the
    session's Azurite holds every other test's (48 s for its one test late in a run,
    under a second here)."""
    return own_azurite


class CountedQueues:
    """Queues that count their listings and fail every call while ``failing``."""

    def __init__(self, queues: Any):
        self._queues = queues
        self.listings = 0
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._queues, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.failing:
                raise Unavailable("the store is out of reach")
            self.listings += name == "list_queues"
            return method(*args, **kwargs)

        return call


def dashboard(storage: Storage) -> tuple[TestClient, CountedQueues, FakeClock]:
    clock = FakeClock()
    queues = CountedQueues(storage.queues)
    store = CheckpointStore(Storage(queues, storage.records, storage.blobs, "store"), clock)
    app = build_app(store, DashboardSettings("store", 2.0), clock.monotonic)
    return TestClient(app), queues, clock


def reject(storage: Storage, queue: str, original: bytes, field: str | None, problem: str) -> None:
    found = rejection(
        original,
        Rejected(field, problem),
        queue=layout.intake_queue_of(queue),
        at="2026-11-25T10:00:00.000000Z",
        message_id="m-1",
        inserted_on="2026-11-25T09:59:00.000000Z",
        dequeue_count=1,
    )
    storage.queues.send(layout.rejected_queue_of(queue), rejected_body(found))


def test_the_poison_page_shows_each_rejected_submission_and_its_reason(backend: Backend):
    # Given an intake's rejections: one with markup in its original and reason, one
    # not text, and a message that is no rejection
    queue = f"page-{uuid.uuid4().hex[:8]}"
    rejected_queue = layout.rejected_queue_of(queue)
    backend.storage.queues.create_queue(rejected_queue)
    backend.made.append(("queue", rejected_queue))
    script = "<script>alert('x')</script>"
    reject(
        backend.storage,
        queue,
        f'{{"submission_id": "n-1", "p": "{script}"}}'.encode(),
        None,
        script,
    )
    reject(backend.storage, queue, b"\x00\xff", None, "not JSON, neither raw nor base64")
    backend.storage.queues.send(rejected_queue, b"put here by hand")

    # When the poison page is looked at
    client, _, _ = dashboard(backend.storage)
    html = client.get("/poison").text

    # Then the queue is there with its count, each rejection with its reason and its
    # original, all as text
    section = html[html.index(f"<h3>{rejected_queue} ") :]
    assert "3 rejected" in section and f"from {layout.intake_queue_of(queue)}" in section
    assert "submission n-1" in section and "no submission id" in section
    assert "not JSON, neither raw nor base64" in section and "AP8=" in section
    assert "(base64: not UTF-8)" in section
    assert "not a rejection" in section and "put here by hand" in section
    assert script not in html and "&lt;script&gt;" in section
    assert "runner poison purge" in html


def test_a_store_with_no_intake_says_so_and_a_failed_read_keeps_the_page(tmp_path: Path):
    with open_storage(str(tmp_path / "store")) as storage:
        CheckpointStore(storage).ensure()
        client, queues, clock = dashboard(storage)

        # With no intake queue at all, the page says so
        assert "No intake queue here" in client.get("/poison").text

        # Viewers within a refresh share one listing of the queues
        client.get("/poison")
        assert queues.listings == 1

        # Once there is one, a later refresh shows it
        storage.queues.create_queue(layout.rejected_queue_of("later-queue"))
        reject(storage, "later-queue", b"{}", "schema", "missing")
        clock.advance(3)
        assert "later-queue-intake-rejected" in client.get("/poison").text

        # A refresh that fails keeps the last good read and says why
        queues.failing = True
        clock.advance(3)
        page = client.get("/poison")
        assert page.status_code == 200
        assert "reading the rejected queues failed: the store is out of reach" in page.text
        assert "later-queue-intake-rejected" in page.text


def test_a_first_read_that_fails_still_shows_the_poisoned_jobs(tmp_path: Path):
    with open_storage(str(tmp_path / "store")) as storage:
        CheckpointStore(storage).ensure()
        client, queues, _ = dashboard(storage)
        queues.failing = True
        page = client.get("/poison")
        assert page.status_code == 200
        assert "reading the rejected queues failed" in page.text
        assert "Nothing is poisoned" in page.text
