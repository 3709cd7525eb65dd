"""Ending chunks in groups: done marks written a shard at a time, then messages deleted.

A slot that finished a chunk hands it here and goes on to its next message. The
finisher's thread takes everything handed over since its last pass and, per job and
shard, writes the chunks' done marks with the shard's counter in one atomic batch
(:meth:`~checkpoint.store.CheckpointStore.count_chunks`), sees whether the job is
complete, and only then deletes the messages, in one call per queue. That is the order
:func:`runner.worker.tasks.outcome.succeeded` keeps for the other tasks (done before delete,
completion checked before delete), so a crash at any point is as harmless as it was
chunk by chunk; it only makes one write and one delete serve many chunks. A group is
whatever finished while the previous one was being written, plus what goes on
finishing: it waits for the next chunk up to :data:`LINGER_SECONDS` at a time, for at
most :data:`GROUP_WAIT_SECONDS` in all (:func:`group_wait`).

Until deleted, the messages stay leased (the keeper renews them). At most
:data:`MAX_PENDING` chunks wait here; a slot handing over more waits, so a slow store
slows the worker down instead of piling up finished chunks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from checkpoint import layout, retries
from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, StorageError
from checkpoint.records import TaskRecord
from checkpoint.retries import Budget
from checkpoint.store import CheckpointStore
from runner.worker.hooks import Hooks
from runner.worker.leases.lease import Lease, LeaseKeeper
from runner.worker.observing.logs import in_context
from runner.worker.tasks.job_completion import Completion, set_job

log = logging.getLogger(__name__)

#: A group this large is written at once; a smaller one waits for more while chunks go
#: on finishing (each within LINGER_SECONDS of the one before, GROUP_WAIT_SECONDS at
#: most), so that quick chunks share their writes: a group costs about as much as a
#: chunk to write. With a fixed 5 ms, a trivial chunk on Azurite (10-30 ms) found a
#: group of one or two: 0.13-0.2 batches per chunk. A chunk of a second or more still
#: waits LINGER_SECONDS only (the lull after it writes it); no quick chunk waits more
#: than GROUP_WAIT_SECONDS for its done mark.
GROUP_CHUNKS = 2 * layout.SHARD_BLOCK
LINGER_SECONDS = 0.05
GROUP_WAIT_SECONDS = 1.0
#: Finished chunks waiting to be written before a slot handing over another waits.
MAX_PENDING = 2 * GROUP_CHUNKS
#: A block's chunks wait for the rest of their block (one batch a block: a block's
#: SHARD_BLOCK consecutive chunks share a shard) until this many chunks of later blocks
#: of their job wait too: chunks end roughly in order, but not exactly (Azure's
#: send_many sends a page's messages concurrently, so they come a few places apart).
#: Groups cut by time or size alone straddled blocks: 0.062-0.067 batches per trivial
#: chunk on Azurite, where a block a batch is 1/32 (0.031).
PASSED_AFTER = 8


def group_wait(size: int, now: float, opened_at: float, last_added_at: float) -> float | None:
    """Seconds a group of ``size`` chunks, its oldest handed over at ``opened_at`` and
    its newest at ``last_added_at``, waits for more now (monotonic times); None: write
    (:func:`ripe`) now."""
    if size >= GROUP_CHUNKS:
        return None
    left = min(last_added_at + LINGER_SECONDS, opened_at + GROUP_WAIT_SECONDS) - now
    return left if left > 0 else None


def ripe(pending: list[Ended], now: float) -> tuple[list[Ended], list[Ended]]:
    """Of a group due by size or age, the chunks to write now and those that wait on:
    a chunk is written once its block is passed (PASSED_AFTER chunks of its job's later
    blocks wait) or once it has waited GROUP_WAIT_SECONDS; if none is, all are."""
    blocks = Counter(map(_block_of, pending))
    later = {
        (job_id, block): sum(
            n for (job, other), n in blocks.items() if job == job_id and other > block
        )
        for job_id, block in blocks
    }
    take: list[Ended] = []
    keep: list[Ended] = []
    for ended in pending:
        due = later[_block_of(ended)] >= PASSED_AFTER
        (take if due or now - ended.added_at >= GROUP_WAIT_SECONDS else keep).append(ended)
    return (take, keep) if take else (pending, [])


def _block_of(ended: Ended) -> tuple[str, int]:
    """The job and block (checkpoint.layout's SHARD_BLOCK consecutive chunks) of a chunk."""
    return ended.task.job_id, ended.task.index // layout.SHARD_BLOCK


@dataclass
class Ended:
    """A chunk that finished: its record as last written, its final properties
    (:meth:`~checkpoint.store.CheckpointStore.final_changes`), its message's lease, and
    for the hooks its job type and how long its attempt ran."""

    task: TaskRecord
    final: dict[str, Any]
    lease: Lease
    job_type: str = ""
    ran_seconds: float = 0.0
    #: When it was handed to the finisher's thread (monotonic).
    added_at: float = 0.0


class Finisher:
    """Marks finished chunks done and deletes their messages, on its own thread once
    started (before that, and after :meth:`stop`, at once in the caller's thread)."""

    def __init__(
        self,
        store: CheckpointStore,
        keeper: LeaseKeeper,
        completion: Completion,
        clock: Clock,
        hooks: Hooks | None = None,
    ):
        self._store = store
        self._hooks = hooks or Hooks()
        self._keeper = keeper
        self._completion = completion
        self._clock = clock
        self._pending: list[Ended] = []
        self._changed = threading.Condition()
        self._busy = False
        self._stopping = False
        #: The thread takes what is handed over: set when it starts, cleared (under
        #: ``_changed``) as it decides to exit, so nothing is queued after that decision.
        self._taking = False
        #: When the newest chunk was handed over (monotonic).
        self._last_added = 0.0
        self._thread: threading.Thread | None = None

    def add(self, ended: Ended) -> None:
        """Hand over a finished chunk; returns once it is queued (or written)."""
        with self._changed:
            # Not while the thread is merely alive: past its decision to exit it is still
            # alive for a moment, and a chunk queued then would never be written.
            while len(self._pending) >= MAX_PENDING and self._taking:
                self._changed.wait(0.5)
            if self._taking:
                self._last_added = ended.added_at = time.monotonic()
                self._pending.append(ended)
                if len(self._pending) in (1, GROUP_CHUNKS):
                    self._changed.notify_all()  # worth waking it for
                return
        try:
            self.finish([ended])
        except Exception:
            # Handed over, so nobody else drops its lease: renewed for ever otherwise.
            self._keeper.drop(ended.lease)
            raise

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=in_context(self._run), name="finisher", daemon=True
            )
            with self._changed:
                self._taking = not self._stopping
            self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Write what is pending, then stop the thread. Returns False if that took longer
        than ``timeout`` seconds (what is left lapses and is redone)."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def idle(self) -> bool:
        """Nothing pending or being written."""
        with self._changed:
            return not self._pending and not self._busy

    def _run(self) -> None:
        try:
            self._take_groups()
        finally:
            with self._changed:  # whatever ended the thread, add() finishes inline now
                self._taking = False
                self._changed.notify_all()

    def _take_groups(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._stopping:
                    self._changed.wait()
                if not self._pending:
                    self._taking = False  # decided under the lock add() queues under
                    return
                while not self._stopping:
                    opened_at = min(ended.added_at for ended in self._pending)
                    now = time.monotonic()
                    left = group_wait(len(self._pending), now, opened_at, self._last_added)
                    if left is None:
                        break
                    self._changed.wait(left)
                now = time.monotonic()
                if self._stopping or now >= self._last_added + LINGER_SECONDS:
                    group, self._pending = self._pending, []  # a lull, or a stop: all
                else:
                    group, self._pending = ripe(self._pending, now)
                self._busy = True
                self._changed.notify_all()  # room for slots waiting to hand over
            try:
                self.finish(group)
            except Exception:  # the thread must outlive any one failure; leases lapse
                log.exception("finishing %d chunk(s) failed; they will be retried", len(group))
                for ended in group:
                    self._keeper.drop(ended.lease)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()

    def finish(self, group: list[Ended]) -> None:
        """Mark ``group`` done (a batch per job and shard), check completion, delete."""
        shards: dict[tuple[str, int], list[Ended]] = {}
        for ended in group:
            key = (ended.task.job_id, layout.shard_of(ended.task.index))
            shards.setdefault(key, []).append(ended)
        to_delete: list[Lease] = []
        for (job_id, shard), chunks in shards.items():
            to_delete.extend(self._mark_done(job_id, shard, chunks))
        if to_delete:
            self._keeper.delete_many(to_delete)

    def _mark_done(self, job_id: str, shard: int, chunks: list[Ended]) -> list[Lease]:
        """Write one shard's done marks; return the leases whose messages may go."""
        # Retried in place up to one lease past the first of the group to run out. A
        # lease lapses while its chunk waits here when a renewal's answer was lost (its
        # receipt with it); the marks are conditional on each record's ETag, so a chunk
        # someone took over meanwhile fails its mark, fenced, and one nobody took is
        # marked done rather than redone (the worker that receives its message again
        # finds it done). Past that, the store's trouble has outlasted two leases.
        budget = Budget(
            retries.DONE_MARK,
            self._clock,
            deadline=lambda: min(c.lease.visible_at + c.lease.lease_seconds for c in chunks),
        )
        try:
            written, counts = self._store.count_chunks(
                [(c.task, c.final) for c in chunks], "done", budget
            )
        except BadRecord as bad:
            # A garbled shard counter: no chunk of the shard can be counted again, so
            # the job can never complete. Say so on the job; the chunks are poisoned
            # once their attempts are spent (runner.worker.tasks.claim).
            log.error("marking %d chunk(s) of %s done failed: %s", len(chunks), job_id, bad)
            try:
                set_job(self._store, job_id, budget, state="failed", error=str(bad))
            except StorageError as error:
                log.warning("recording the failure of %s failed: %s", job_id, error)
            for ended in chunks:
                self._keeper.drop(ended.lease)
            return []
        except StorageError as error:
            log.warning(
                "marking %d chunk(s) of %s done failed; they will be redone: %s",
                len(chunks),
                job_id,
                error,
            )
            for ended in chunks:
                self._keeper.drop(ended.lease)
            return []
        done = []
        for ended, result in zip(chunks, written, strict=True):
            if isinstance(result, StorageError):
                reason = f"chunk record changed before it was marked done ({result})"
                log.warning(
                    "chunk %s of %s finished but fenced: %s", ended.task.index, job_id, reason
                )
                ended.lease.lose(reason)
                self._keeper.drop(ended.lease)
            else:
                done.append(ended.lease)
                self._hooks.succeeded(ended.job_type, ended.task.kind, ended.ran_seconds)
        if not done:
            return []
        try:
            self._completion.check(job_id, budget, shard, counts)
        except StorageError as error:
            # Kept, not deleted: the messages come back, are found done, and the check
            # is made again then (runner.worker.tasks.task_kinds.ChunkKind.after_done).
            log.warning("checking whether %s is complete failed: %s", job_id, error)
            for lease in done:
                self._keeper.drop(lease)
            return []
        return done
