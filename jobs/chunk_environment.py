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
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from checkpoint import codec
from checkpoint.clock import FakeClock
from checkpoint.errors import LeaseLost
from checkpoint.records import Progress
from jobs.chunk import Chunk, Takeover
from jobs.errors import ChunkStopped
from jobs.job import ChunkedJob
from jobs.summary import JobSummary

_UNSET: Any = object()
_NOTHING: Any = object()


def round_trip(value: Any, what: str) -> Any:
    """``value`` after a msgpack round trip: what a worker would read back.

    Raises:
        CodecError: ``value`` is not msgpack-able.
    """
    return codec.decode(codec.encode(value, what), what)


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
        self.durable: list[Any] = []
        self.durable_progress: Progress | None = None
        self._newest_progress: Progress | None = None
        self.result: Any = None
        self._lock = threading.RLock()
        self._lost = threading.Event()
        self._lost_reason = ""
        self._stopping = threading.Event()
        self._newest: Any = _NOTHING
        self._offered: Any = None
        self._passed = 0
        self._lose_after: int | None = None
        self._stop_after: int | None = None
        self._started_at = self._written_at = self.clock.monotonic()
        self._ran = False

    # ----------------------------------------------------------------- simulating

    def lose_lease(self, reason: str = "lease lost (simulated by the test)") -> None:
        """Lose the chunk's lease now, as when a renewal is refused or another worker
        claimed the chunk: its next checkpoint raises LeaseLost and writes nothing."""
        with self._lock:
            if not self._lost.is_set():
                self._lost_reason = reason
                self._lost.set()

    def lose_lease_after(self, checkpoints: int) -> None:
        """Lose the lease once the chunk got past ``checkpoints`` checkpoints (0: before
        it starts); the next one raises LeaseLost."""
        self._lose_after = checkpoints
        self._apply_schedule()

    def stop(self) -> None:
        """Stop the worker now (SIGTERM): the chunk's next checkpoint flushes the newest
        state and raises ChunkStopped."""
        self._stopping.set()

    def stop_after(self, checkpoints: int) -> None:
        """Stop the worker once the chunk got past ``checkpoints`` checkpoints (0: before
        it starts); the next one flushes and raises ChunkStopped."""
        self._stop_after = checkpoints
        self._apply_schedule()

    @property
    def lease_lost(self) -> bool:
        """True once the lease is lost (simulated, or past ``max_chunk_seconds``)."""
        self._check_deadline()
        return self._lost.is_set()

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
            if progress is not None:
                self._newest_progress = progress
            self._offered = snapshot
            self._newest = snapshot
            self._check_deadline()
            if self.clock.monotonic() - self._written_at >= self.interval_seconds:
                self._write_locked()

    def raise_if_stopped(self) -> None:
        """Raise LeaseLost (writing nothing) if the lease is lost; flush the newest state
        and raise ChunkStopped if the worker is stopping; return otherwise.

        Part of :class:`~jobs.chunk.ChunkControl`, called by ``chunk.checkpoint``.
        """
        self._check_deadline()
        if self._lost.is_set():
            # Not flushed: the chunk may be someone else's now.
            raise LeaseLost(self._lost_reason)
        if self._stopping.is_set():
            self._flush()
            raise ChunkStopped("worker is stopping; progress saved, chunk released")
        with self._lock:
            self._passed += 1
            offered = self._offered
        if self.on_checkpoint is not None:
            self.on_checkpoint(offered)
        self._apply_schedule()

    @property
    def stopping(self) -> bool:
        """True once the chunk should stop at its next checkpoint (lease lost, worker
        stopping). Part of :class:`~jobs.chunk.ChunkControl`."""
        self._check_deadline()
        return self._stopping.is_set() or self._lost.is_set()

    def publish(self, name: str, record: Mapping[str, Any]) -> None:
        """Publish output ``name`` as a worker does: a fenced write made at once (with
        the newest state), refused with LeaseLost once the lease is lost.

        Part of :class:`~jobs.chunk.ChunkControl`, called by ``chunk.publish``."""
        snapshot = round_trip(dict(record), "published output")
        with self._lock:
            self._check_deadline()
            if self._lost.is_set():
                raise LeaseLost(self._lost_reason)
            self._flush()
            self.published_outputs[name] = snapshot

    def published(self) -> dict[str, Any]:
        """Part of :class:`~jobs.chunk.ChunkControl`: every publication so far."""
        with self._lock:
            return dict(self.published_outputs)

    def record_spark_session(self, session: str) -> None:
        """Part of :class:`~jobs.chunk.ChunkControl`: a fenced write of the session."""
        with self._lock:
            if self._lost.is_set():
                raise LeaseLost(self._lost_reason)
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
        self._started_at = self._written_at = self.clock.monotonic()  # the claim
        try:
            result = self._instance().process(chunk)
            round_trip(result, "chunk result")
        except LeaseLost:
            raise
        except Exception:
            if not self._lost.is_set():
                self._flush()
            raise
        if not self._lost.is_set():
            self._flush()  # marked done together with the newest state
        self.result = result
        return result

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
        """Run ``split`` as planning does and return the chunk payloads it yields.

        Args:
            params: the job's parameters; this environment's ``params`` if not given.
            check_deterministic: run ``split`` twice and require the same payloads, as
                resumed planning relies on (it skips the payloads already enqueued).

        Returns:
            The payloads, each as ``process`` will see it (after a msgpack round trip).

        Raises:
            CodecError: a payload is not msgpack-able; the message names its index.
            AssertionError: ``split`` yielded different payloads the second time.
        """
        params = self.params if params is _UNSET else round_trip(params, "params")
        encoded = self._split_encoded(params)
        if check_deterministic and self._split_encoded(params) != encoded:
            raise AssertionError(
                f"{self.job_class.__qualname__}.split is not deterministic: a second run "
                "yielded other payloads, so resumed planning would lose or repeat chunks"
            )
        return [codec.decode(data, "chunk payload") for data in encoded]

    def _split_encoded(self, params: Any) -> list[bytes]:
        return [
            codec.encode(payload, f"payload {index} of split")
            for index, payload in enumerate(self._instance().split(params))
        ]

    def finalize(
        self, params: Any = _UNSET, results: Sequence[Any] | Mapping[int, Any] = ()
    ) -> Any:
        """Run ``finalize`` with a summary of a job whose chunks are all done.

        Args:
            params: the job's parameters; this environment's ``params`` if not given.
            results: the chunks' results: a sequence (index = position) or a mapping
                from index to result. ``summary.total`` and ``summary.done`` are its length.

        Returns:
            What ``finalize`` returned.
        """
        params = self.params if params is _UNSET else round_trip(params, "params")
        items = results.items() if isinstance(results, Mapping) else enumerate(results)
        stored = sorted((index, round_trip(result, "chunk result")) for index, result in items)

        def read_results() -> Iterator[tuple[int, Any]]:
            return iter(stored)

        # The outputs this environment's attempts published, as chunk ``index``'s.
        outputs = [(self.index, self.published())] if self.published_outputs else []
        summary = JobSummary(
            self.job_id, len(stored), len(stored), read_results, _outputs=lambda: iter(outputs)
        )
        return self._instance().finalize(params, summary)

    # ----------------------------------------------------------------- internals

    def _instance(self) -> ChunkedJob:
        return self.job() if isinstance(self.job, type) else self.job

    def _apply_schedule(self) -> None:
        with self._lock:
            passed = self._passed
        if self._lose_after is not None and passed >= self._lose_after:
            self.lose_lease(f"lease lost after {self._lose_after} checkpoint(s) (simulated)")
        if self._stop_after is not None and passed >= self._stop_after:
            self.stop()

    def _check_deadline(self) -> None:
        # The worker's lease keeper stops renewing past max_chunk_seconds (at its next
        # renewal, so a real chunk may run a little longer than this).
        cap = self.job_class.max_chunk_seconds
        if cap is not None and self._ran and self.clock.monotonic() - self._started_at >= cap:
            self.lose_lease(f"ran past max_chunk_seconds ({cap:g} s); lease not renewed")

    def _flush(self) -> None:
        with self._lock:
            if self._newest is not _NOTHING:
                self._write_locked()

    def _write_locked(self) -> None:
        if self._lost.is_set():
            raise LeaseLost(self._lost_reason)  # a fenced write: refused, nothing written
        # Encoded now, as the worker encodes at write time (not when it was offered).
        self.durable.append(round_trip(self._newest, "checkpoint state"))
        self.durable_progress = self._newest_progress
        self._newest = _NOTHING
        self._written_at = self.clock.monotonic()
