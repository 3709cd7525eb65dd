"""Azure Storage's service targets: its names, sizes and value rules, checked in one place
for every backend.

Called service targets (Azure's "scalability and performance targets"), never limits:
a limit is the user's (``runner limit``). Azurite is laxer than
Azure in places (it accepts more than 252 properties, answers 500 to a ``/`` in a
RowKey) and the embedded backend checks nothing of its own, so both
backends call these checks before each request and refuse the same input with the same
:class:`~checkpoint.errors.InvalidRequest` or :class:`~checkpoint.errors.TooLarge`. Figures are
Azure's published targets; sizes of strings are counted as Azure counts them, in UTF-16.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from checkpoint import checks
from checkpoint.errors import InvalidRequest, TooLarge
from checkpoint.storage import Where

#: Largest message body in bytes: 64 KiB of base64 text, which is how bodies travel.
MAX_MESSAGE_BYTES = 48 * 1024
#: Messages a single receive or peek may return.
MAX_MESSAGES_PER_RECEIVE = 32
#: Longest visibility timeout and initial delay: 7 days.
MAX_VISIBILITY_SECONDS = 7 * 24 * 3600
#: TTL Azure applies when none is given: 7 days.
DEFAULT_TTL_SECONDS = 7 * 24 * 3600

#: Largest string or binary property value, in bytes (strings counted in UTF-16).
MAX_PROPERTY_BYTES = 64 * 1024
#: Largest entity, in bytes by Azure's size formula.
MAX_ENTITY_BYTES = 1024 * 1024
#: Properties an entity may hold besides PartitionKey, RowKey and Timestamp.
MAX_PROPERTIES = 252
#: Largest PartitionKey or RowKey, in bytes (UTF-16).
MAX_KEY_BYTES = 1024
#: Operations in one atomic batch.
MAX_BATCH_OPERATIONS = 100
#: Largest total payload of one batch.
MAX_BATCH_BYTES = 4 * 1024 * 1024
#: Longest blob name, in characters.
MAX_BLOB_NAME_CHARS = 1024

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
RESERVED_PROPERTIES = frozenset({"PartitionKey", "RowKey", "Timestamp", "etag"})

_QUEUE_OR_CONTAINER = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")
_TABLE = re.compile(r"^[A-Za-z][A-Za-z0-9]{2,62}$")
_PROPERTY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
_KEY_FORBIDDEN = re.compile(r"[/\\#?\x00-\x1f\x7f-\x9f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _utf16_bytes(text: str) -> int:
    # ASCII (the common case) is 2 bytes a character; encoding is only needed otherwise.
    return 2 * len(text) if text.isascii() else len(text.encode("utf-16-le"))


# --------------------------------------------------------------------------- names


def is_queue_name(name: object) -> bool:
    """3-63 lowercase letters, digits and single hyphens, starting and ending alphanumeric
    (Azure's rule for queues and blob containers alike)."""
    return isinstance(name, str) and _QUEUE_OR_CONTAINER.match(name) is not None


def check_queue_name(name: str) -> str:
    """3-63 lowercase letters, digits and single hyphens, starting and ending alphanumeric."""
    if not is_queue_name(name):
        raise InvalidRequest(
            f"invalid queue name {name!r}: use 3-63 lowercase letters, digits and single "
            "hyphens, starting and ending with a letter or digit",
            code="InvalidResourceName",
        )
    return name


def check_container_name(name: str) -> str:
    """Same rule as queues: 3-63 lowercase letters, digits and single hyphens."""
    if not is_queue_name(name):
        raise InvalidRequest(
            f"invalid container name {name!r}: use 3-63 lowercase letters, digits and "
            "single hyphens, starting and ending with a letter or digit",
            code="InvalidResourceName",
        )
    return name


def check_table_name(name: str) -> str:
    """3-63 letters and digits, starting with a letter; ``tables`` is reserved."""
    if not isinstance(name, str) or not _TABLE.match(name) or name.lower() == "tables":
        raise InvalidRequest(
            f"invalid table name {name!r}: use 3-63 letters and digits, starting with a letter",
            code="InvalidResourceName",
        )
    return name


def check_blob_name(name: str) -> str:
    """1-1024 characters in at most 254 '/'-separated segments, none empty, '.' or '..'.

    Azure's own rules are the length and the segment count. The rest keeps a name meaning
    one path everywhere (a URL, a file under the embedded blob folder, where a segment
    is a file name of at most 255 bytes) and keeps every name inside its container.
    """
    if not isinstance(name, str) or not 0 < len(name) <= MAX_BLOB_NAME_CHARS:
        raise InvalidRequest(
            f"invalid blob name {name!r}: 1-{MAX_BLOB_NAME_CHARS} characters",
            code="InvalidResourceName",
        )
    segments = name.split("/")
    if (
        _CONTROL.search(name)
        or len(segments) > 254
        or any(s in ("", ".", "..") or len(s.encode()) > 255 for s in segments)
    ):
        raise InvalidRequest(
            f"invalid blob name {name!r}: at most 254 '/'-separated segments of 1-255 "
            "bytes each, none '.' or '..', and no control characters",
            code="InvalidResourceName",
        )
    return name


# --------------------------------------------------------------------------- queues


def check_message_body(body: bytes) -> bytes:
    """Bodies are bytes, at most :data:`MAX_MESSAGE_BYTES`."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidRequest(f"a message body is bytes, not {type(body).__name__}")
    if len(body) > MAX_MESSAGE_BYTES:
        raise TooLarge(
            f"message body of {len(body):,} bytes is over Azure's queue message size of "
            f"{MAX_MESSAGE_BYTES:,} bytes (64 KiB once base64-encoded); put large content "
            "in a blob and send its name",
            code="RequestBodyTooLarge",
        )
    return bytes(body)


def check_whole(
    value: int, what: str, lowest: int, highest: int = MAX_VISIBILITY_SECONDS, unit: str = "seconds"
) -> int:
    """A whole number within ``[lowest, highest]`` (Azure counts visibility in whole seconds)."""
    return checks.whole(value, what, lowest=lowest, highest=highest, unit=unit, error=_out_of_range)


def _out_of_range(message: str) -> InvalidRequest:
    return InvalidRequest(message, code="OutOfRangeQueryParameterValue")


def check_range(offset: int, length: int | None) -> None:
    """A blob range: ``offset`` and ``length`` (None: to the end) whole bytes >= 0."""
    for value, what in ((offset, "offset"), (length, "length")):
        if value is not None:
            checks.whole(
                value, what, lowest=0, highest=INT64_MAX, unit="bytes", error=_out_of_range
            )


def check_put_conditions(if_match: str | None, if_none_match: bool) -> None:
    """A blob write takes ``if_match`` or ``if_none_match``, not both: together they
    ask for a blob that both exists with that ETag and does not exist."""
    if if_match is not None and if_none_match:
        raise InvalidRequest("give if_match or if_none_match, not both", code="InvalidInput")


def check_lease(message_id: str, pop_receipt: str) -> None:
    """A message id and pop receipt as a receive returned them: non-empty strings.

    Azure refuses a request without either (400 MissingRequiredQueryParameter) and the
    SDK raises ValueError for an empty receipt; neither means the lease was lost.
    """
    for name, value in (("message_id", message_id), ("pop_receipt", pop_receipt)):
        if not isinstance(value, str) or not value:
            raise InvalidRequest(
                f"{name} must be the non-empty string a receive returned, not {value!r}",
                code="MissingRequiredQueryParameter",
            )


def check_ttl(ttl_seconds: int | None, delay_seconds: int) -> int:
    """TTL in seconds: None for the 7-day default, -1 for never, else >= 1 and > delay."""
    if ttl_seconds is None:
        ttl_seconds = DEFAULT_TTL_SECONDS
    checks.whole(ttl_seconds, "ttl_seconds", error=InvalidRequest)
    if ttl_seconds == -1:
        return ttl_seconds
    if ttl_seconds < 1 or ttl_seconds <= delay_seconds:
        raise InvalidRequest(
            f"ttl_seconds must be -1 (never expires) or a positive number of seconds "
            f"greater than the delay ({delay_seconds} s), not {ttl_seconds}",
            code="OutOfRangeQueryParameterValue",
        )
    return ttl_seconds


def check_max_messages(max_messages: int) -> int:
    """1 to 32 messages per receive or peek."""
    return check_whole(max_messages, "max_messages", 1, MAX_MESSAGES_PER_RECEIVE, "messages")


# --------------------------------------------------------------------------- records


def check_key(key: str, which: str) -> str:
    """A PartitionKey or RowKey: a string of at most 1 KiB without / \\ # ? or controls."""
    if not isinstance(key, str):
        raise InvalidRequest(f"{which} must be a string, not {type(key).__name__}")
    if _KEY_FORBIDDEN.search(key):
        raise InvalidRequest(
            f"{which} {key!r} holds a character Azure forbids in keys (/ \\ # ? or a "
            "control character)",
            code="InvalidInput",
        )
    if _utf16_bytes(key) > MAX_KEY_BYTES:
        raise TooLarge(f"{which} is over {MAX_KEY_BYTES} bytes", code="KeyValueTooLarge")
    return key


def _value_bytes(name: str, value: object) -> int:
    """Azure's size of one property value (its name not counted)."""
    # The built-in types by exact type (a bool is an int too); subclasses further down.
    if type(value) is str:
        return 4 + _string_bytes(name, value)
    if type(value) is bool:
        return 1
    if type(value) is int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidRequest(f"property {name!r}: {value} does not fit in 64 bits")
        return 8
    if type(value) is float:
        return 8
    if type(value) is bytes or type(value) is bytearray:
        return 4 + _binary_bytes(name, value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidRequest(f"property {name!r}: datetimes must be timezone-aware")
        return 8
    # Subclasses (an IntEnum, a str subclass) are checked as their base.
    if isinstance(value, int):
        return _value_bytes(name, int(value))
    if isinstance(value, float):
        return _value_bytes(name, float(value))
    if isinstance(value, str):
        return _value_bytes(name, str(value))
    if isinstance(value, bytes):
        return _value_bytes(name, bytes(value))
    raise InvalidRequest(
        f"property {name!r} has a {type(value).__name__}; records hold str, int, float, bool, "
        "bytes, datetime or None"
    )


def _string_bytes(name: str, value: str) -> int:
    size = _utf16_bytes(value)
    if size > MAX_PROPERTY_BYTES:
        raise TooLarge(
            f"property {name!r} is {size:,} bytes in UTF-16, over Azure's "
            f"{MAX_PROPERTY_BYTES:,}-byte property size",
            code="PropertyValueTooLarge",
        )
    return size


def _binary_bytes(name: str, value: bytes | bytearray) -> int:
    if len(value) > MAX_PROPERTY_BYTES:
        raise TooLarge(
            f"property {name!r} is {len(value):,} bytes, over Azure's "
            f"{MAX_PROPERTY_BYTES:,}-byte property size",
            code="PropertyValueTooLarge",
        )
    return len(value)


@functools.lru_cache(maxsize=4096)
def _name_bytes(name: str) -> int:
    """8 bytes of overhead plus the name in UTF-16, once the name is known valid.

    Cached: a store writes the same few property names over and over.
    """
    if not isinstance(name, str) or not _PROPERTY.match(name) or name in RESERVED_PROPERTIES:
        raise InvalidRequest(
            f"invalid property name {name!r}: 1-255 letters, digits and underscores, "
            "not starting with a digit, and not PartitionKey, RowKey, Timestamp or etag",
            code="PropertyNameInvalid",
        )
    return 8 + _utf16_bytes(name)


def check_entity(partition_key: str, row_key: str, properties: Mapping[str, object]) -> int:
    """Check keys, property names, values and total size; return the size in bytes."""
    check_key(partition_key, "PartitionKey")
    check_key(row_key, "RowKey")
    present = {k: v for k, v in properties.items() if v is not None}
    if len(present) > MAX_PROPERTIES:
        raise InvalidRequest(
            f"{len(present)} properties, over Azure's {MAX_PROPERTIES}", code="TooManyProperties"
        )
    total = 4 + _utf16_bytes(partition_key) + _utf16_bytes(row_key)
    for name, value in present.items():
        if not isinstance(name, str):
            _name_bytes.__wrapped__(name)  # raises the invalid-name error
        # Every record write comes here: the common values are sized inline (the same
        # sizes _value_bytes gives), everything else, and every error, goes through it.
        # Exact types only (a bool, an IntEnum go there), and no call into another
        # module per property.
        if type(value) is bytes and len(value) <= MAX_PROPERTY_BYTES:
            size = 4 + len(value)
        elif type(value) is str and value.isascii() and 2 * len(value) <= MAX_PROPERTY_BYTES:
            size = 4 + 2 * len(value)
        elif (type(value) is int and INT64_MIN <= value <= INT64_MAX) or type(value) is float:
            size = 8
        else:
            size = _value_bytes(name, value)
        total += _name_bytes(name) + size
    if total > MAX_ENTITY_BYTES:
        raise TooLarge(
            f"record {partition_key!r}/{row_key!r} is {total:,} bytes, over Azure's "
            f"{MAX_ENTITY_BYTES:,}-byte entity size",
            code="EntityTooLarge",
        )
    return total


def check_batch(row_keys: Sequence[str], sizes: Sequence[int]) -> None:
    """1-100 operations on distinct rows, at most 4 MiB in all."""
    if not 1 <= len(row_keys) <= MAX_BATCH_OPERATIONS:
        raise InvalidRequest(
            f"a batch holds 1 to {MAX_BATCH_OPERATIONS} operations, not {len(row_keys)}",
            code="InvalidInput",
        )
    if len(set(row_keys)) != len(row_keys):
        raise InvalidRequest("a batch may touch each row only once", code="InvalidDuplicateRow")
    if sum(sizes) > MAX_BATCH_BYTES:
        raise TooLarge(
            f"batch of {sum(sizes):,} bytes is over Azure's {MAX_BATCH_BYTES:,}-byte batch size",
            code="RequestBodyTooLarge",
        )


# --------------------------------------------------------------------------- queries

COMPARISONS = ("eq", "ne", "gt", "ge", "lt", "le")


def check_query_name(name: str) -> str:
    """``RowKey`` or a valid property name: names are written into filters as they are."""
    valid = isinstance(name, str) and _PROPERTY.match(name)
    if not valid or (name in RESERVED_PROPERTIES and name != "RowKey"):
        raise InvalidRequest(
            f"cannot query on {name!r}: use RowKey or a property name (letters, digits and "
            "underscores, not starting with a digit)",
            code="PropertyNameInvalid",
        )
    return name


def check_where(condition: Where) -> Where:
    """A condition both backends can evaluate alike.

    Values compare only with values of the same stored type (int and float are
    different types, as are int and bool); comparing across types is refused by Azure
    or answered with a 500 by Azurite, so keep one type per property. Bytes allow only
    ``eq``/``ne``: Azurite orders binary values by their base64 text, not their bytes.
    """
    check_query_name(condition.property)
    if condition.op not in COMPARISONS:
        raise InvalidRequest(
            f"unknown comparison {condition.op!r}; use one of {', '.join(COMPARISONS)}",
            code="InvalidInput",
        )
    value = condition.value
    if value is None:
        raise InvalidRequest(
            f"cannot compare {condition.property!r} with None: a missing property matches "
            "no condition",
            code="InvalidInput",
        )
    if not isinstance(value, (str, int, float, bytes, datetime)):
        raise InvalidRequest(
            f"cannot compare {condition.property!r} with a {type(value).__name__}: conditions "
            "take a str, int, float, bool, bytes or timezone-aware datetime",
            code="InvalidInput",
        )
    _value_bytes(condition.property, value)  # int range, tz-aware datetime, size
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRequest(
            f"cannot filter {condition.property!r} on {value}", code="InvalidInput"
        )
    if isinstance(value, bytes) and condition.op not in ("eq", "ne"):
        raise InvalidRequest(
            f"bytes compare only with eq or ne, not {condition.op!r}: services order binary "
            "values differently",
            code="InvalidInput",
        )
    return condition


def check_select(select: Sequence[str] | None) -> list[str] | None:
    """A list of property names (``RowKey`` allowed) or None for every property."""
    if select is None:
        return None
    if isinstance(select, str):
        raise InvalidRequest("select is a list of property names, not one string")
    return [check_query_name(name) for name in select]


def check_limit(limit: int | None) -> int | None:
    """None (no limit) or a positive whole number of records."""
    return None if limit is None else checks.whole(limit, "limit", lowest=1, error=InvalidRequest)
