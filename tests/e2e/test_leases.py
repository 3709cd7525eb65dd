"""Leases in real time: renewed while a chunk runs long, and fencing once one is lost.

(b) A CPU-bound chunk running over 3x its 2 s lease keeps its message (renewed by the
lease keeper's thread) while a second worker polls: one attempt, one ``process`` call.
(c) A worker paused (SIGSTOP) past its lease loses the chunk to another worker; once
continued (SIGCONT) it is fenced at its next checkpoint: it neither overwrites the new
owner's progress nor finishes the chunk, and keeps running.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.e2e.harness import Cluster, ProgressSampler

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LEASE_SECONDS = 2


def test_chunk_longer_than_its_lease_runs_once_while_another_worker_polls(
    cluster: Cluster,
) -> None:
    # Given one CPU-bound chunk of 8 s (4 leases of 2 s) and two workers
    seconds = 4 * LEASE_SECONDS
    job_id = cluster.submit("Busy", cluster.params(seconds=seconds))
    workers = [cluster.start("Busy"), cluster.start("Busy")]

    # When it has run for three leases, both workers are still there (one polling)
    start = cluster.wait_event("start")[0]
    holder = cluster.worker_of(start["pid"])
    cluster.wait_until(lambda: time.time() >= start["at"] + 3 * LEASE_SECONDS, "three leases")
    assert all(worker.alive() for worker in workers), cluster.diagnostics()
    running = cluster.chunk(job_id)
    assert (running.state, running.attempt) == ("running", 1)

    # Then the chunk was delivered once and processed once, to the end
    for worker in workers:
        assert worker.wait_exit() == 0, cluster.diagnostics()
    assert cluster.job_state(job_id) == "done"
    (started,) = cluster.events("start")
    (ended,) = cluster.events("end")
    assert started["pid"] == ended["pid"] == holder.pid
    assert ended["at"] - started["at"] >= 3 * LEASE_SECONDS
    assert not cluster.events("exit")
    assert cluster.chunk(job_id).attempt == 1


def test_paused_worker_is_fenced_after_its_lease_expired(cluster: Cluster) -> None:
    # Given one chunk of 100 items (0.05 s each, lease 2 s, checkpoints every 0.5 s)
    # and two workers; the one that takes the chunk is "paused" below
    items = 100
    job_id = cluster.submit("Paused", cluster.params(chunks=1, items=items, item_seconds=0.05))
    workers = [cluster.start("Paused"), cluster.start("Paused")]
    start = cluster.wait_event("start")[0]
    paused = cluster.worker_of(start["pid"])
    (other,) = [worker for worker in workers if worker is not paused]
    sampler = ProgressSampler(cluster.storage, job_id)
    sampler.start()
    cluster.wait_until(lambda: len(cluster.events("item", pid=paused.pid)) >= 15, "15 items")

    # When it is paused (SIGSTOP) until its lease has expired and the other worker has
    # taken the chunk over and made progress, then continued (SIGCONT)
    cluster.pause(paused)
    takeover = cluster.wait_event("start", pid=other.pid)[0]
    assert takeover["attempt"] == 2 and takeover["state"] > 0
    cluster.wait_until(lambda: len(cluster.events("item", pid=other.pid)) >= 10, "10 items")
    continued_at = paused.send(signal.SIGCONT)

    # Then the paused worker is fenced at its next checkpoint and stops the chunk
    (fenced,) = cluster.wait_event("exit", pid=paused.pid)
    assert fenced["error"] == "LeaseLost"
    late = [e for e in cluster.events("item", pid=paused.pid) if e["at"] >= continued_at]
    assert len(late) <= 1, "the paused worker went on after its lease was gone"
    assert paused.alive(), "a fenced worker keeps serving"
    # ... the other worker finishes it; the paused one never does
    for worker in workers:
        assert worker.wait_exit() == 0, cluster.diagnostics()
    assert cluster.job_state(job_id) == "done"
    assert [e["pid"] for e in cluster.events("end")] == [other.pid]
    chunk = cluster.chunk(job_id)
    assert cluster.store.value(chunk.properties, "result")["pid"] == other.pid
    assert chunk.attempt == 2
    # ... and the durable progress never went back (the paused worker wrote nothing)
    progress = [value for _, value in sampler.stop() if value is not None]
    assert progress == sorted(progress) and progress[-1] == items, progress
    assert cluster.sink() == {item: str(item) for item in range(items)}
