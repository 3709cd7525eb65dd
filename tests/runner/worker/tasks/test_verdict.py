"""One Verdict for what the claim and an attempt's end decide, stored the same way."""

from __future__ import annotations

from typing import Any

from jobs.errors import ChunkFailed
from jobs.job import ChunkedJob
from runner.worker.tasks.verdict import Verdict, failure_verdict


class Flaky(ChunkedJob):
    max_attempts = 3
    non_retryable = (KeyError,)

    def split(self, params: Any) -> list[Any]:
        return []

    def process(self, chunk: Any) -> None:
        return None


def test_a_failed_attempt_is_tried_again_until_its_last_one() -> None:
    first = failure_verdict(1, ValueError("x"), Flaky)
    last = failure_verdict(3, ValueError("x"), Flaky)
    assert first.tries_again and not last.tries_again
    assert last.reason == "failed on attempt 3 of 3: ValueError('x')"
    assert first.properties() == last.properties() == {"retryable": True, "max_attempts": 3}


def test_what_trying_again_cannot_mend_is_final_at_once() -> None:
    for error in (KeyError("k"), ChunkFailed("no", retry=False)):
        verdict = failure_verdict(1, error, Flaky)
        assert not verdict.tries_again and verdict.retryable is False
        assert verdict.reason == f"failed on attempt 1, not retryable: {error!r}"


def test_a_verdict_that_judged_nothing_clears_an_earlier_attempts() -> None:
    assert Verdict("already done").properties() == {"retryable": ""}
    assert Verdict("unreadable", retryable=False).properties() == {"retryable": False}
