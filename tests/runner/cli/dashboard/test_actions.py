"""The dashboard's actions (runner/cli/dashboard/actions.py) apart from the routes: the
token and its comparison, the words for what was done, an action not known."""

from __future__ import annotations

import pytest

from runner.cli.dashboard.actions import Done, act, new_token, said, token_matches


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


def test_an_action_not_known_is_refused_before_the_store_is_touched():
    with pytest.raises(ValueError, match="no action 'explode'"):
        act(None, "job-1", "explode", {})  # type: ignore[arg-type]
