"""SDK errors in, :mod:`jobs.errors` out: the one place Azure failures are translated.

Every call into an Azure SDK runs inside :func:`translated`, so nothing above this
package sees ``HttpResponseError`` or a ``requests`` exception. The mapping follows the
status and Azure error code, in this order: a stale pop receipt or vanished message is a
lost lease; 412 a lost compare-and-swap; 404 a missing resource; 409 an existing one;
size codes and 413 too large; 429/500/503 throttling; other 5xx and network failures
unavailable; any other 4xx an invalid request.

Messages are built here, never copied wholesale from the SDK, and pass through
:func:`checkpoint.location.redact`: with a SAS credential every request URL carries the
signature, and network errors from urllib3 (``MaxRetryError``) quote the URL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Protocol, TypeGuard

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.data.tables import TableTransactionError

from checkpoint.errors import (
    AlreadyExists,
    BatchFailed,
    ConfigurationError,
    Conflict,
    InvalidRequest,
    LeaseLost,
    NotFound,
    StorageError,
    Throttled,
    TooLarge,
    Unavailable,
)
from checkpoint.location import redact

#: Codes meaning the caller's lease on a queue message is gone (update or delete).
LEASE_LOST_CODES = frozenset({"PopReceiptMismatch", "MessageNotFound"})
#: 400 codes Azure uses for sizes (413 is the status of the others).
TOO_LARGE_CODES = frozenset(
    {"EntityTooLarge", "PropertyValueTooLarge", "KeyValueTooLarge", "RequestBodyTooLarge"}
)
#: 409 codes that mean "not yet, retry later" rather than "already exists": a name
#: cannot be reused for ~30 s after its queue, table or container was deleted.
BEING_DELETED_CODES = frozenset({"QueueBeingDeleted", "TableBeingDeleted", "ContainerBeingDeleted"})
THROTTLE_STATUSES = frozenset({429, 500, 503})

_XML_CODE = re.compile(r"<Code>([^<]+)</Code>")
_FIRST_LINE_CHARS = 200


@contextmanager
def translated(operation: str) -> Iterator[None]:
    """Run an SDK call, raising the project's error for whatever it raises.

    Args:
        operation: what was being done, for the message (``"send to queue 'q'"``).
            It must hold no secret; names of queues, tables and blobs are fine.
    """
    try:
        yield
    except AzureError as err:
        raise translate(err, operation) from scrub(err)


def translate(err: AzureError, operation: str) -> StorageError | ConfigurationError:
    """The :mod:`jobs.errors` exception for an Azure SDK exception (not raised)."""
    if isinstance(err, TableTransactionError) and not _whole_request_failed(err):
        return _batch_failed(err, operation)
    if isinstance(err, HttpResponseError) and err.status_code is not None:
        return from_status(err.status_code, error_code(err), operation, _server_says(err))
    if isinstance(err, ClientAuthenticationError):
        # No HTTP status: the credential itself (DefaultAzureCredential) found no identity.
        return ConfigurationError(
            f"{operation}: no usable Azure credential: {_first_line(err).rstrip('.')} "
            "(--log-level debug shows each one tried)"
        )
    if isinstance(err, ServiceRequestError):
        what = "could not reach"  # the request was not sent (refused, DNS, TLS)
    elif isinstance(err, ServiceResponseError):
        what = "lost the connection to"  # sent, but no complete answer (reset, timeout)
    else:
        what = "failed talking to"
    return Unavailable(
        f"{operation}: {what} Azure Storage ({type(err).__name__}: {_first_line(err)})",
        code=type(err).__name__,
    )


def from_status(status: int, code: str | None, operation: str, detail: str = "") -> StorageError:
    """The error for an HTTP ``status`` and Azure error ``code``."""
    message = f"{operation}: {code or 'error'} (HTTP {status})" + (f": {detail}" if detail else "")
    message = redact(message)
    kind: type[StorageError]
    if code in LEASE_LOST_CODES:
        kind = LeaseLost
    elif status == 412:
        kind = Conflict
    elif status == 404:
        kind = NotFound
    elif code in BEING_DELETED_CODES:
        kind = Throttled
    elif status == 409:
        kind = AlreadyExists
    elif status == 413 or code in TOO_LARGE_CODES:
        kind = TooLarge
    elif status in THROTTLE_STATUSES:
        kind = Throttled
    elif status >= 500 or status == 408:
        kind = Unavailable
    else:
        kind = InvalidRequest
    return kind(message, status=status, code=code)


def being_deleted(err: HttpResponseError) -> bool:
    """Whether a 409 says "being deleted" (so the name does not exist yet), not "exists"."""
    return error_code(err) in BEING_DELETED_CODES


def error_code(err: HttpResponseError) -> str | None:
    """Azure's error code, wherever this SDK version put it.

    azure-data-tables 12.7.0 leaves ``error_code`` unset on a duplicate insert; the
    ``x-ms-error-code`` header or the body still has it.
    """
    code = getattr(err, "error_code", None)
    if code is None and err.response is not None:
        headers = getattr(err.response, "headers", None) or {}
        code = headers.get("x-ms-error-code") or _code_in_body(err)
    if isinstance(code, Enum):
        code = code.value
    return str(code) if code else None


def _code_in_body(err: HttpResponseError) -> str | None:
    try:
        text = err.response.text() if err.response is not None else ""
    except Exception:  # a body we cannot read (streamed, consumed) just has no code
        return None
    match = _XML_CODE.search(text)
    if match:
        return match.group(1)
    try:
        code = json.loads(text)["odata.error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


def _whole_request_failed(err: TableTransactionError) -> bool:
    """A batch refused as a whole (too large, busy, broken) rather than at one operation.

    The SDK still raises a TableTransactionError (index 0) for some of these, such as
    ``RequestTooLargeError``; the caller should see TooLarge or Throttled, not operation 0.
    """
    status = err.status_code or 0
    return status == 413 or status in THROTTLE_STATUSES or status >= 500


def _batch_failed(err: TableTransactionError, operation: str) -> BatchFailed:
    status = err.status_code or 400
    code = error_code(err)
    reason = from_status(status, code, f"{operation}, operation {err.index}")
    return BatchFailed(
        redact(
            f"{operation}: operation {err.index} failed with {code} (HTTP {status}); "
            "nothing was applied"
        ),
        index=err.index,
        reason=reason,
    )


def _server_says(err: HttpResponseError) -> str:
    """The first line of the service's own message, without request ids and dumps."""
    error = getattr(err, "error", None)
    message = getattr(error, "message", None) or ""
    return _shorten(message.split("\n", 1)[0].strip())


def _first_line(err: BaseException) -> str:
    text = str(err).strip().split("\n", 1)[0]
    return _shorten(redact(text))


def _shorten(text: str) -> str:
    return text if len(text) <= _FIRST_LINE_CHARS else text[: _FIRST_LINE_CHARS - 3] + "..."


def scrub(err: BaseException) -> BaseException:
    """Redact secrets in ``err`` and the errors behind it, in place; returns ``err``.

    The SDK error stays the ``__cause__`` of ours for debugging, and a logged traceback
    prints it and the errors behind it; a URL quoted there may carry a SAS signature.
    """
    seen: set[int] = set()
    pending: list[BaseException] = [err]
    while pending and len(seen) < 20:  # bounded: chains are short, cycles possible
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.args = tuple(_redacted(arg, pending) for arg in current.args)
        if _has_message(current):
            current.message = redact(current.message)
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
        inner = getattr(current, "inner_exception", None)
        if isinstance(inner, BaseException):
            pending.append(inner)
    return err


class _WithMessage(Protocol):
    message: str


def _has_message(err: BaseException) -> TypeGuard[_WithMessage]:
    # Azure's errors keep their text in ``message`` besides ``args``; so may others.
    return isinstance(getattr(err, "message", None), str)


def _redacted(arg: object, pending: list[BaseException]) -> object:
    if isinstance(arg, str):
        return redact(arg)
    if isinstance(arg, BaseException):
        pending.append(arg)
    return arg
