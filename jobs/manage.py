"""Controlling a submitted job: cancel it, pause it, resume it (``runner cancel`` ...).

Each is one conditional update of the job's record, decided again on the fresh record if
another writer got there first, so each is safe to repeat and to race. Workers learn of
it within one lease renewal (docs/semantics.md §16): a cancelled job's running chunks
stop at their next checkpoint and its waiting messages are deleted unrun; a paused job
starts no new task, and its running chunks save their state and hand their messages
back (or finish, with ``drain``), parking their messages for minutes. A resume or a
cancel then brings the parked messages back at once (:mod:`checkpoint.parks`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from checkpoint import parks
from checkpoint.backends import open_storage
from checkpoint.clock import Clock
from checkpoint.records import JobRecord
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs import dependencies
from jobs.errors import JobEnded

log = logging.getLogger(__name__)

#: Longest reason kept on a cancelled job (characters).
MAX_REASON_CHARS = 1_000


def cancel(
    job_id: str,
    reason: str = "",
    *,
    storage: Storage | str | None = None,
    clock: Clock | None = None,
) -> JobRecord:
    """Cancel the job (``clock``: whose time records when; the system's by default):
    nothing more of it runs, finalize included; it ends ``cancelled`` with when and
    why, and so do the jobs waiting to run after it. Cancelling a cancelled job again
    changes only its reason, to ``reason`` if one is given.

    Raises:
        JobNotFound: no such job.
        JobEnded: the job is done or failed already.
    """

    kept_reason = reason[:MAX_REASON_CHARS]

    def decide(job: JobRecord) -> dict[str, Any] | None:
        if job.state == "cancelled":
            # A new reason is kept (the newest word on why); no reason keeps the old one.
            if kept_reason and kept_reason != job.cancel_reason:
                return {"cancel_reason": kept_reason}
            return None
        _refuse_ended(job, "cancelled")
        return {
            "state": "cancelled",
            "cancelled_on": store.clock.now(),
            "cancel_reason": kept_reason,
        }

    with _store(storage, clock) as store:
        cancelled = _changed(store, job_id, decide)
        # Once: a message parked later by a worker that had not seen the cancel yet is
        # deleted unrun when its park ends.
        released = parks.release(
            store.storage.records, store.storage.queues, job_id, store.budget()
        )
        log.info("%s: %d parked messages brought back to be deleted", job_id, released.visible)
        # The jobs waiting on it can never start now: cancelled too, with the reason.
        dependencies.start_dependents(store, store.storage.queues, job_id, store.budget())
        return cancelled


def pause(
    job_id: str,
    *,
    drain: bool = False,
    storage: Storage | str | None = None,
    clock: Clock | None = None,
) -> JobRecord:
    """Pause the job: no new task of it starts; its running chunks save their state and
    hand their messages back without spending an attempt (with ``drain``: they finish).
    Pausing a paused job again changes only ``drain``, to the one given.

    Raises:
        JobNotFound: no such job.
        JobEnded: the job has ended.
    """

    def decide(job: JobRecord) -> dict[str, Any] | None:
        _refuse_ended(job, "paused")
        if job.paused_on is not None:
            # Paused already: the newest word on draining applies from the next renewal
            # on (a chunk handed back already stays handed back); the pause keeps its
            # start, which sets how long parked messages wait.
            return None if job.drain == drain else {"drain": drain}
        return {"paused": True, "paused_on": store.clock.now(), "drain": drain}

    with _store(storage, clock) as store:
        return _changed(store, job_id, decide)


def resume(
    job_id: str, *, storage: Storage | str | None = None, clock: Clock | None = None
) -> JobRecord:
    """Resume a paused job from its checkpoints: then make its parked messages visible
    at once (:func:`checkpoint.parks.release`), so its work starts within 5 s however
    long it was paused. Resuming a running job changes nothing but that; it finishes a
    release an earlier resume left unfinished.

    Raises:
        JobNotFound: no such job.
        JobEnded: the job has ended.
    """

    def decide(job: JobRecord) -> dict[str, Any] | None:
        _refuse_ended(job, "resumed")
        if job.paused_on is None:
            return None
        return {"paused": False, "drain": False}

    with _store(storage, clock) as store:
        resumed = _changed(store, job_id, decide)
        released = parks.release_resumed(
            store.storage.records, store.storage.queues, job_id, store.clock, store.budget()
        )
        log.info("%s: %d parked messages brought back", job_id, released.visible)
        return resumed


def _refuse_ended(job: JobRecord, verb: str) -> None:
    if job.ended:
        raise JobEnded(f"job {job.job_id!r} has ended ({job.state}); it cannot be {verb}")


def _changed(
    store: CheckpointStore, job_id: str, decide: Callable[[JobRecord], dict[str, Any] | None]
) -> JobRecord:
    written = store.change_job(job_id, decide)
    return written if written is not None else store.get_job(job_id)


@contextmanager
def _store(storage: Storage | str | None, clock: Clock | None) -> Iterator[CheckpointStore]:
    opened = storage if isinstance(storage, Storage) else open_storage(storage, create=False)
    try:
        yield CheckpointStore(opened, clock)
    finally:
        if opened is not storage:
            opened.close()
