"""The worker's Prometheus metrics: a :class:`~runner.worker.observing.recorder.Recorder` and a
:class:`~checkpoint.metering.RequestMeter` keeping them with prometheus_client.

docs/metrics.md lists every metric. Labels are job types (``module:Class``), storage
operations and outcomes: never a key, a payload or a connection string, nor a job's or
a pipeline's id (one made per run: a time series each, without bound; a pipeline's
progress is read from the store, ``runner status --pipeline ID --json``).

In a worker process of ``runner start --workers N`` prometheus_client runs in its
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set by the parent before the process
was spawned, :mod:`runner.worker.observing.metrics_server`): the values go to files the parent
reads and serves as one endpoint, and the registry given here only owns the metrics'
names. With one worker the registry given is the one served.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from checkpoint.metering import Outcome
from checkpoint.records import TaskKind
from runner.worker.leases.sizing import BUCKETS_SECONDS
from runner.worker.tasks.task_kinds import KINDS

PREFIX = "chunkrunner"
#: A chunk takes from a fraction of a second to an hour or so.
CHUNK_BUCKETS_SECONDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
#: A storage request, or a checkpoint write (one or more requests): milliseconds when
#: the store is well, seconds when it retries.
REQUEST_BUCKETS_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
#: A renewal's lateness: the adaptive lease's own buckets (prometheus_client adds +Inf).
LATENESS_BUCKETS_SECONDS = BUCKETS_SECONDS[:-1]


class PrometheusRecorder:
    """The metrics of one worker process, in ``registry`` (one of its own per process:
    prometheus_client refuses a name registered twice). Chunks only: planning and
    finalize run once a job (see :mod:`runner.worker.observing.recorder`)."""

    def __init__(self, registry: CollectorRegistry):
        def counter(name: str, what: str, *labels: str) -> Counter:
            return Counter(f"{PREFIX}_{name}", what, labels, registry=registry)

        by_type = ("job_type",)
        self.started = counter("chunks_started", "Chunk attempts started.", *by_type)
        self.resumed = counter(
            "chunks_resumed",
            "Chunk attempts started from an earlier attempt's checkpoint.",
            *by_type,
        )
        self.done = counter("chunks_done", "Chunks marked done.", *by_type)
        self.failed = counter(
            "chunks_failed", "Chunk attempts failed, to be retried after a backoff.", *by_type
        )
        self.poisoned = counter("chunks_poisoned", "Chunks marked poisoned.", *by_type)
        self.handed_back = counter(
            "chunks_handed_back", "Chunk attempts handed back unfailed.", *by_type
        )
        self.renewals = counter("lease_renewals", "Leases renewed (UpdateMessage).", *by_type)
        self.leases_lost = counter("leases_lost", "Leases lost.", *by_type)
        self.lateness = Histogram(
            f"{PREFIX}_lease_renewal_lateness_seconds",
            "How late a lease renewal's answer came after it was due.",
            by_type,
            registry=registry,
            buckets=LATENESS_BUCKETS_SECONDS,
        )
        # The longest any live worker process gives: they share what they learn, and
        # the longest is the one a crashed worker's chunk waits out.
        self.lease_seconds = Gauge(
            f"{PREFIX}_lease_seconds",
            "The lease a message of the type gets now (fixed, or sized by the workers).",
            by_type,
            registry=registry,
            multiprocess_mode="livemax",
        )
        #: What tells each job type's lease now, and the types it knows (one tuple: read
        #: by every thread at once, replaced whole).
        self._sized: tuple[Callable[[str], int], frozenset[str]] | None = None
        self.checkpoints = counter("checkpoint_writes", "Checkpoint writes made.", *by_type)
        self.checkpoint_failures = counter(
            "checkpoint_write_failures", "Checkpoint writes failed (the store's trouble).", *by_type
        )
        self.requests = counter(
            "storage_requests", "Storage requests by how they ended.", "operation", "outcome"
        )
        self.chunk_seconds = Histogram(
            f"{PREFIX}_chunk_duration_seconds",
            "How long the attempt of a chunk marked done ran.",
            by_type,
            registry=registry,
            buckets=CHUNK_BUCKETS_SECONDS,
        )
        self.checkpoint_seconds = Histogram(
            f"{PREFIX}_checkpoint_write_duration_seconds",
            "How long a checkpoint write took, retries included.",
            by_type,
            registry=registry,
            buckets=REQUEST_BUCKETS_SECONDS,
        )
        self.request_seconds = Histogram(
            f"{PREFIX}_storage_request_duration_seconds",
            "How long a storage request took (the SDK's own retries included).",
            ("operation",),
            registry=registry,
            buckets=REQUEST_BUCKETS_SECONDS,
        )
        self.in_flight = Gauge(
            f"{PREFIX}_chunks_in_flight",
            "Chunk attempts running now.",
            by_type,
            registry=registry,
            multiprocess_mode="livesum",
        )

    # ------------------------------------------------------------------ Recorder

    def task_started(self, job_type: str, kind: TaskKind, resumed: bool) -> None:
        if KINDS[kind].in_chunk_metrics:
            self.started.labels(job_type).inc()
            if resumed:
                self.resumed.labels(job_type).inc()
            self.in_flight.labels(job_type).inc()
        self._measure_lease(job_type)

    def task_left(self, job_type: str, kind: TaskKind) -> None:
        if KINDS[kind].in_chunk_metrics:
            self.in_flight.labels(job_type).dec()

    def chunk_done(self, job_type: str, seconds: float) -> None:
        self.done.labels(job_type).inc()
        self.chunk_seconds.labels(job_type).observe(seconds)

    def task_failed(self, job_type: str, kind: TaskKind) -> None:
        if KINDS[kind].in_chunk_metrics:
            self.failed.labels(job_type).inc()

    def task_poisoned(self, job_type: str, kind: TaskKind) -> None:
        if KINDS[kind].in_chunk_metrics:
            self.poisoned.labels(job_type).inc()

    def task_handed_back(self, job_type: str, kind: TaskKind) -> None:
        if KINDS[kind].in_chunk_metrics:
            self.handed_back.labels(job_type).inc()

    def lease_renewed(self, job_type: str, late_seconds: float) -> None:
        self.renewals.labels(job_type).inc()
        self.lateness.labels(job_type).observe(max(0.0, late_seconds))
        self._measure_lease(job_type)

    def lease_lost(self, job_type: str) -> None:
        self.leases_lost.labels(job_type).inc()
        self._measure_lease(job_type)

    def leases_sized(self, job_types: Iterable[str], lease_seconds: Callable[[str], int]) -> None:
        self._sized = lease_seconds, frozenset(job_types)
        for job_type in sorted(self._sized[1]):
            self._measure_lease(job_type)

    def _measure_lease(self, job_type: str) -> None:
        """The gauge set to ``job_type``'s lease now: as the worker is assembled, then at
        each task started and each lease renewed or lost of the type (where the keeper
        takes up a new length). Set, not read by a callback at scrape time: a worker
        process of ``--workers N`` only reaches the served values through what it sets."""
        sized = self._sized
        if sized is not None and job_type in sized[1]:
            self.lease_seconds.labels(job_type).set(sized[0](job_type))

    def checkpoint_written(self, job_type: str, seconds: float) -> None:
        self.checkpoints.labels(job_type).inc()
        self.checkpoint_seconds.labels(job_type).observe(seconds)

    def checkpoint_failed(self, job_type: str, seconds: float) -> None:
        self.checkpoint_failures.labels(job_type).inc()
        self.checkpoint_seconds.labels(job_type).observe(seconds)

    # ------------------------------------------------------------------ RequestMeter

    def request(self, operation: str, outcome: Outcome, seconds: float | None) -> None:
        self.requests.labels(operation, outcome).inc()
        if seconds is not None:
            self.request_seconds.labels(operation).observe(seconds)
