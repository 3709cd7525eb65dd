"""``ChunkEnvironment``: one chunk's ``process`` run as a worker would, without a store.

It is the chunk's :class:`~jobs.chunk.ChunkControl` (after temporalio's
``ActivityEnvironment``), with the runner's semantics — checkpoints coalesced to the
newest and written at most once per checkpoint interval on an injected
:class:`~checkpoint.clock.FakeClock`, a lost lease raising
:class:`~checkpoint.errors.LeaseLost` at the next checkpoint without writing anything, and
a stopping worker flushing the newest state before :class:`~jobs.errors.ChunkStopped`.
Values travel through msgpack as they do in production, so a state, payload or result
that a worker could not store fails here too. Import it from :mod:`jobs.testing`.

Example, with the ``MigrateOrders`` job of the design brief (one checkpoint per row)::

    import pytest
    from checkpoint.errors import LeaseLost
    from jobs.testing import ChunkEnvironment

    def test_migrate_orders_resumes_after_a_lost_lease():
        env = ChunkEnvironment(MigrateOrders, params={"rows": 30},
                               payload={"first": 0, "last": 30},
                               checkpoint_interval_seconds=0)
        env.lose_lease_after(10)
        with pytest.raises(LeaseLost):
            env.run()
        assert env.durable_state == 10       # what the next owner resumes from

        again = env.next_attempt()           # attempt 2, from that state
        again.run()
        assert again.checkpoints[0] == 11    # only row 10 (its checkpoint refused) redone
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from checkpoint.clock import FakeClock
from checkpoint.codec import round_trip
from checkpoint.errors import LeaseLost
from checkpoint.records import Progress
from jobs.chunk import Chunk, Takeover
from jobs.job import ChunkedJob, resource_rate
from jobs.job_steps import run_finalize, run_split
from jobs.simulated_worker import SimulatedCheckpoints, SimulatedWorker

_UNSET: Any = object()


class ChunkEnvironment:
    """Runs a job's ``process`` on one chunk as a worker would, and records its checkpoints.

    Args:
        job: the ChunkedJob subclass (a fresh instance runs each attempt, as on a
            worker) or an instance of it.
        params: the job's parameters (``chunk.params``).
        payload: what ``split`` yielded for this chunk (``chunk.payload``).
        state: the last durable state of an earlier attempt (``chunk.state``), or None.
        attempt: ``chunk.attempt``, 1 for the first delivery.
        job_id: ``chunk.job_id``.
        index: ``chunk.index``.
        checkpoint_interval_seconds: least time between two durable writes; the job
            class's ``checkpoint_interval_seconds`` if None.
        clock: the clock the interval is measured on; a new FakeClock if None. Advance
            it from ``process`` (or from ``on_checkpoint``) to let time pass.
        on_checkpoint: called with the state of each checkpoint the chunk gets past;
            it may call :meth:`lose_lease`, :meth:`stop` or ``clock.advance``, which take
            effect from the chunk's next checkpoint on.
        published: what earlier attempts published (``chunk.publish``), by name.
        taken_over: ``chunk.taken_over``: the attempt this one takes over from.

    Attributes:
        checkpoints: every state the chunk offered, in order (as msgpack copies taken
            when offered), including one that raised.
        progress: how far the chunk said it got at each of those checkpoints
            (``progress=``, as a :class:`~checkpoint.records.Progress`; None where it
            did not say), in the same order.
        durable: every state written to the (simulated) checkpoint store, in order, as
            the worker would write it: at most once per interval, then the newest one
            when the chunk succeeds, fails or is stopped; never after the lease is lost.
            (A real worker may also write when it renews the lease, so it is at least
            this durable.)
        durable_progress: the progress written with the last durable state (the
            newest said up to it; None if none was said), as ``runner status`` shows it.
        result: what ``process`` returned, once :meth:`run` has succeeded.
        clock: the environment's FakeClock.
        claim: ``chunk.claim``: a fresh token for each attempt.
        published: every publication made so far, by name (a fenced write each:
            refused once the lease is lost), carried into :meth:`next_attempt`.
        spark_session: the Spark Connect session the attempt recorded, if any.
    """

    def __init__(
        self,
        job: type[ChunkedJob] | ChunkedJob,
        *,
        params: Any = None,
        payload: Any = None,
        state: Any = None,
        attempt: int = 1,
        job_id: str = "test-job",
        index: int = 0,
        checkpoint_interval_seconds: float | None = None,
        clock: FakeClock | None = None,
        on_checkpoint: Callable[[Any], None] | None = None,
        published: Mapping[str, Any] | None = None,
        taken_over: Takeover | None = None,
    ):
        self.job = job
        self.claim = secrets.token_hex(6)
        self.taken_over = taken_over
        self.published_outputs: dict[str, Any] = dict(
            round_trip(dict(published or {}), "published outputs")
        )
        self.spark_session: str | None = None
        self.job_class: type[ChunkedJob] = job if isinstance(job, type) else type(job)
        self.params = round_trip(params, "params")
        self.payload = round_trip(payload, "chunk payload")
        self.state = round_trip(state, "chunk state")
        self.attempt = attempt
        self.job_id = job_id
        self.index = index
        self.interval_seconds = (
            self.job_class.checkpoint_interval_seconds
            if checkpoint_interval_seconds is None
            else checkpoint_interval_seconds
        )
        self.clock = clock if clock is not None else FakeClock()
        self.on_checkpoint = on_checkpoint
        self.checkpoints: list[Any] = []
        self.progress: list[Progress | None] = []
        #: ``(name, units)`` of each ``chunk.limit`` call, in order.
        self.limits_taken: list[tuple[str, int]] = []
        self.result: Any = None
        self._lock = threading.RLock()
        #: The lease, the stop and the checkpoint writes (:mod:`jobs.simulated_worker`).
        self._worker = SimulatedWorker(self.clock, self.job_class, self._lock)
        self._writes = SimulatedCheckpoints(self.clock, self.interval_seconds, self._worker)
        self.durable = self._writes.durable
        self._offered: Any = None
        self._ran = False

    # ----------------------------------------------------------------- simulating

    def lose_lease(self, reason: str = "lease lost (simulated by the test)") -> None:
        """Lose the chunk's lease now, as when a renewal is refused or another worker
        claimed the chunk: its next checkpoint raises LeaseLost and writes nothing."""
        self._worker.lose_lease(reason)

    def lose_lease_after(self, checkpoints: int) -> None:
        """Lose the lease once the chunk got past ``checkpoints`` checkpoints (0: before
        it starts); the next one raises LeaseLost."""
        self._worker.lose_lease_after(checkpoints)

    def stop(self) -> None:
        """Stop the worker now (SIGTERM): the chunk's next checkpoint flushes the newest
        state and raises ChunkStopped."""
        self._worker.stop()

    def stop_after(self, checkpoints: int) -> None:
        """Stop the worker once the chunk got past ``checkpoints`` checkpoints (0: before
        it starts); the next one flushes and raises ChunkStopped."""
        self._worker.stop_after(checkpoints)

    @property
    def lease_lost(self) -> bool:
        """True once the lease is lost (simulated, or past ``max_chunk_seconds``)."""
        self._worker.check_deadline()
        return self._worker.lost

    # ----------------------------------------------------------------- ChunkControl

    def offer(self, state: Any, progress: Progress | None = None) -> None:
        """Take the newest state (and progress: None keeps the last said); write them if
        an interval passed since the last write.

        Part of :class:`~jobs.chunk.ChunkControl`, called by ``chunk.checkpoint``.

        Raises:
            CodecError: ``state`` is not msgpack-able (a worker could not store it).
            LeaseLost: a write was due but the lease is lost.
        """
        snapshot = round_trip(state, "checkpoint state")
        with self._lock:
            self.checkpoints.append(snapshot)
            self.progress.append(progress)
            self._offered = snapshot
            self._writes.offer(snapshot, progress)

    def raise_if_stopped(self) -> None:
        """Raise LeaseLost (writing nothing) if the lease is lost; flush the newest state
        and raise ChunkStopped if the worker is stopping; return otherwise.

        Part of :class:`~jobs.chunk.ChunkControl`, called by ``chunk.checkpoint``.
        """
        self._worker.raise_if_stopping(self._flush)
        with self._lock:
            offered = self._offered
        self._worker.passed_checkpoint(offered, self.on_checkpoint)

    @property
    def stopping(self) -> bool:
        """True once the chunk should stop at its next checkpoint (lease lost, worker
        stopping). Part of :class:`~jobs.chunk.ChunkControl`."""
        self._worker.check_deadline()
        return self._worker.stopping or self._worker.lost

    def publish(self, name: str, record: Mapping[str, Any]) -> None:
        """Publish output ``name`` as a worker does: a fenced write made at once (with
        the newest state), refused with LeaseLost once the lease is lost.

        Part of :class:`~jobs.chunk.ChunkControl`, called by ``chunk.publish``."""
        snapshot = round_trip(dict(record), "published output")
        with self._lock:
            self._worker.check_deadline()
            if self._worker.lost:
                raise LeaseLost(self._worker.lost_reason)
            self._flush()
            self.published_outputs[name] = snapshot

    def published(self) -> dict[str, Any]:
        """Part of :class:`~jobs.chunk.ChunkControl`: every publication so far."""
        with self._lock:
            return dict(self.published_outputs)

    def limit(self, name: str, units: int) -> None:
        """Part of :class:`~jobs.chunk.ChunkControl`: record ``(name, units)`` in
        :attr:`limits_taken` (nothing is taken, nothing waits); stop as a checkpoint."""
        resource_rate(self.job_class, name)
        self._worker.raise_if_stopping(self._flush)
        self.limits_taken.append((name, units))

    def record_spark_session(self, session: str) -> None:
        """Part of :class:`~jobs.chunk.ChunkControl`: a fenced write of the session."""
        with self._lock:
            if self._worker.lost:
                raise LeaseLost(self._worker.lost_reason)
            self.spark_session = session

    # ----------------------------------------------------------------- running

    def run(self) -> Any:
        """Run ``process`` on the chunk as a worker would, once; return its result.

        Returns:
            What ``process`` returned (also kept in :attr:`result`).

        Raises:
            LeaseLost: the lease was lost; nothing more was written.
            ChunkStopped: the worker stopped; the newest state was written first.
            CodecError: a state or the result is not msgpack-able.
            Exception: whatever ``process`` raised (the newest state was written first,
                as a worker does before it records the failure and retries).
        """
        if self._ran:
            raise RuntimeError("a ChunkEnvironment runs one attempt; use next_attempt()")
        self._ran = True
        chunk = Chunk(
            job_id=self.job_id,
            index=self.index,
            payload=self.payload,
            params=self.params,
            state=self.state,
            attempt=self.attempt,
            control=self,
        )
        self._worker.start()
        self._writes.claimed()
        try:
            result = self._instance().process(chunk)
            round_trip(result, "chunk result")
        except LeaseLost:
            raise
        except Exception:
            if not self._worker.lost:
                self._flush()
            raise
        if not self._worker.lost:
            self._flush()  # marked done together with the newest state
        self.result = result
        return result

    @property
    def durable_progress(self) -> Progress | None:
        """The progress written with the last durable state (see the class's docstring)."""
        return self._writes.progress_written

    @property
    def durable_state(self) -> Any:
        """The state a re-run would start from: the last durable one, else the initial."""
        with self._lock:
            return self.durable[-1] if self.durable else self.state

    def next_attempt(self) -> ChunkEnvironment:
        """The chunk's next delivery: same job, params and payload and clock, attempt + 1,
        starting from :attr:`durable_state` (as after a crash, a lost lease or a stop)."""
        return ChunkEnvironment(
            self.job,
            params=self.params,
            payload=self.payload,
            state=self.durable_state,
            attempt=self.attempt + 1,
            job_id=self.job_id,
            index=self.index,
            checkpoint_interval_seconds=self.interval_seconds,
            clock=self.clock,
            on_checkpoint=self.on_checkpoint,
            published=self.published_outputs,
            taken_over=Takeover(
                owner="test-worker", claim=self.claim, spark_session=self.spark_session
            ),
        )

    def plan(self, params: Any = _UNSET, *, check_deterministic: bool = True) -> list[Any]:
        """Run ``split`` as planning does and return the chunk payloads it yields, as
        ``process`` will see them (:func:`~jobs.job_steps.run_split`: ``split`` is run
        twice to check that it is deterministic unless ``check_deterministic`` is False).

        ``params``: the job's parameters; this environment's ``params`` if not given.
        """
        params = self.params if params is _UNSET else round_trip(params, "params")
        return run_split(self._instance, params, check_deterministic)

    def finalize(
        self, params: Any = _UNSET, results: Sequence[Any] | Mapping[int, Any] = ()
    ) -> Any:
        """Run ``finalize`` with a summary of a job whose chunks are all done, with
        ``results`` (a sequence, index = position, or a mapping from index to result),
        and return what it returned (:func:`~jobs.job_steps.run_finalize`).

        ``params``: the job's parameters; this environment's ``params`` if not given.
        """
        params = self.params if params is _UNSET else round_trip(params, "params")
        # The outputs this environment's attempts published, as chunk ``index``'s.
        outputs = [(self.index, self.published())] if self.published_outputs else []
        return run_finalize(self._instance, self.job_id, params, results, outputs)

    # ----------------------------------------------------------------- internals

    def _instance(self) -> ChunkedJob:
        return self.job() if isinstance(self.job, type) else self.job

    def _flush(self) -> None:
        with self._lock:
            self._writes.flush()
