"""``runner poison list`` with no JOB_ID and ``runner poison purge``
(runner/cli/rejections.py): the submissions the intake queues rejected, read from
``<queue>-intake-rejected`` by peeking, in text and JSON, and deleted, on both backends."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.intake import Rejected
from jobs.rejection import read_rejected, rejected_body, rejection
from runner.cli import commands
from runner.cli.rejections import SHOWN, read_rejections, render_rejections
from tests.azurite import Azurite
from tests.backends import BACKENDS


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite: a listing names every rejected queue of the store."""
    return own_azurite


class Store:
    """A store (the embedded one on the real clock, or Azurite) and its --storage."""

    def __init__(self, storage: Storage, location: str):
        self.storage, self.location = storage, location
        self.made: list[str] = []

    def queue(self, order: str = "a") -> str:
        """A fresh job queue whose rejected queue exists (listed in ``order``)."""
        name = f"rj{order}-{uuid.uuid4().hex[:10]}"
        self.storage.queues.create_queue(layout.rejected_queue_of(name))
        self.made.append(layout.rejected_queue_of(name))
        return name

    def reject(self, queue: str, original: bytes, field: str | None, problem: str) -> None:
        found = rejection(
            original,
            Rejected(field, problem),
            queue=layout.intake_queue_of(queue),
            at="2026-11-25T10:00:00.000000Z",
            message_id=uuid.uuid4().hex,
            inserted_on="2026-11-25T09:59:00.000000Z",
            dequeue_count=1,
        )
        self.storage.queues.send(layout.rejected_queue_of(queue), rejected_body(found))

    def runner(self, *args: str, code: int = 0) -> Result:
        result = CliRunner().invoke(commands.cli, [*args, "--storage", self.location])
        assert result.exit_code == code, result.output
        return result

    def left(self, queue: str) -> int:
        return self.storage.queues.approximate_length(layout.rejected_queue_of(queue))


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "embedded":
        location = str(tmp_path / "store")
    else:
        location = request.getfixturevalue("azurite").connection_string
    storage = open_storage(location)
    CheckpointStore(storage).ensure()
    made = Store(storage, location)
    try:
        yield made
    finally:
        for name in made.made:
            storage.queues.delete_queue(name)
        storage.close()


def test_no_rejected_queue_says_so(store: Store):
    said = store.runner("poison", "list").output
    assert said == "no rejected submissions: no intake queue in this store\n"
    assert json.loads(store.runner("poison", "list", "--json").output) == []


def test_the_rejections_of_every_intake_queue_are_listed_with_their_reasons(store: Store):
    # Given two intake queues' rejections: a submission refused for its params, a
    # body that is not text, and a message that is no rejection at all
    orders, other = store.queue("a"), store.queue("b")
    store.reject(orders, b'{"submission_id": "n-7", "x": "<b>"}', "params", "rows must be >= 0")
    store.reject(orders, b"\x00\xff", None, "not JSON, neither raw nor base64")
    store.storage.queues.send(layout.rejected_queue_of(other), b"put here by hand")

    # When they are listed
    text = store.runner("poison", "list").output

    # Then each queue says how many it holds, each rejection its time, its submission,
    # its reason and its original (base64 when it is not text)
    assert text.splitlines() == [
        f"{orders}-intake-rejected: 2 rejected submission(s)",
        "  2026-11-25T10:00:00.000000Z  submission 'n-7': params: rows must be >= 0",
        '      original: {"submission_id": "n-7", "x": "<b>"}',
        "  2026-11-25T10:00:00.000000Z  no submission id: not JSON, neither raw nor base64",
        "      original (base64: not UTF-8): AP8=",
        f"{other}-intake-rejected: 1 rejected submission(s)",
        text.splitlines()[-1],
    ]
    assert text.splitlines()[-1].endswith("  not a rejection: 'put here by hand'")

    # and --json gives the same as objects, one per queue
    shown = json.loads(store.runner("poison", "list", "--json").output)
    assert [(one["queue"], one["intake_queue"], one["count"]) for one in shown] == [
        (f"{orders}-intake-rejected", f"{orders}-intake", 2),
        (f"{other}-intake-rejected", f"{other}-intake", 1),
    ]
    first = shown[0]["rejected"][0]
    assert set(first) == {"rejected_message_id", "rejected_on", "rejection", "body_preview"}
    assert first["rejection"]["reason"] == "params: rows must be >= 0"
    assert first["rejection"]["submission_id"] == "n-7" and first["body_preview"] is None
    assert shown[1]["rejected"][0]["rejection"] is None
    assert shown[1]["rejected"][0]["body_preview"] == "put here by hand"


def test_one_queue_is_listed_with_its_oldest_and_its_count(store: Store):
    # Given more rejections than one look shows, and another queue's
    orders, other = store.queue("a"), store.queue("b")
    for n in range(SHOWN + 1):
        store.reject(orders, f'{{"submission_id": "s-{n}"}}'.encode(), "schema", "missing")
    store.reject(other, b"{}", "schema", "missing")

    # When one queue is listed
    text = store.runner("poison", "list", "--queue", orders).output.splitlines()

    # Then it alone, its count, and its oldest
    assert text[0] == f"{orders}-intake-rejected: 33 rejected submission(s), the 32 oldest shown"
    assert len(text) == 1 + 2 * SHOWN
    assert "submission 's-0'" in text[1]
    (found,) = read_rejections(store.storage.queues, orders)
    assert (found.count, len(found.shown)) == (SHOWN + 1, SHOWN)


def test_an_intake_that_does_not_exist_and_a_job_id_with_queue_are_refused(store: Store):
    said = store.runner("poison", "list", "--queue", "nosuch-queue", code=1)
    assert "no queue 'nosuch-queue-intake-rejected'" in str(said.exception)
    misused = store.runner("poison", "list", "some-job", "--queue", "q", code=2)
    assert "--queue lists rejected submissions: give it without a JOB_ID" in misused.output


def test_purge_deletes_the_rejections_of_one_queue_or_all(store: Store):
    # Given rejections in two queues
    orders, other = store.queue("a"), store.queue("b")
    for n in range(3):
        store.reject(orders, f"body {n}".encode(), None, "not JSON")
    store.reject(other, b"x", None, "not JSON")

    # When a dry run, and a purge of those older than a day, are asked for
    dry = store.runner("poison", "purge", "--queue", orders, "--dry-run").output
    young = store.runner("poison", "purge", "--older-than", "1d", "--json").output

    # Then nothing is deleted, and the dry run says what would be
    assert dry.splitlines() == [
        f"{orders}-intake-rejected: would delete 3 rejected submission(s)",
        "would delete 3 rejected submission(s) (dry run)",
    ]
    assert all(one["deleted"] == 0 and not one["dry_run"] for one in json.loads(young))
    assert (store.left(orders), store.left(other)) == (3, 1)
    # and each rejection is still there to read (handed back at once)
    assert len(read_rejections(store.storage.queues, orders)[0].shown) == 3

    # When one queue is purged, then every queue
    said = store.runner("poison", "purge", "--queue", orders).output
    assert said.splitlines()[-1] == "deleted 3 rejected submission(s)"
    assert (store.left(orders), store.left(other)) == (0, 1)
    store.runner("poison", "purge")
    assert store.left(other) == 0


def test_purge_counts_age_from_when_a_rejection_was_moved(store: Store, monkeypatch: Any):
    # Given a rejection, and a clock a day and a minute later
    orders = store.queue()
    store.reject(orders, b"old", None, "not JSON")
    (message,) = store.storage.queues.peek(layout.rejected_queue_of(orders))
    assert read_rejected(message.body) is not None
    later = message.inserted_on + timedelta(days=1, minutes=1)
    monkeypatch.setattr(commands, "_now", lambda: later)

    # When what is older than a day is purged
    said = store.runner("poison", "purge", "--older-than", "1d").output

    # Then it is deleted
    assert said.splitlines()[-1] == "deleted 1 rejected submission(s)"
    assert store.left(orders) == 0


def test_a_long_original_is_cut_and_a_queue_deleted_meanwhile_holds_nothing(store: Store):
    # Given a rejection of a long body, and a rejected queue deleted once listed
    orders, gone = store.queue("a"), store.queue("b")
    store.reject(orders, b'{"p": "' + b"x" * 200 + b'"}', "params", "too long")

    class Deleting:
        def __getattr__(self, name: str) -> Any:
            return getattr(store.storage.queues, name)

        def approximate_length(self, queue: str) -> int:
            if queue == layout.rejected_queue_of(gone):
                store.storage.queues.delete_queue(queue)
            return int(store.storage.queues.approximate_length(queue))

    # When they are read
    found = {each.queue: each for each in read_rejections(Deleting())}

    # Then the deleted queue holds nothing, and the long original is cut in the text
    assert found[layout.rejected_queue_of(gone)].count == 0
    text = render_rejections([found[layout.rejected_queue_of(orders)]])
    assert text.splitlines()[-1] == "      original: " + ('{"p": "' + "x" * 200)[:97] + "..."
