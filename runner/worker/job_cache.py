"""What a worker knows of each job's state: read fresh enough to act on a cancel or a
pause within a second or two, and never once per message.

Every message a worker receives needs its job's record (the job type, the queue, the
params, and whether it is cancelled or paused), and the worker's stop-order watcher
(:mod:`runner.worker.stop_orders`) asks about every job with running tasks about once a second. Both
read through here: a record read in the last :data:`FRESH_SECONDS` serves them all, so a
worker running a thousand quick chunks of one job reads that job's record about once a
second. A record this worker wrote itself (the job failed past its tolerated failures)
is noted at once (:meth:`JobCache.note`), so its next delivery of the job acts on it.
Whoever must hear of each record as it comes in (the completion's chunk totals, which
an earlier incarnation of a job id must not serve) is told once per record read or
noted (:attr:`JobCache.on_read`), not once per message served from here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from checkpoint import retries
from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, JobNotFound, StorageError
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.store import CheckpointStore
from runner.worker.lru_map import LruMap

log = logging.getLogger(__name__)

#: A job record read this recently (seconds) is used as it is.
FRESH_SECONDS = 1.0
#: Jobs a worker keeps records of.
JOBS_KEPT = 256


class JobCache:
    """Fresh-enough job records, shared by a worker's threads."""

    def __init__(self, store: CheckpointStore, clock: Clock, jobs_kept: int = JOBS_KEPT):
        self._store = store
        self._clock = clock
        self._known: LruMap[str, tuple[float, JobRecord]] = LruMap(jobs_kept)
        #: Told of each record as it is read from the store or noted, before any
        #: caller acts on it.
        self.on_read: Callable[[JobRecord], None] = _nobody

    def job(
        self,
        job_id: str,
        budget: Budget,
        fresh: bool = False,
        max_age_seconds: float = FRESH_SECONDS,
    ) -> JobRecord:
        """The job's record, read again if the one known is ``max_age_seconds`` old or
        older (or at once, ``fresh``).

        Raises what :meth:`CheckpointStore.get_job` raises (JobNotFound, BadRecord, a
        StorageError past ``budget``)."""
        known = self._known.get(job_id)
        now = self._clock.monotonic()
        if known is not None and not fresh and now - known[0] < max_age_seconds:
            return known[1]
        try:
            job = self._store.get_job(job_id, budget)
        except JobNotFound:
            self._known.forget(job_id)  # deleted: its last record must not serve on
            raise
        self._known.put(job_id, (now, job))
        self.on_read(job)
        return job

    def note(self, job: JobRecord) -> None:
        """Know ``job`` as this worker just wrote (or read) it, from now on."""
        self._known.put(job.job_id, (self._clock.monotonic(), job))
        self.on_read(job)

    def stop_order(self, job_id: str, max_age_seconds: float = FRESH_SECONDS) -> str | None:
        """Why a running task of the job must stop now ("deleted", "cancelled",
        "paused"), or None, by a record at most ``max_age_seconds`` old.

        For the stop-order watcher's thread: one try, never raises; when the store does not
        answer, the last record known decides (a running task goes on, as it would
        with its lease). A job gone, or being deleted, is "deleted": its records are
        going, so its tasks stop without writing them. A paused job whose pause drains
        lets running chunks finish."""
        try:
            job = self.job(job_id, retries.once(self._clock), max_age_seconds=max_age_seconds)
        except JobNotFound:
            return "deleted"
        except (StorageError, BadRecord) as error:
            log.debug("reading job %s for its stop order failed: %s", job_id, error)
            known = self._known.get(job_id)
            if known is None:
                return None
            job = known[1]
        if job.deleting_on is not None:
            return "deleted"
        if job.stop_order == "paused" and job.drain:
            return None
        return job.stop_order


def _nobody(job: JobRecord) -> None:
    """Nobody is told (until the worker's assembly says who)."""
