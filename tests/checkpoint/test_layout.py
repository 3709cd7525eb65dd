"""Where chunks live: the shard of each chunk and how many chunks each shard holds."""

from __future__ import annotations

import pytest

from checkpoint import layout


@pytest.mark.parametrize("total", [0, 1, 31, 32, 33, 511, 512, 513, 1000, 5000, 16 * 32 * 3 + 7])
def test_chunks_in_shard_counts_what_shard_of_assigns(total: int):
    assigned = [0] * layout.SHARDS
    for index in range(total):
        assigned[layout.shard_of(index)] += 1
    assert [layout.chunks_in_shard(total, shard) for shard in range(layout.SHARDS)] == assigned


def test_consecutive_chunks_share_a_shard_in_blocks():
    # A receive of 32 consecutive messages touches one or two shards, not sixteen.
    shards = {layout.shard_of(index) for index in range(100, 132)}
    assert len(shards) <= 2
    # while a large job still spreads over every shard (Azure's per-partition limit)
    assert {layout.shard_of(index) for index in range(16 * layout.SHARD_BLOCK)} == set(
        range(layout.SHARDS)
    )
