"""msgpack, the one encoding of payloads, params, state and results (never pickle).

Timezone-aware datetimes travel as msgpack timestamps; tuples come back as lists; bytes
stay bytes. Anything else msgpack cannot hold is refused with a :class:`CodecError`
that names the value's type, before anything is written.
"""

from __future__ import annotations

from typing import Any

import msgpack

from checkpoint.errors import CodecError


def encode(value: Any, what: str = "value") -> bytes:
    """``value`` as msgpack bytes. Raises CodecError naming ``what`` if it cannot be."""
    try:
        packed: bytes = msgpack.packb(value, use_bin_type=True, datetime=True)  # no hints
    except (TypeError, ValueError, OverflowError) as error:
        raise CodecError(
            f"{what} is not msgpack-able ({error}); use dicts, lists, str, bytes, int, "
            "float, bool, None and timezone-aware datetimes"
        ) from error
    return packed


def decode(data: bytes, what: str = "value") -> Any:
    """The value ``data`` holds. Raises CodecError if it is not exactly one msgpack value.

    Lengths in the headers are bounded by the input's size, so bytes from anyone (a
    foreign message, a hand-edited record) cannot make msgpack allocate more than they
    could hold: a header claiming a 4 GiB string or array fails at once.
    """
    try:
        return msgpack.unpackb(data, raw=False, timestamp=3, strict_map_key=False, **_limits(data))
    # TypeError: a map keyed by an array or a map is valid msgpack but unhashable here.
    except (
        ValueError,
        TypeError,
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
    ) as error:
        raise CodecError(f"{what} is not valid msgpack: {error}") from error


def _limits(data: bytes) -> dict[str, int]:
    """msgpack's size limits for decoding ``data``: no str, bin or ext longer than the
    input, no array with more items (each takes a byte at least), no map with more
    entries than half of it (a key and a value each).

    ``unpackb`` takes the input as its whole buffer (``max_buffer_size`` is the
    streaming Unpacker's), and recent msgpack derives these from the input's length
    anyway; they are given here so that no version or build relies on a 100 MiB default.
    """
    size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0
    return {
        "max_str_len": size,
        "max_bin_len": size,
        "max_ext_len": size,
        "max_array_len": size,
        "max_map_len": size // 2,
    }


def round_trip(value: Any, what: str = "value") -> Any:
    """``value`` after a msgpack round trip: what a reader of it stored gets back.

    Raises:
        CodecError: ``value`` is not msgpack-able.
    """
    return decode(encode(value, what), what)
