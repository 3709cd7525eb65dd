"""The job author's side of chunkrunner: write a ChunkedJob, submit it, let workers run it.

from jobs import ChunkedJob, Chunk

class MigrateOrders(ChunkedJob):
    lease_seconds = 30
    def split(self, params): ...
    def process(self, chunk: Chunk): ...

Only what a job's code touches, and the calls that control a job (``submit``,
``Pipeline``, ``cancel``, ``pause``, ``resume``, ``delete``, ``purge``), are exported
here. The
storage layer's errors are in :mod:`checkpoint.errors` (all derive from
:class:`RunnerError`); a whole job runs in a test's own process with :mod:`jobs.testing`.
"""

from checkpoint.errors import LeaseLost, RunnerError
from jobs.backoff import Backoff
from jobs.chunk import Chunk
from jobs.errors import (
    ChunkFailed,
    ChunkStopped,
    InvalidParams,
    JobDefinitionError,
    PipelineStop,
)
from jobs.job import ChunkedJob
from jobs.manage import cancel, pause, resume
from jobs.pipeline import Pipeline
from jobs.retention import delete, purge
from jobs.submit import submit
from jobs.summary import JobSummary

__all__ = [
    "Backoff",
    "Chunk",
    "ChunkFailed",
    "ChunkStopped",
    "ChunkedJob",
    "InvalidParams",
    "JobDefinitionError",
    "JobSummary",
    "LeaseLost",
    "Pipeline",
    "PipelineStop",
    "RunnerError",
    "cancel",
    "delete",
    "pause",
    "purge",
    "resume",
    "submit",
]
