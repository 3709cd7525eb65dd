"""Planning helpers for ``split``: cut input files or a key range into chunk payloads.

Pure Python, no Spark: a job's ``split`` yields from these. Both are deterministic for
the same input (planning resumes by running ``split`` again and skipping the payloads
already enqueued) and yield small msgpack-able dicts that *name* the work::

    def split(self, params):
        yield from split_files(list_inputs(params["input"]), target_bytes=256 << 20)

    def split(self, params):
        yield from split_key_range(0, params["max_id"], slice_size=100_000)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from checkpoint import checks

__all__ = ["split_files", "split_key_range"]


def split_files(
    paths_with_sizes: Iterable[tuple[str, int]] | Mapping[str, int],
    target_bytes: int,
    *,
    max_files: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Group files into chunks of about ``target_bytes`` each.

    Files are taken in path order (whatever order they were listed in) and packed
    greedily: a chunk is closed when the next file would take it past ``target_bytes``
    (or past ``max_files``). A file larger than the target gets a chunk of its own;
    files are never split. Keeping neighbouring paths together keeps a chunk's files
    in one directory or date partition, as they usually are named.

    Args:
        paths_with_sizes: ``(path, size in bytes)`` pairs, or a mapping path -> size
            (blob names and ``content_length``, ``os.stat`` sizes, ...).
        target_bytes: the size a chunk aims for; > 0.
        max_files: at most this many files per chunk (many tiny files cost per file,
            not per byte); None for no limit.

    Yields:
        ``{"files": [path, ...], "bytes": total size}`` per chunk, in path order.

    Raises:
        ValueError: a bad target or limit, a negative size, or a path listed twice
            (it would be processed twice).
    """
    checks.whole(target_bytes, "target_bytes", lowest=1)
    if max_files is not None:
        checks.whole(max_files, "max_files", lowest=1)
    files: list[str] = []
    size = 0
    for path, file_bytes in _sorted_files(paths_with_sizes):
        full = max_files is not None and len(files) >= max_files
        if files and (size + file_bytes > target_bytes or full):
            yield {"files": files, "bytes": size}
            files, size = [], 0
        files.append(path)
        size += file_bytes
    if files:
        yield {"files": files, "bytes": size}


def _sorted_files(
    paths_with_sizes: Iterable[tuple[str, int]] | Mapping[str, int],
) -> list[tuple[str, int]]:
    pairs = list(
        paths_with_sizes.items() if isinstance(paths_with_sizes, Mapping) else paths_with_sizes
    )
    pairs.sort(key=lambda pair: pair[0])
    for number, (path, file_bytes) in enumerate(pairs):
        if not isinstance(path, str) or not path:
            raise ValueError(f"file path must be a non-empty string, not {path!r}")
        checks.whole(file_bytes, f"size of {path!r}", lowest=0)
        if number and pairs[number - 1][0] == path:
            raise ValueError(f"file {path!r} is listed twice")
    return pairs


def split_key_range(
    first: int,
    last: int,
    *,
    slices: int | None = None,
    slice_size: int | None = None,
) -> Iterator[dict[str, int]]:
    """Cut the key range ``[first, last)`` into half-open slices.

    Give exactly one of ``slices`` (that many slices of near-equal size; the first
    ones take one key more when it does not divide evenly) or ``slice_size`` (slices of
    that many keys; the last one may be shorter). No slice is empty: an empty range
    yields nothing, and asking for more slices than keys yields one slice per key.

    Args:
        first: the first key (inclusive).
        last: the end key (exclusive), >= ``first``.
        slices: how many slices, >= 1.
        slice_size: keys per slice, >= 1.

    Yields:
        ``{"lo": lo, "hi": hi}`` per slice, ascending: it covers keys ``lo <= key < hi``
        (in SQL, ``WHERE key >= lo AND key < hi``), so slices never overlap.

    Raises:
        ValueError: bounds that are not whole numbers or out of order, or not exactly
            one of ``slices`` / ``slice_size`` given as a whole number >= 1.
    """
    checks.whole(first, "first")
    checks.whole(last, "last")
    if last < first:
        raise ValueError(f"last ({last}) must not be below first ({first})")
    if (slices is None) == (slice_size is None):
        raise ValueError("give exactly one of slices= and slice_size=")
    step = slices if slices is not None else slice_size
    checks.whole(step, "slices" if slices is not None else "slice_size", lowest=1)
    if slice_size is not None:
        for lo in range(first, last, slice_size):
            yield {"lo": lo, "hi": min(lo + slice_size, last)}
        return
    assert slices is not None
    keys = last - first
    base, extra = divmod(keys, slices)
    lo = first
    for number in range(min(slices, keys)):
        hi = lo + base + (1 if number < extra else 0)
        yield {"lo": lo, "hi": hi}
        lo = hi
