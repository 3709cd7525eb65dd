"""The errors a job's own code meets, beside those of :mod:`checkpoint.errors`.

:class:`ChunkStopped` and :class:`~checkpoint.errors.LeaseLost` (exported by :mod:`jobs`)
tell ``process`` to stop; :class:`JobDefinitionError` refuses a malformed job class.
"""

from __future__ import annotations

from checkpoint.errors import JobNotFound, RunnerError


class ChunkStopped(RunnerError):
    """Raised by :meth:`Chunk.checkpoint` when the worker is stopping (SIGTERM/SIGINT).

    The newest state was flushed first; the chunk's message is released so another
    worker resumes from that state at once. User code need not catch it.
    """


class JobDefinitionError(RunnerError, TypeError):
    """A ChunkedJob subclass is malformed (bad queue name, lease, attempts, ...)."""


class MetricsUnavailable(RunnerError):
    """Spark did not deliver a finished action's observed metrics (``DataFrame.observe``)."""


class JobModuleFailed(RunnerError):
    """A job's module raised while it was imported (a SyntaxError, a NameError, a
    missing dependency); the message names its file and line."""


class ChunkFailed(RunnerError):
    """Raise from ``process`` to fail the chunk with this message.

    With ``retry=False`` the failure will not get better by trying again (a bad row, a
    missing input): the chunk is poisoned at once, its other attempts and their backoff
    not spent.
    """

    def __init__(self, message: str, *, retry: bool = True):
        super().__init__(message)
        self.retry = retry


class PipelineStop(ChunkFailed):
    """Raise from ``finalize`` to refuse to let the pipeline go on: the job ends
    ``failed`` with this message as its error, nothing of it is tried again, and the
    jobs that run after it stay blocked (a verify step that found differences keeps
    the publish step from running). Raised from ``process``, it poisons that chunk at
    once, as ``ChunkFailed(..., retry=False)`` does."""

    def __init__(self, message: str):
        super().__init__(message, retry=False)


class JobCancelled(ChunkStopped):
    """Raised by :meth:`Chunk.checkpoint` when the job was cancelled (or failed past its
    tolerated failures): progress saved, the chunk dropped without a retry."""


class JobDeleted(ChunkStopped):
    """Raised by :meth:`Chunk.checkpoint` when the job was deleted (``runner delete
    --force``) while the chunk ran: nothing is written (its records are gone), and the
    chunk's message is deleted."""


class JobPaused(ChunkStopped):
    """Raised by :meth:`Chunk.checkpoint` when the job was paused: progress saved, the
    chunk handed back (no attempt spent) to resume from there once the job resumes."""


class JobEnded(RunnerError):
    """The job has ended already (done, failed or cancelled): it cannot be cancelled,
    paused or resumed."""


class JobIdTaken(RunnerError):
    """A submit names an existing job's id but another class or other params: it would
    be dropped, so it is refused. Submitting the same job again is a no-op. ``clash``
    says what differs, without the advice for ``runner submit``."""

    def __init__(self, message: str, clash: str = ""):
        super().__init__(message)
        self.clash = clash or message


class UnknownPredecessor(JobNotFound):
    """A job named in a submit's ``after`` does not exist (``job_id``): nothing was
    recorded."""

    def __init__(self, job_id: str, message: str):
        super().__init__(message)
        self.job_id = job_id


class InvalidParams(RunnerError, ValueError):
    """A job's params refused by its class's ``validate`` when it was submitted: nothing
    was recorded. Raise it (or a ValueError) from ``validate``; ``runner submit`` shows
    its message in one line and exits 2."""
