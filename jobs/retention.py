"""Removing ended jobs from storage: ``jobs.delete`` one, ``jobs.purge`` the old ones
(``runner delete``, ``runner purge``).

A job's records, spilled values and visible messages are deleted, its own record last
(:meth:`CheckpointStore.delete_job <checkpoint.store.CheckpointStore.delete_job>`), so
either call is safe to repeat after a crash midway. Its messages that were invisible
then are deleted unrun by the worker that receives them, and never run for a new job
submitted later with the same id: each job record has its own incarnation, carried in
its messages (docs/semantics.md §17).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from checkpoint.backends import open_storage
from checkpoint.deletion import Deleted
from checkpoint.errors import BadRecord, ConfigurationError, JobNotEnded
from checkpoint.records import ENDED_JOB_STATES, OUTPUTS, JobRecord
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs import dependencies
from jobs.errors import JobEnded
from jobs.manage import cancel
from jobs.spark.chunk_output import sweep_attempts

log = logging.getLogger(__name__)

#: The reason a job deleted with ``force`` is cancelled with first.
FORCED_REASON = "deleted with --force"

_AGE = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}


def delete(job_id: str, *, force: bool = False, storage: Storage | str | None = None) -> Deleted:
    """Delete a job that has ended (done, failed or cancelled): its records, blobs and
    messages. A job half-deleted by a call that died is finished, whatever its state.

    Args:
        job_id: the job.
        force: delete a job that has not ended too, cancelling it first.
        storage: a Storage, a ``--storage`` value, or None for ``$RUNNER_STORAGE`` /
            ``./.runner``.

    Returns:
        What was deleted.

    Raises:
        JobNotFound: no such job.
        JobNotEnded: it has not ended, and ``force`` is not given.
    """
    with _store(storage) as store:
        job = store.get_job(job_id)
        if not job.ended and job.deleting_on is None:
            if not force:
                raise JobNotEnded(
                    f"job {job_id!r} is {job.state}, not ended; --force (force=True) "
                    "cancels it first, then deletes it"
                )
            _cancel(job_id, store)
        _sweep_outputs(store, job_id)
        return _deleted(store, job)


def purge(
    older_than: timedelta,
    *,
    states: Iterable[str] = ENDED_JOB_STATES,
    dry_run: bool = False,
    storage: Storage | str | None = None,
) -> list[Deleted]:
    """Delete every ended job in ``states`` last updated more than ``older_than`` ago,
    and finish any such job a deletion that died left half-deleted (whatever its age).

    Args:
        older_than: how long ago a job's ``updated_on`` must be (>= 0).
        states: of ``done``, ``failed`` and ``cancelled``; default all three.
        dry_run: delete nothing; return the jobs that would be deleted (counts 0).
        storage: as for :func:`delete`.

    Returns:
        What was deleted, per job, oldest first. A record that cannot be read is left
        alone (``runner status`` shows why).
    """
    chosen = _check_states(states)
    if older_than < timedelta(0):
        raise ConfigurationError(f"older_than must be >= 0, not {older_than}")
    with _store(storage) as store:
        cutoff = store.clock.now() - older_than
        found = [job for job in store.list_jobs() if _due(job, chosen, cutoff)]
        found.sort(key=lambda job: (job.updated_on is None, job.updated_on, job.job_id))
        if dry_run:
            return [Deleted(j.job_id, j.state, j.updated_on, dry_run=True) for j in found]
        deleted = []
        for job in found:
            _sweep_outputs(store, job.job_id)
            deleted.append(_deleted(store, job))
        return deleted


def parse_age(text: str) -> timedelta:
    """``30s``, ``15m``, ``12h`` or ``7d`` as a timedelta.

    Raises:
        ConfigurationError: anything else, saying what is accepted.
    """
    match = _AGE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigurationError(
            f"{text!r} is not an age: use a whole number and a unit, s, m, h or d "
            "(30s, 15m, 12h, 7d)"
        )
    return timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def _due(job: JobRecord, states: frozenset[str], cutoff: datetime) -> bool:
    if job.state not in states:
        return False
    if job.deleting_on is not None:
        return True  # chosen by an earlier deletion, whose mark moved updated_on
    return job.ended and job.updated_on is not None and job.updated_on < cutoff


def _check_states(states: Iterable[str]) -> frozenset[str]:
    chosen = frozenset((states,) if isinstance(states, str) else states)
    unknown = sorted(chosen - set(ENDED_JOB_STATES))
    if unknown or not chosen:
        raise ConfigurationError(
            f"states {unknown or '(none)'}: choose from {', '.join(ENDED_JOB_STATES)}"
        )
    return chosen


def _sweep_outputs(store: CheckpointStore, job_id: str) -> None:
    """Remove what dead attempts left beside the job's published chunk outputs
    (:func:`jobs.spark.chunk_output.sweep_attempts`), before the records naming them go."""
    removed = 0
    for _, task in store.scan_chunks(job_id):
        if isinstance(task, BadRecord):
            continue  # garbled: deleted with the rest, its outputs not known
        try:
            outputs = store.value(task.properties, OUTPUTS, default={}, of=task.name)
        except BadRecord as bad:
            log.warning("not sweeping the outputs of %s: %s", task.name, bad)
            continue
        removed += sweep_attempts(outputs) if isinstance(outputs, dict) else 0
    if removed:
        log.info("job %s: removed %d directories of dead attempts' output", job_id, removed)


def _deleted(store: CheckpointStore, job: JobRecord) -> Deleted:
    """Delete the job; then the jobs still waiting on it can never start: they are
    cancelled, with the reason, and its notes of them (and its pipeline's of it) go."""
    deleted = store.delete_job(job.job_id)
    dependencies.after_deleted(store, store.storage.queues, job.job_id, store.budget())
    if job.pipeline is not None:
        store.pipeline_steps.forget(job.pipeline, job.job_id)
    return deleted


def _cancel(job_id: str, store: CheckpointStore) -> None:
    try:
        cancel(job_id, reason=FORCED_REASON, storage=store.storage)
    except JobEnded:
        pass  # it ended meanwhile: deleted as it is


@contextmanager
def _store(storage: Storage | str | None) -> Iterator[CheckpointStore]:
    opened = storage if isinstance(storage, Storage) else open_storage(storage, create=False)
    try:
        yield CheckpointStore(opened)
    finally:
        if opened is not storage:
            opened.close()
