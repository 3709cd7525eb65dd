"""The project's one error tree: its root, and everything the storage layer raises.

Everything this project raises on purpose derives from :class:`RunnerError`. Storage
backends translate their SDK or database errors into :class:`StorageError` subclasses at
their boundary, so nothing above a backend ever sees ``HttpResponseError`` or
``sqlite3.Error``; the original error is kept as ``__cause__``. The errors a job's own
code meets (:class:`~jobs.errors.ChunkStopped`, ...) are in :mod:`jobs.errors`;
:class:`LeaseLost` is here because the queues raise it, and :mod:`jobs` exports it.
"""

from __future__ import annotations


class RunnerError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigurationError(RunnerError, ValueError):
    """A setting (storage location, connection string, option) is unusable."""


class MissingExtra(ConfigurationError):
    """What a command needs is an optional extra of chunkrunner that is not installed.

    Attributes:
        extra: the extra's name (``dashboard``), what ``pip install -e '.[EXTRA]'`` adds.
    """

    def __init__(self, message: str, *, extra: str):
        super().__init__(message)
        self.extra = extra


class StorageError(RunnerError):
    """A storage operation failed.

    Attributes:
        status: the HTTP status Azure uses for this failure (404, 409, 412, ...), also set
            by the embedded backend so both backends report alike; None when not known.
        code: the Azure error code (``MessageNotFound``, ``ConditionNotMet``, ...).
    """

    default_status: int | None = None

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status if status is not None else self.default_status
        self.code = code


class InvalidRequest(StorageError):
    """The request breaks an Azure rule or service target (a bad name, key, value or size)."""

    default_status = 400


class NotFound(StorageError):
    """The queue, table, record, container or blob does not exist (404)."""

    default_status = 404


class AlreadyExists(StorageError):
    """Creating something that already exists (409), e.g. inserting an existing record."""

    default_status = 409


class Conflict(StorageError):
    """A compare-and-swap lost: the ETag given no longer matches (412)."""

    default_status = 412


class TooLarge(StorageError):
    """A message, property, entity or batch is over Azure's size target (413 / 400)."""

    default_status = 413


class Throttled(StorageError):
    """The service is busy or failed inside (503 ServerBusy, 500); retry later."""

    default_status = 503


class Unavailable(StorageError):
    """The service could not be reached at all (connection refused, DNS, timeout)."""


class StoreReadOnly(StorageError):
    """The store can be read but not written by this process (a read-only file system,
    a folder of another user's): commands that only read it work, the others get this
    (403, as Azure answers a credential that may only read)."""

    default_status = 403


class BatchFailed(StorageError):
    """One operation of an atomic batch failed, so none of the batch was applied.

    Attributes:
        index: position of the failing operation in the batch.
        reason: the translated error of that operation (a :class:`Conflict`,
            :class:`AlreadyExists`, :class:`NotFound`, ...).
    """

    def __init__(self, message: str, *, index: int, reason: StorageError):
        super().__init__(message, status=reason.status, code=reason.code)
        self.index = index
        self.reason = reason


class LeaseLost(StorageError):
    """The lease on a queue message is gone.

    Raised when a pop receipt is stale (the message was updated or received again since)
    or the message no longer exists. The holder must stop working on it: someone else
    may own it now.
    """


class StorageTrouble(RunnerError):
    """The runner's own storage calls for a task failed past their retry budget.

    Not the user's failure: the task is handed back (state saved where possible, no
    attempt spent) and runs again once the store answers.
    """


class JobNotFound(RunnerError, LookupError):
    """No job with that id, or no job class at that ``module:Class`` path."""


class StoreNotFound(RunnerError, LookupError):
    """No checkpoint store at the location: an embedded directory without a store, or an
    Azure account without the jobs table. Only ``submit`` and ``start`` create one."""


class JobNotEnded(RunnerError):
    """The job has not ended (done, failed or cancelled), so it cannot be deleted."""


class BadMessage(RunnerError):
    """A queue message that is not ours, not decodable, truncated, of an unknown job
    type or too large. It goes to the poison queue with this error as its reason."""


class CodecError(RunnerError, ValueError):
    """A value cannot be encoded with msgpack (or decoded back)."""


class BadRecord(RunnerError):
    """A stored job or task record, or a value stored in one, that cannot be read.

    A property is missing or of the wrong type, a state is not one we know, or a stored
    value is not msgpack: what another version or a hand edit in a storage explorer
    leaves behind. Reading it again will not mend it, so the task it belongs to is
    poisoned with this error as the reason. The message names the record and what is
    wrong with it (``chunk 7 of job 'x': state 42 is not one of waiting, ...``).
    """
