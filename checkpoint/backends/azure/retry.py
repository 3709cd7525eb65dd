"""The one retry policy of the Azure backend: how often, and how long to wait.

Transient faults (connection errors, 408, 500, 503, ...) are retried by the SDKs'
own retry policies, configured here. The waits are bounded so a dead endpoint fails in
seconds, not the ~90 s of the SDK defaults. Above the backend, :mod:`checkpoint.retries`
retries a whole call once the SDK has given up, within a budget (a lease, a stop signal),
and settles a write whose answer was lost by reading (:mod:`checkpoint.settle`).

The storage SDKs (queue, blob) take a policy object: :func:`storage_retry_policy` builds
one that waits :func:`backoff_seconds`. The tables SDK builds azure-core's policy itself
from keywords (:func:`tables_retry_settings`); it retries the first time at once and then
waits ``factor * 2**(n-1)``, which with our factor is the same doubling from 1 s.
"""

from __future__ import annotations

import random
from typing import Any

from azure.storage.blob import ExponentialRetry as BlobExponentialRetry
from azure.storage.queue import ExponentialRetry as QueueExponentialRetry

from checkpoint import checks
from checkpoint.errors import ConfigurationError

#: Wait before the first retry; each further retry waits twice as long, up to the max.
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 4.0
#: Each wait is scaled by a random factor within 1 +- this, so workers spread out.
JITTER_FRACTION = 0.2
#: Give up opening a TCP connection after this long (the attempt then counts as failed).
CONNECTION_TIMEOUT_SECONDS = 10


def backoff_seconds(retry: int) -> float:
    """The wait before retry number ``retry`` (1-based): 0.5, 1, 2, 4, 4, ... seconds."""
    return min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2.0 ** max(retry - 1, 0))


def check_retry_total(retry_total: int) -> int:
    """``retry_total`` must be a whole number >= 0 (0: every request is made once)."""
    return checks.whole(retry_total, "retry_total", lowest=0, error=ConfigurationError)


def _counts(retry_total: int) -> dict[str, int]:
    # Every counter is capped by retry_total, so no kind of fault gets more tries.
    return {
        "retry_total": retry_total,
        "retry_connect": retry_total,
        "retry_read": retry_total,
        "retry_status": retry_total,
    }


def _jittered_backoff(self: Any, settings: dict[str, Any]) -> float:
    # The storage policy has counted this retry already: settings["count"] is 1 first.
    jitter = random.uniform(1 - JITTER_FRACTION, 1 + JITTER_FRACTION)
    return backoff_seconds(settings["count"]) * jitter


class _QueueRetry(QueueExponentialRetry):
    get_backoff_time = _jittered_backoff


class _BlobRetry(BlobExponentialRetry):
    get_backoff_time = _jittered_backoff


def storage_retry_policy(service: str, retry_total: int) -> Any:
    """The retry policy object for the ``"queue"`` or ``"blob"`` service client."""
    kind = _QueueRetry if service == "queue" else _BlobRetry
    return kind(retry_to_secondary=False, **_counts(check_retry_total(retry_total)))


def tables_retry_settings(retry_total: int) -> dict[str, Any]:
    """Keywords for the tables client's azure-core retry policy."""
    return {
        **_counts(check_retry_total(retry_total)),
        "retry_backoff_factor": FIRST_BACKOFF_SECONDS,
        "retry_backoff_max": MAX_BACKOFF_SECONDS,
    }
