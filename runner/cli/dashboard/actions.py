"""What the dashboard may change when started with ``--allow-actions``: cancel, pause
and resume a job, redrive its poisoned chunks, through the very functions their
commands call (:mod:`jobs.manage`, :func:`runner.cli.redrive.redrive`).

Each action is a POST carrying the token ``runner dashboard`` printed at start, in the
form field ``token`` or the header ``X-Runner-Token``; it is compared in constant time.
No token, a wrong one, or actions off: 403, and nothing is read or changed. The token
also keeps another site's page from posting actions through a viewer's browser: that
page cannot know it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from checkpoint.records import ENDED_JOB_STATES
from checkpoint.store import CheckpointStore
from jobs import manage
from runner.cli.redrive import redrive
from runner.cli.status_types import AnyJob, JobStatus

ACTIONS = ("cancel", "pause", "resume", "redrive")
TOKEN_FIELD = "token"
TOKEN_HEADER = "x-runner-token"
#: The reason kept on a job cancelled from the dashboard without one.
DEFAULT_REASON = "cancelled from the dashboard"


def new_token() -> str:
    """A fresh token, printed at start: 32 random bytes as URL-safe text."""
    return secrets.token_urlsafe(32)


def token_matches(given: str | None, token: str) -> bool:
    """Whether ``given`` is ``token``, compared in constant time."""
    if not given:
        return False
    return secrets.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


@dataclass(frozen=True)
class Done:
    """What an action did: which, to which job, and how many tasks a redrive reset
    (``count``), could not read (``unreadable``) or sent again once dropped
    (``resent``)."""

    action: str
    job_id: str
    count: int = 0
    unreadable: int = 0
    resent: int = 0


def actions_for(job: AnyJob) -> tuple[str, ...]:
    """The actions that apply to the job as status shows it, in the page's order: pause
    or resume (whichever it is not) and cancel until it ends; redrive while a task of it
    is poisoned (or a redrive of it is unfinished) and it was not cancelled. A job whose
    record cannot be read has none."""
    if not isinstance(job, JobStatus):
        return ()
    ended = job.state in ENDED_JOB_STATES
    offered = [] if ended else ["resume" if job.paused else "pause"]
    if (job.chunks.poisoned or job.poisoned or job.redriving) and job.state != "cancelled":
        offered.append("redrive")
    if not ended:
        offered.append("cancel")
    return tuple(offered)


def act(store: CheckpointStore, job_id: str, action: str, form: Mapping[str, str]) -> Done:
    """Do ``action`` (one of :data:`ACTIONS`) to the job, as its command does.

    ``form``: ``reason`` for a cancel, ``drain`` for a pause. Raises what the command
    raises: JobNotFound, JobEnded (the job has ended), storage errors."""
    if action not in ACTIONS:
        raise ValueError(f"no action {action!r}")
    storage, clock = store.storage, store.clock
    if action == "cancel":
        reason = form.get("reason", "").strip() or DEFAULT_REASON
        manage.cancel(job_id, reason, storage=storage, clock=clock)
    elif action == "pause":
        manage.pause(job_id, drain=bool(form.get("drain")), storage=storage, clock=clock)
    elif action == "resume":
        manage.resume(job_id, storage=storage, clock=clock)
    else:
        done = redrive(store, storage.queues, job_id)
        return Done(action, job_id, done.count, len(done.unreadable), done.resent)
    return Done(action, job_id)


def said(done: Done) -> str:
    """What the page says once ``done``."""
    if done.action == "redrive":
        left = (
            f"; {done.unreadable} record(s) cannot be read and were left as they are"
            if done.unreadable
            else ""
        )
        resent = f", and sent {done.resent} dropped task(s) again" if done.resent else ""
        return f"redrove {done.count} poisoned task(s){resent}{left}"
    return {"cancel": "cancelled", "pause": "paused", "resume": "resumed"}[done.action]
