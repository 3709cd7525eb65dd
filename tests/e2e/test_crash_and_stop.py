"""A worker dies or is stopped mid-chunk: its replacement resumes from the checkpoint.

(a) SIGKILL: at most one checkpoint interval of items is redone, and every item lands
in the sink exactly once. Graceful stop (SIGTERM): the chunk flushes its newest state,
releases its message and the worker exits 0 at once, so another worker resumes at once
with nothing redone; a second signal exits at once with 130.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from tests.e2e.harness import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ITEM_SECONDS = 0.05
#: Items.checkpoint_interval_seconds / ITEM_SECONDS: items done between two checkpoints.
ITEMS_PER_INTERVAL = round(1.0 / ITEM_SECONDS)


def test_killed_worker_is_resumed_from_its_checkpoint(cluster: Cluster) -> None:
    # Given a job of two chunks of 80 items (0.05 s each; a checkpoint at most every
    # 1 s, lease 2 s) and one worker on it
    items = 80
    params = cluster.params(chunks=2, items=items, item_seconds=ITEM_SECONDS)
    job_id = cluster.submit("Items", params)
    victim = cluster.start("Items")
    start = cluster.wait_event("start")[0]
    index, first_item = start["chunk"], start["chunk"] * items
    assert start["pid"] == victim.pid

    # When it is SIGKILLed mid-chunk, some time after a durable checkpoint
    cluster.wait_until(
        lambda: (cluster.progress(job_id, index) or 0) >= first_item + 15, "a durable checkpoint"
    )
    time.sleep(0.4)  # into the next checkpoint interval, so some items are not yet durable
    victim.send(signal.SIGKILL)
    assert victim.wait_exit(10) == -signal.SIGKILL
    assert not cluster.events("end", chunk=index), "the chunk ended before the kill: too fast"
    durable = cluster.progress(job_id, index)
    last_done = max(e["item"] for e in cluster.events("item", chunk=index))

    # Then a replacement resumes the chunk from that checkpoint and finishes the job
    replacement = cluster.start("Items")
    assert replacement.wait_exit() == 0, cluster.diagnostics()
    assert cluster.job_state(job_id) == "done"
    starts = cluster.events("start", chunk=index, pid=replacement.pid)
    assert len(starts) == 1, f"started {len(starts)} times: {starts}\n{cluster.diagnostics()}"
    assert (starts[0]["state"], starts[0]["attempt"]) == (durable, 2)

    # ... redoing only the items done after the checkpoint: at most one interval's worth
    writes = Counter(e["item"] for e in cluster.events("item"))
    redone = sorted(item for item, count in writes.items() if count > 1)
    assert redone == list(range(durable, last_done + 1))
    assert all(writes[item] == 2 for item in redone)
    assert len(redone) <= ITEMS_PER_INTERVAL + 2, f"redid {len(redone)} items"
    # ... and every item is in the idempotent sink exactly once
    assert cluster.sink() == {item: str(item) for item in range(2 * items)}
    assert cluster.chunk(job_id, index).attempt == 2


def test_sigterm_flushes_releases_and_another_worker_resumes_at_once(cluster: Cluster) -> None:
    # Given one chunk under a 60 s lease that checkpoints at most every 30 s, and two
    # workers (the one that takes the chunk is the "holder")
    items = 100
    job_id = cluster.submit(
        "Graceful", cluster.params(chunks=1, items=items, item_seconds=ITEM_SECONDS)
    )
    workers = [cluster.start("Graceful"), cluster.start("Graceful")]
    start = cluster.wait_event("start")[0]
    holder = cluster.worker_of(start["pid"])
    (other,) = [worker for worker in workers if worker is not holder]
    cluster.wait_until(lambda: len(cluster.events("item", pid=holder.pid)) >= 20, "20 items done")

    # When the holder gets SIGTERM mid-chunk
    sent_at = holder.send(signal.SIGTERM)

    # Then it stops at its next checkpoint and exits 0 promptly
    assert holder.wait_exit(15) == 0, holder.tail()
    assert time.time() - sent_at < 5
    (stopped,) = cluster.events("exit", pid=holder.pid)
    assert stopped["error"] == "ChunkStopped"
    last_done = max(e["item"] for e in cluster.events("item", pid=holder.pid))
    # ... and the other worker resumes at once, long before the 60 s lease (of which at
    # least 18 s were left) could have run out: the message was released
    resumed = cluster.wait_event("start", pid=other.pid)[0]
    assert resumed["at"] - sent_at < 10
    # ... from the newest state, flushed on stop (no interval had passed): nothing redone,
    # and no attempt spent (only the user's code spends attempts)
    assert (resumed["state"], resumed["attempt"]) == (last_done + 1, 1)
    assert other.wait_exit() == 0, cluster.diagnostics()
    assert cluster.job_state(job_id) == "done"
    writes = Counter(e["item"] for e in cluster.events("item"))
    assert set(writes.values()) == {1}
    assert cluster.sink() == {item: str(item) for item in range(items)}


@pytest.mark.parametrize("processes", [1, 2], ids=["worker", "supervisor"])
def test_second_signal_exits_at_once(cluster: Cluster, processes: int) -> None:
    # Given a worker (or a supervisor of two) running a chunk that never checkpoints
    cluster.submit("Stubborn", cluster.params(chunks=1, items=1, seconds=90))
    worker = cluster.start("Stubborn", "--stop-timeout", "60", burst=False, workers=processes)
    cluster.wait_event("start")

    # When it gets SIGTERM, it waits for the chunk to reach a checkpoint
    worker.send(signal.SIGTERM)
    time.sleep(1.5)
    assert worker.alive(), worker.tail()

    # Then a second signal makes it exit at once, with 130
    sent_at = worker.send(signal.SIGTERM)
    assert worker.wait_exit(10) == 130, worker.tail()
    assert time.time() - sent_at < 5
