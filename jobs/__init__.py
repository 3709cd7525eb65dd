"""The user's side of chunkrunner: write a ChunkedJob, submit it, let workers run it.

from jobs import ChunkedJob, Chunk

class MigrateOrders(ChunkedJob):
    lease_seconds = 30
    def split(self, params): ...
    def process(self, chunk: Chunk): ...
"""

from jobs.backoff import Backoff, compute_backoff
from jobs.chunk import Chunk
from jobs.errors import (
    AlreadyExists,
    BadMessage,
    BatchFailed,
    ChunkStopped,
    CodecError,
    ConfigurationError,
    Conflict,
    InvalidRequest,
    JobDefinitionError,
    JobNotFound,
    LeaseLost,
    MetricsUnavailable,
    NotFound,
    RunnerError,
    StorageError,
    Throttled,
    TooLarge,
    Unavailable,
)
from jobs.job import ChunkedJob
from jobs.submit import submit
from jobs.summary import JobSummary

__all__ = [
    "AlreadyExists",
    "Backoff",
    "BadMessage",
    "BatchFailed",
    "Chunk",
    "ChunkStopped",
    "ChunkedJob",
    "CodecError",
    "ConfigurationError",
    "Conflict",
    "InvalidRequest",
    "JobDefinitionError",
    "JobNotFound",
    "JobSummary",
    "LeaseLost",
    "MetricsUnavailable",
    "NotFound",
    "RunnerError",
    "StorageError",
    "Throttled",
    "TooLarge",
    "Unavailable",
    "compute_backoff",
    "submit",
]
