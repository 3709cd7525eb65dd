"""The storage contract, written once and run against every backend.

Each test takes the ``backend`` fixture (``tests/conftest.py``) and talks only to the
three protocols of :mod:`checkpoint.storage`, so the embedded store and Azure Storage (as
served by Azurite) must pass the very same assertions. Expected error codes are the ones
Azure (Azurite) answers with; time passes through ``backend.advance``, which moves a fake
clock on the embedded store and really waits on Azurite, so real waits stay at 1-2 s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from checkpoint.errors import StorageError
from checkpoint.storage import QueueMessage

#: One property of each type a record holds, at the edges Azure cares about.
EVERY_TYPE = {
    "text": "héllo wörld ✓ 😀",
    "empty_text": "",
    "small_int": 7,
    "zero": 0,
    "negative_int": -42,
    "just_over_int32": 2**31,
    "big_int": 2**40,
    "big_negative_int": -(2**40),
    "int64_max": 2**63 - 1,
    "int64_min": -(2**63),
    "ratio": 0.25,
    "whole_float": 2.0,
    "negative_float": -1.5e300,
    "yes": True,
    "no": False,
    "raw": bytes(range(256)),
    "empty_raw": b"",
    "when": datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
}


@contextmanager
def fails_with(
    error: type[StorageError], *, status: int, code: str | None = None
) -> Iterator[pytest.ExceptionInfo[StorageError]]:
    """Expect ``error`` (class) with HTTP ``status`` and, when given, Azure's error ``code``."""
    with pytest.raises(error) as caught:
        yield caught
    assert caught.value.status == status, f"status {caught.value.status!r} of {caught.value!r}"
    if code is not None:
        assert caught.value.code == code, f"code {caught.value.code!r} of {caught.value!r}"


def assert_same_types(actual: Mapping[str, object], expected: Mapping[str, object]) -> None:
    """Equal values of exactly the same types (True is not 1, 2.0 is not 2)."""
    assert dict(actual) == dict(expected)
    for name, value in expected.items():
        got = actual[name]
        if isinstance(value, datetime):
            assert isinstance(got, datetime) and got.tzinfo is not None, (name, got)
        else:
            assert type(got) is type(value), (name, type(got), type(value))


#: Azure reports message times to the second; allow that much rounding and a little more.
TIME_SLACK = timedelta(seconds=2)


def close_to(actual: timedelta, expected_seconds: float) -> bool:
    """Whether a span of message times is ``expected_seconds``, give or take TIME_SLACK."""
    return abs(actual - timedelta(seconds=expected_seconds)) <= TIME_SLACK


def only(messages: list[QueueMessage]) -> QueueMessage:
    """The one message of a receive or peek."""
    assert len(messages) == 1, messages
    return messages[0]
