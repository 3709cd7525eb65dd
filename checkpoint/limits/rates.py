"""Rates as people write them (``"200/s"``, ``"6000/min"``, ``"1/h"``) and limit names.

Written once here because a job class, ``runner limit`` and the stored limit records
all read them, and each must refuse the same text with the same line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from checkpoint.checks import ErrorFactory

#: Seconds per unit a rate may be given in.
UNIT_SECONDS = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "hour": 3600.0}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+)\s*$")
#: A limit's name is a table partition key and a word on the command line: a queue name
#: (``migrate-orders``) or a resource (``orders-db``, ``crm.api``).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
RATE_RULE = "a count per unit, like '200/s', '6000/min' or '1/h' (count > 0)"
NAME_RULE = "1-63 letters, digits, '.', '_' and '-', starting with a letter or digit"


@dataclass(frozen=True)
class Rate:
    """A rate: ``per_second`` tokens a second, written as ``text``."""

    per_second: float
    text: str


def parse_rate(text: object, what: str = "rate", error: ErrorFactory = ValueError) -> Rate:
    """``"200/s"`` -> Rate(200.0, "200/s"); raise ``error`` with one line otherwise."""
    found = _RATE.match(text) if isinstance(text, str) else None
    unit = found.group(2) if found else ""
    if found is None or unit not in UNIT_SECONDS:
        raise error(f"{what} must be {RATE_RULE}, not {text!r}")
    per_second = float(found.group(1)) / UNIT_SECONDS[unit]
    if not (per_second > 0 and math.isfinite(per_second)):
        raise error(f"{what} must be {RATE_RULE}, not {text!r}")
    return Rate(per_second, f"{found.group(1)}/{unit}")


def check_limit_name(
    name: object, what: str = "limit name", error: ErrorFactory = ValueError
) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise error(f"{what} {name!r} is not valid: use {NAME_RULE}")
    return name
