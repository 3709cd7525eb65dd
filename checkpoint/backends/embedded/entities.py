"""Record properties at rest and in queries: the msgpack codec and conditions.

Properties are stored as one msgpack map per record. msgpack keeps every type Azure
tables hold apart: ``bool`` stays bool (not 1), ``int`` stays int (not 1.0), ``bytes``
stay bytes (binary, not str), and timezone-aware datetimes travel as msgpack timestamps
and come back timezone-aware in UTC, to the microsecond.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import msgpack

from checkpoint import codec
from checkpoint.errors import CodecError
from checkpoint.service_targets import INT64_MAX, INT64_MIN
from checkpoint.storage import PropertyValue, Where

Properties = dict[str, PropertyValue]

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
}


def pack(properties: Mapping[str, PropertyValue]) -> bytes:
    """Properties to bytes for storage; None values are dropped (Azure stores no nulls)."""
    present = {name: value for name, value in properties.items() if value is not None}
    packed: bytes = msgpack.packb(present, use_bin_type=True, datetime=True)  # no hints
    return packed


def unpack(data: bytes) -> Properties:
    """Stored bytes back to properties with their types (UTC datetimes).

    Raises CodecError saying what is wrong if they are not a msgpack map of property
    values: what a hand edit of the file or another program leaves behind.
    """
    if not isinstance(data, bytes):
        raise CodecError(f"its stored row is a {type(data).__name__}, not msgpack bytes")
    properties = codec.decode(data, "its stored row")
    if not isinstance(properties, dict):
        raise CodecError(
            f"its stored row is a msgpack {type(properties).__name__}, not a map of properties"
        )
    # Each value is one a record holds (msgpack also has lists, maps and unsigned
    # 64-bit ints, which no write of ours stores); checked here, in one loop, because
    # every record read and merged comes through.
    for name, value in properties.items():
        if isinstance(value, int) and not isinstance(value, bool):
            valid = INT64_MIN <= value <= INT64_MAX
        else:
            valid = value is None or isinstance(value, (str, bool, float, bytes, datetime))
        if not isinstance(name, str) or not valid:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise CodecError(f"its stored row holds {name!r}: {shown}, not a property value")
    return properties


def merged(
    current: Mapping[str, PropertyValue], changes: Mapping[str, PropertyValue]
) -> Properties:
    """Azure's merge: given properties overwrite, others are kept.

    A property given as None is ignored (it neither sets nor removes anything): Azure
    has no null to merge, and the SDKs leave such a property out of the request.
    """
    result = dict(current)
    result.update((name, value) for name, value in changes.items() if value is not None)
    return result


# --------------------------------------------------------------------------- conditions


def _kind(value: object) -> str | None:
    """The comparable family of a value; Azure compares only values of one EDM type,
    except that Int32, Int64 and Double compare as numbers."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, datetime):
        return "datetime"
    return None


def satisfies(value: object, condition: Where) -> bool:
    """Whether a record's ``value`` (None when absent) meets ``condition``.

    A missing property, or one of another type than the condition's value, fails every
    comparison, ``ne`` included, as in Azure's OData filters.
    """
    if value is None or _kind(value) != _kind(condition.value):
        return False
    return _OPERATORS[condition.op](value, condition.value)
