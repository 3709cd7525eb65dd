"""What a worker knows of each job's state: read fresh enough to act on a cancel or a
pause within a lease renewal, and never once per message.

Every message a worker receives needs its job's record (the job type, the queue, the
params, and whether it is cancelled or paused), and every running chunk asks at each
renewal whether its job still wants it. Both read through here: a record read in the
last :data:`FRESH_SECONDS` serves them all, so a worker running a thousand quick chunks
of one job reads that job's record about once a second, and a cancel reaches its running
chunks at their next renewal.
"""

from __future__ import annotations

import logging

from checkpoint import retries
from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, JobNotFound, StorageError
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.store import CheckpointStore
from runner.recent import Recent

log = logging.getLogger(__name__)

#: A job record read this recently (seconds) is used as it is.
FRESH_SECONDS = 1.0
#: Jobs a worker keeps records of.
JOBS_KEPT = 256


class JobWatch:
    """Fresh-enough job records, shared by a worker's threads."""

    def __init__(self, store: CheckpointStore, clock: Clock, jobs_kept: int = JOBS_KEPT):
        self._store = store
        self._clock = clock
        self._known: Recent[str, tuple[float, JobRecord]] = Recent(jobs_kept)

    def job(self, job_id: str, budget: Budget, fresh: bool = False) -> JobRecord:
        """The job's record, read again if the one known is older than FRESH_SECONDS
        (or at once, ``fresh``).

        Raises what :meth:`CheckpointStore.get_job` raises (JobNotFound, BadRecord, a
        StorageError past ``budget``)."""
        known = self._known.get(job_id)
        now = self._clock.monotonic()
        if known is not None and not fresh and now - known[0] < FRESH_SECONDS:
            return known[1]
        try:
            job = self._store.get_job(job_id, budget)
        except JobNotFound:
            self._known.forget(job_id)  # deleted: its last record must not serve on
            raise
        self._known.put(job_id, (now, job))
        return job

    def hold(self, job_id: str, drain_running: bool = True) -> str | None:
        """Why a running task of the job must stop now ("deleted", "cancelled",
        "paused"), or None.

        For a refresh after a lease renewal: one try, never raises; when the store does
        not answer, the last record known decides (a running task goes on, as it would
        with its lease). A job gone, or being deleted, is "deleted": its records are
        going, so its tasks stop without writing them. A paused job whose pause drains
        lets running chunks finish."""
        try:
            job = self.job(job_id, retries.once(self._clock))
        except JobNotFound:
            return "deleted"
        except (StorageError, BadRecord) as error:
            log.debug("reading job %s for its hold failed: %s", job_id, error)
            known = self._known.get(job_id)
            if known is None:
                return None
            job = known[1]
        if job.deleting_on is not None:
            return "deleted"
        hold = job.hold
        if hold == "paused" and job.drain and drain_running:
            return None
        return hold
