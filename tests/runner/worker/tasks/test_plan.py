"""Planning's enqueueing (runner/plan.py): what a retry sends again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from checkpoint.errors import NotFound, StorageError, Throttled, Unavailable
from runner.worker.tasks.plan import sender_of_unsent


class SometimesRefused:
    """A queue store whose ``send_many`` refuses the bodies named for each call."""

    def __init__(self, refusals: list[set[bytes]]):
        self.refusals = refusals
        self.calls: list[list[bytes]] = []
        self.sent: list[bytes] = []

    def send_many(
        self, queue: str, bodies: Sequence[bytes], **_options: Any
    ) -> list[StorageError | None]:
        self.calls.append(list(bodies))
        refused = self.refusals.pop(0) if self.refusals else set()
        answers: list[StorageError | None] = []
        for body in bodies:
            if body in refused:
                answers.append(Throttled("busy"))
            else:
                self.sent.append(body)
                answers.append(None)
        return answers


def test_a_retry_sends_only_what_was_refused():
    bodies = [b"c0", b"c1", b"c2", b"c3"]
    queues = SometimesRefused([{b"c1", b"c3"}, {b"c3"}])
    send = sender_of_unsent(queues, "q", bodies)  # type: ignore[arg-type]

    with pytest.raises(Throttled):
        send()
    with pytest.raises(Throttled):
        send()
    send()

    assert queues.calls == [bodies, [b"c1", b"c3"], [b"c3"]]
    assert sorted(queues.sent) == bodies  # each once: no page sent twice


def test_a_call_that_fails_as_a_whole_is_tried_again_whole():
    bodies = [b"c0", b"c1"]
    failures: list[Exception] = [Unavailable("reset"), NotFound("queue gone")]

    class Failing(SometimesRefused):
        def send_many(self, queue: str, bodies: Sequence[bytes], **options: Any) -> Any:
            self.calls.append(list(bodies))
            raise failures.pop(0)

    queues = Failing([])
    send = sender_of_unsent(queues, "q", bodies)  # type: ignore[arg-type]
    with pytest.raises(Unavailable):
        send()
    with pytest.raises(NotFound):
        send()
    assert queues.calls == [bodies, bodies]
