"""When a job is complete: counting its ended chunks, then finalize or fail it.

Each chunk's end is counted in its shard's counter row (written in the same atomic batch
as the chunk, or as a group of chunks of the shard), so completion is found without
reading a million chunk records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from checkpoint import layout, messages
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.storage import NEVER_EXPIRES, QueueStore
from checkpoint.store import CheckpointStore
from jobs.job import ChunkedJob
from runner.worker.lru_map import LruMap

#: Jobs whose chunk total a worker remembers (a total never changes once planned).
TOTALS_KEPT = 1024


def set_job(
    store: CheckpointStore,
    job_id: str,
    budget: Budget | None = None,
    only_from: tuple[str, ...] = (),
    **changes: Any,
) -> bool:
    """Apply ``changes`` to the job (retrying lost races); with ``only_from``, only while
    its state is one of those. Returns whether the change was made (an update applied
    with its answer lost counts as made: :mod:`checkpoint.settle`)."""
    written = store.change_job(
        job_id, lambda job: changes if not only_from or job.state in only_from else None, budget
    )
    return written is not None


class Completion:
    """Sees whether a job is complete after one of its tasks ended, and acts on it.

    ``failed`` is told the job's record when this worker finds it failed past its
    tolerated failures (it failed it, or found it so): the worker stops its own
    deliveries and running tasks of the job at once, before its cached record of the
    job would let it start another chunk
    (:meth:`runner.worker.stop_orders.StopOrderWatcher.job_changed`).
    """

    def __init__(
        self,
        store: CheckpointStore,
        queues: QueueStore,
        job_classes: Mapping[str, type[ChunkedJob]],
        totals_kept: int = TOTALS_KEPT,
        failed: Callable[[JobRecord], None] = lambda job: None,
    ):
        self._store = store
        self._queues = queues
        self._job_classes = job_classes
        self._failed = failed
        #: Chunk totals of planned jobs, with the incarnation and the job type each
        #: belongs to: a group's check then reads no job record (the catalogue).
        self._totals: LruMap[str, tuple[str | None, int, str]] = LruMap(totals_kept)

    def check(
        self,
        job_id: str,
        budget: Budget,
        shard: int | None = None,
        shard_counts: dict[str, int] | None = None,
        poisoned: bool = False,
    ) -> None:
        """If every chunk of the job has ended, enqueue finalize (or fail the job).

        Called after each chunk ends, with its shard's counts as just written: the other
        shards are read only when that shard is complete, and only until one is found
        incomplete, so a job's completion costs a few dozen reads, not one per chunk.
        After a chunk was ``poisoned``, a job that tolerates failures is failed at once
        if it now has more than it tolerates (one read of every shard's counter).
        """
        job = None
        known = self._totals.get(job_id)
        if known is None:
            # Once per job and worker once planned. While the job plans (no total yet)
            # every group reads it again, fresh, never from the worker's job cache: a
            # record read before this group's counts were written could miss the end of
            # planning, whose own check may have read the counts before them, and then
            # nobody would complete the job. The read spends the group's budget.
            job = self._store.get_job(job_id, budget)
            total, job_type = job.total, job.job_type
            if total is not None:
                # A job's total never changes once set (a job of this id submitted
                # again after a deletion is another incarnation: see observe).
                self._totals.put(job_id, (job.incarnation, total, job_type))
        else:
            _, total, job_type = known
        if poisoned:
            job = job or self._store.get_job(job_id, budget)
            if self._fail_past_tolerance(job, total, budget):
                return
        if total is None:
            return  # still planning: planning checks when it ends
        tolerated = self._tolerated(job_type)
        _check(self._store, self._queues, job_id, total, budget, shard, shard_counts, tolerated)

    def observe(self, job: JobRecord) -> None:
        """Forget the total of an earlier job of this id (deleted, and submitted again
        since): told of each job record the worker's job cache reads or is told of
        (:attr:`runner.worker.job_cache.JobCache.on_read`), before any message is
        handled under it."""
        known = self._totals.get(job.job_id)
        if known is not None and known[0] != job.incarnation:
            self._totals.forget(job.job_id)

    def _tolerated(self, job_type: str) -> int | float | None:
        job_class = self._job_classes.get(job_type)
        return job_class.tolerated_failures if job_class is not None else None

    def _fail_past_tolerance(self, job: JobRecord, total: int | None, budget: Budget) -> bool:
        """Fail the job, cancelling what is left of it, if more of its chunks are
        poisoned than it tolerates; True if it has failed (now or before)."""
        tolerated = self._tolerated(job.job_type)
        if tolerated is None or job.ended:
            return job.ended
        if isinstance(tolerated, float) and total is None:
            return False  # a fraction of a total not known yet: checked when it is
        poisoned = self._store.counts(job.job_id, budget)["poisoned"]
        if within_tolerance(poisoned, tolerated, total or 0):
            return False
        # The count as it was when the job failed: a chunk running elsewhere then may
        # still be poisoned before it learns of the failure, and status counts it.
        reason = (
            f"{poisoned} chunk(s) poisoned when the job failed, more than the {tolerated} "
            "tolerated; the remaining chunks were cancelled"
        )
        now = self._store.clock.now()
        written = self._store.change_job(
            job.job_id,
            lambda fresh: (
                None
                if fresh.ended
                else {
                    "state": "failed",
                    "error": reason,
                    "cancelled_on": now,
                    "cancel_reason": reason,
                }
            ),
            budget,
        )
        self._failed(written or self._store.get_job(job.job_id, budget))
        return True


def within_tolerance(poisoned: int, tolerated: int | float | None, total: int) -> bool:
    """Whether a job with ``poisoned`` of ``total`` chunks poisoned may still complete:
    ``tolerated`` a count, a fraction of the chunks, or None (none tolerated)."""
    if tolerated is None:
        return poisoned == 0
    if isinstance(tolerated, float):
        return poisoned <= tolerated * total
    return poisoned <= tolerated


def _check(
    store: CheckpointStore,
    queues: QueueStore,
    job_id: str,
    total: int,
    budget: Budget,
    shard: int | None,
    shard_counts: dict[str, int] | None,
    tolerated: int | float | None,
) -> None:
    if shard is not None:
        counts = shard_counts or store.shard_counts(job_id, shard, budget)
        if counts.get("done", 0) + counts.get("poisoned", 0) < layout.chunks_in_shard(total, shard):
            return
    ended = _ended_counts(store, job_id, total, budget, first=shard or 0)
    if ended is None:
        return
    job = store.get_job(job_id, budget)
    if job.state != "running":
        return  # finalizing or done already; cancelled or failed: no finalize
    if not within_tolerance(ended["poisoned"], tolerated, total):
        set_job(
            store,
            job_id,
            budget,
            only_from=("running",),
            state="failed",
            error=f"{ended['poisoned']} chunk(s) poisoned; see `runner poison list {job_id}`",
        )
        return
    # Send before recording "finalizing": a crash in between leaves a message that
    # finishes the job; the other order could leave a job waiting for nothing.
    # A send applied with its answer lost, then sent again, only duplicates the message:
    # the second delivery finds finalize running or done and is deleted unrun.
    body = messages.encode(
        messages.TaskMessage("final", job.job_type, job_id, incarnation=job.incarnation)
    )
    # On the job's first queue, where its planning message went: one message per job.
    budget.call(lambda: queues.send(job.queues[0], body, ttl_seconds=NEVER_EXPIRES))
    set_job(store, job_id, budget, only_from=("running",), state="finalizing")


def _ended_counts(
    store: CheckpointStore, job_id: str, total: int, budget: Budget, first: int
) -> dict[str, int] | None:
    """Done and poisoned chunks summed over the shards if every shard has ended, else None.

    Reads fresh counters (a cached one may be behind other workers' progress), starting
    after ``first`` so the shards finishing last are looked at first, and stops at the
    first shard still running.
    """
    summed = {"done": 0, "poisoned": 0}
    for step in range(layout.SHARDS):
        shard = (first + 1 + step) % layout.SHARDS
        expected = layout.chunks_in_shard(total, shard)
        if not expected:
            continue  # a small job leaves shards empty: nothing to read there
        counts = store.shard_counts(job_id, shard, budget)
        ended = counts.get("done", 0) + counts.get("poisoned", 0)
        if ended < expected:
            return None
        for name in summed:
            summed[name] += counts.get(name, 0)
    return summed
