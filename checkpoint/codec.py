"""msgpack, the one encoding of payloads, params, state and results (never pickle).

Timezone-aware datetimes travel as msgpack timestamps; tuples come back as lists; bytes
stay bytes. Anything else msgpack cannot hold is refused with a :class:`CodecError`
that names the value's type, before anything is written.
"""

from __future__ import annotations

from typing import Any

import msgpack

from jobs.errors import CodecError


def encode(value: Any, what: str = "value") -> bytes:
    """``value`` as msgpack bytes. Raises CodecError naming ``what`` if it cannot be."""
    try:
        return msgpack.packb(value, use_bin_type=True, datetime=True)
    except (TypeError, ValueError, OverflowError) as error:
        raise CodecError(
            f"{what} is not msgpack-able ({error}); use dicts, lists, str, bytes, int, "
            "float, bool, None and timezone-aware datetimes"
        ) from error


def decode(data: bytes, what: str = "value") -> Any:
    """The value ``data`` holds. Raises CodecError if it is not exactly one msgpack value."""
    try:
        return msgpack.unpackb(data, raw=False, timestamp=3, strict_map_key=False)
    # TypeError: a map keyed by an array or a map is valid msgpack but unhashable here.
    except (
        ValueError,
        TypeError,
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
    ) as error:
        raise CodecError(f"{what} is not valid msgpack: {error}") from error
