"""The dashboard's actions (runner/cli/dashboard/actions.py) apart from the routes: the
token and its comparison, the words for what was done, an action not known."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from checkpoint.records import JOB_STATES
from runner.cli.dashboard.actions import (
    ACTIONS,
    Done,
    act,
    actions_for,
    new_token,
    said,
    token_matches,
)
from runner.cli.status_types import ChunkCounts, FailedTask, UnreadableJob
from tests.runner.cli.dashboard.test_views import _job

NOW = datetime(2030, 1, 1, tzinfo=UTC)
POISONED_PLAN = FailedTask(
    kind="plan",
    index=0,
    attempt=5,
    state="poisoned",
    max_attempts=5,
    retryable=True,
    retry_at=None,
    retry_due=False,
    error_type="KeyError",
    error_message="'numbers'",
    traceback=None,
)


def _expected(state: str, paused: bool, poisoned: bool) -> tuple[str, ...]:
    """What applies, said once more by hand: pause or resume and cancel until the job
    ends, redrive while something is poisoned and it was not cancelled (a job failed
    past its tolerance, its chunks dropped, included)."""
    ended = state in ("done", "failed", "cancelled")
    expected = [] if ended else ["resume" if paused else "pause"]
    if poisoned and state != "cancelled":
        expected.append("redrive")
    if not ended:
        expected.append("cancel")
    return tuple(expected)


@pytest.mark.parametrize("state", JOB_STATES)
@pytest.mark.parametrize("paused", [False, True], ids=["unpaused", "paused"])
@pytest.mark.parametrize("poisoned", [None, "chunk", "plan"])
@pytest.mark.parametrize("dropped", [False, True], ids=["", "dropped"])
def test_only_the_actions_that_apply_to_a_jobs_state_are_offered(
    state: str, paused: bool, poisoned: str | None, dropped: bool
):
    counts = ChunkCounts(
        total=8,
        done=2,
        running=0,
        waiting=5,
        failed=0,
        poisoned=int(poisoned == "chunk"),
        cancelled=0,
    )
    job = replace(
        _job(),
        state=state,
        paused=paused,
        paused_on=NOW if paused else None,
        cancelled_on=NOW if dropped or state == "cancelled" else None,
        chunks=counts,
        poisoned=(POISONED_PLAN,) if poisoned == "plan" else (),
    )

    offered = actions_for(job)

    assert offered == _expected(state, paused, bool(poisoned))
    assert set(offered) <= set(ACTIONS)


def test_a_job_that_cannot_be_read_is_offered_nothing():
    assert actions_for(UnreadableJob(job_id="j", error="x", unreadable=())) == ()


def test_a_token_is_fresh_each_time_and_only_itself_matches():
    token = new_token()
    assert len(token) >= 40 and token != new_token()
    assert token_matches(token, token)
    assert not token_matches(None, token) and not token_matches("", token)
    assert not token_matches(token[:-1], token) and not token_matches("ü" + token, token)


def test_what_each_action_says_it_did():
    assert [said(Done(action, "j")) for action in ("cancel", "pause", "resume")] == [
        "cancelled",
        "paused",
        "resumed",
    ]
    assert said(Done("redrive", "j", 2)) == "redrove 2 poisoned task(s)"
    assert said(Done("redrive", "j", 1, resent=3)) == (
        "redrove 1 poisoned task(s), and sent 3 dropped task(s) again"
    )


def test_an_action_not_known_is_refused_before_the_store_is_touched():
    with pytest.raises(ValueError, match="no action 'explode'"):
        act(None, "job-1", "explode", {})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "offered"),
    [
        ({}, ("pause", "cancel")),  # running: no Resume, no Redrive (nothing poisoned)
        ({"paused": True, "paused_on": NOW}, ("resume", "cancel")),
        ({"state": "failed", "poisoned": (POISONED_PLAN,)}, ("redrive",)),  # no Pause
        ({"state": "failed", "poisoned": (POISONED_PLAN,), "cancelled_on": NOW}, ("redrive",)),
        ({"redriving": True}, ("pause", "redrive", "cancel")),
        ({"state": "done"}, ()),
        ({"state": "cancelled", "cancelled_on": NOW}, ()),
    ],
    ids=[
        "running",
        "paused",
        "failed",
        "failed-past-tolerance",
        "redrive-unfinished",
        "done",
        "cancelled",
    ],
)
def test_the_actions_of_the_states_found_in_use(changes: dict[str, Any], offered: tuple[str, ...]):
    assert actions_for(replace(_job(), **changes)) == offered
