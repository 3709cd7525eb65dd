"""Cancel and pause a job while real workers run it (docs/semantics.md §16).

Items jobs with a 2 s lease (renewed every 1.4 s), chunks of items taking 0.1 s each: a
cancel or a pause must reach every running chunk within about one renewal, stop it at
its next checkpoint with its state saved, and run nothing more of the job.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.e2e.harness import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LEASE_SECONDS = 2.0
#: A renewal every 70 % of the lease, the job record fresh within 1 s, a checkpoint every
#: item (0.1 s), and a loaded 2-core machine: far above what one renewal takes (the
#: exact timing is tested on the fake clock, tests/runner/worker/test_stop_orders.py; 3 leases
#: were once passed by 0.5 s with the machine's cores taken twice over).
STOP_BOUND_SECONDS = 5 * LEASE_SECONDS


def test_a_cancel_stops_running_chunks_within_a_renewal_and_runs_nothing_more(
    cluster: Cluster,
) -> None:
    params = cluster.params(chunks=4, items=100, item_seconds=0.1)
    job_id = cluster.submit("Items", params)
    worker = cluster.start("Items", "--concurrency", "2", burst=False)
    cluster.wait_event("item", count=6)

    cancelled_at = time.time()
    cluster.runner("cancel", job_id, "--reason", "wrong input file")
    exits = cluster.wait_event("exit", count=2, timeout=30)

    # Then both running chunks stopped at a checkpoint, by the cancel, within the bound
    assert {e["error"] for e in exits} == {"JobCancelled"}, exits
    stopped_after = max(e["at"] for e in exits) - cancelled_at
    print(f"running chunks stopped {stopped_after:.2f} s after the cancel")
    assert stopped_after < STOP_BOUND_SECONDS
    # and nothing of the job ran afterwards: no item, no other chunk, no finalize
    time.sleep(LEASE_SECONDS)
    last_exit = max(e["at"] for e in exits)
    assert [e for e in cluster.events("item") if e["at"] > last_exit + 0.5] == []
    assert {e["chunk"] for e in cluster.events("start")} == {e["chunk"] for e in exits}
    assert cluster.events("finalize_start") == []
    status = cluster.status(job_id)
    assert status["state"] == "cancelled" and status["cancel_reason"] == "wrong input file"
    assert status["chunks"]["running"] == 0 and status["poisoned"] == []
    # the waiting chunks' messages are gone from the queue, the worker serves on
    cluster.wait_until(
        lambda: cluster.queues.approximate_length(cluster.queue("items")) == 0, "the queue to empty"
    )
    assert worker.alive()
    worker.send(signal.SIGTERM)
    assert worker.wait_exit() == 0
    # and cancelling again is harmless; cancelling a finished job is an error
    assert cluster.runner("cancel", job_id).returncode == 0
    done = cluster.submit("Items", cluster.params(chunks=1, items=1))
    cluster.start("Items").wait_exit(60)
    refused = cluster.runner("cancel", done, check=False)
    assert refused.returncode == 1 and "has ended (done)" in refused.stderr


def test_a_paused_job_stops_hands_its_chunks_back_and_resumes_from_their_checkpoints(
    cluster: Cluster,
) -> None:
    # Each chunk's last item waits for the gate: `runner pause` is a process of its own,
    # and on a loaded machine it took over 8 s to start and write (chunks of 8 s of
    # items finished first).
    gate = cluster.workdir / "gate"
    params = cluster.params(chunks=2, items=40, item_seconds=0.2, gate=str(gate))
    job_id = cluster.submit("Items", params)
    worker = cluster.start("Items", "--concurrency", "2", burst=False)
    cluster.wait_event("item", count=6)

    cluster.runner("pause", job_id)
    exits = cluster.wait_event("exit", count=2, timeout=30)
    assert {e["error"] for e in exits} == {"JobPaused"}, exits

    # While paused: nothing runs, no attempt is counted, status says so
    time.sleep(2)
    items_while_paused = len(cluster.events("item"))
    time.sleep(2)
    assert len(cluster.events("item")) == items_while_paused
    status = cluster.status(job_id)
    assert status["paused"] and status["state"] == "running"
    assert all(cluster.chunk(job_id, index).attempt == 0 for index in (0, 1))

    # When resumed, the job goes on from the checkpoints and completes
    gate.touch()
    cluster.runner("resume", job_id)
    cluster.wait_job(job_id, timeout=60)
    starts = cluster.events("start")
    resumed = [e for e in starts if e["at"] > max(x["at"] for x in exits)]
    assert {e["chunk"] for e in resumed} == {0, 1}
    assert all(e["state"] is not None and e["attempt"] == 1 for e in resumed), resumed
    assert len(cluster.events("finalize_end")) == 1
    assert cluster.sink() and sorted(cluster.sink()) == list(range(80))
    worker.send(signal.SIGTERM)
    assert worker.wait_exit() == 0
