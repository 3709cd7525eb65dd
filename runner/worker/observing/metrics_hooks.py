"""Metrics as a concern on the hooks of a message's life: each point told to a
:class:`~runner.worker.observing.recorder.Recorder`
(:data:`~runner.worker.observing.recorder.SILENT` when metrics are off,
:class:`runner.worker.observing.metrics.PrometheusRecorder` when on).

A lease's renewals and loss are the lease keeper's, not a point of the path: the keeper
tells the recorder of them itself (:class:`runner.worker.leases.lease.Lease`).
"""

from __future__ import annotations

from checkpoint.records import JobRecord, TaskKind
from runner.worker.hooks import Hooks, Running
from runner.worker.observing.recorder import Recorder
from runner.worker.tasks.task_kinds import KINDS


class Metrics(Hooks):
    """Tells ``recorder`` what happens to the tasks of a worker."""

    def __init__(self, recorder: Recorder):
        self.recorder = recorder

    def started(self, job: JobRecord, running: Running, resumed: bool) -> None:
        self.recorder.task_started(job.job_type, running.task.kind, resumed)

    def checkpointed(self, job_type: str, seconds: float, written: bool) -> None:
        if written:
            self.recorder.checkpoint_written(job_type, seconds)
        else:
            self.recorder.checkpoint_failed(job_type, seconds)

    def succeeded(self, job_type: str, kind: TaskKind, seconds: float) -> None:
        # The recorder's done events are the chunks' (their rate and durations).
        if KINDS[kind].in_chunk_metrics:
            self.recorder.chunk_done(job_type, seconds)

    def failed(self, job_type: str, kind: TaskKind) -> None:
        self.recorder.task_failed(job_type, kind)

    def handed_back(self, job_type: str, kind: TaskKind) -> None:
        self.recorder.task_handed_back(job_type, kind)

    def poisoned(self, job_type: str, kind: TaskKind) -> None:
        self.recorder.task_poisoned(job_type, kind)

    def left(self, job: JobRecord, running: Running) -> None:
        self.recorder.task_left(job.job_type, running.task.kind)
