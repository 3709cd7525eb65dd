"""Checks of plain values that every layer makes, each written once.

A count, a size or a number of seconds is a *whole number*: an ``int`` that is not a
``bool`` (Python counts ``True`` as 1; nobody means ``True`` attempts). Callers name the
value and the error their own layer raises (``JobDefinitionError`` for a job class,
``InvalidRequest`` for a storage request, ``ValueError`` for a helper's argument), so the
message reads the same everywhere: ``max_attempts must be a whole number >= 1, not 0``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

#: Builds the caller's error from the message.
ErrorFactory = Callable[[str], Exception]


def is_whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def whole(
    value: object,
    what: str,
    *,
    lowest: int | None = None,
    highest: int | None = None,
    unit: str = "",
    error: ErrorFactory = ValueError,
) -> int:
    """``value`` if it is a whole number within ``[lowest, highest]`` (either open);
    else raise ``error`` with one line naming ``what`` and the range."""
    if (
        is_whole(value)
        and (lowest is None or value >= lowest)
        and (highest is None or value <= highest)
    ):
        return value
    kind = f"a whole number of {unit}" if unit else "a whole number"
    raise error(f"{what} must be {kind}{_range(lowest, highest)}, not {value!r}")


def number(
    value: object,
    what: str,
    *,
    lowest: float | None = None,
    above: float | None = None,
    error: ErrorFactory = ValueError,
) -> float:
    """``value`` if it is an int or float ``>= lowest`` (or ``> above``); else raise."""
    if (
        is_number(value)
        and (lowest is None or value >= lowest)
        and (above is None or value > above)
    ):
        return value
    bound = f" >= {lowest}" if lowest is not None else f" > {above}" if above is not None else ""
    raise error(f"{what} must be a number{bound}, not {value!r}")


def _range(lowest: int | None, highest: int | None) -> str:
    if lowest is not None and highest is not None:
        return f" from {lowest} to {highest}"
    if lowest is not None:
        return f" >= {lowest}"
    if highest is not None:
        return f" <= {highest}"
    return ""
