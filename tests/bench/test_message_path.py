"""Keeps the store's share of issue 31's count down: every change of product module per
chunk (tests/bench/message_path.py), measured on a real burst worker."""

from __future__ import annotations

from tests.bench.message_path import per_chunk

#: 219 before issue 31's work (0c57c66), 190 before the store's calls were cut, about
#: 141 after (108480f), 122-124 once system clock reads ran no code of ours; the ceiling
#: leaves about 10 % for the few changes runs differ by.
EVERY_CHANGE_CEILING = 135


def test_a_chunk_makes_fewer_module_changes_than_the_ceiling() -> None:
    # Given a 21-chunk and a 1-chunk trivial job, each run to its end by a burst worker
    # When the module changes of the first, less the second, are shared over 20 chunks
    share = per_chunk()
    # Then a chunk's share stays under the ceiling (the store no longer goes back and
    # forth to checks, entities and the clock per field, row and call)
    assert sum(share.every.values()) <= EVERY_CHANGE_CEILING, share.most(share.every, 10)
