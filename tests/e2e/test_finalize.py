"""(e) Finalize completes once and never runs twice at once, even when workers crash.

The test job's finalize logs its start and end and takes 3 s, longer than its 2 s lease,
so it only survives if its lease is renewed; a worker killed inside it makes exactly one
more run, which starts after the kill.
"""

from __future__ import annotations

import json
import signal

import pytest

from checkpoint import messages
from tests.e2e.e2e_jobs import SUMMARY_FILE
from tests.e2e.harness import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

FINALIZE_SECONDS = 3.0


def summary(cluster: Cluster) -> dict:
    return json.loads((cluster.workdir / SUMMARY_FILE).read_text())


def assert_never_overlapping(runs: list[tuple[float, float]]) -> None:
    """``(start, end)`` runs, ordered: each starts after the one before has ended."""
    for (_, end), (start, _) in zip(runs, runs[1:], strict=False):
        assert start >= end, f"finalize runs overlap: {runs}"


def test_finalize_runs_once_with_several_workers(cluster: Cluster) -> None:
    # Given a job of 12 short chunks and three worker processes (one supervisor)
    params = cluster.params(chunks=12, items=2, finalize_seconds=FINALIZE_SECONDS)
    job_id = cluster.submit("Finalized", params)

    # When they run it to the end
    assert cluster.start("Finalized", workers=3).wait_exit(60) == 0, cluster.diagnostics()

    # Then finalize ran exactly once, to its end, with every chunk's result
    assert cluster.job_state(job_id) == "done"
    (started,) = cluster.events("finalize_start")
    (ended,) = cluster.events("finalize_end")
    assert started["pid"] == ended["pid"]
    assert ended["at"] - started["at"] >= FINALIZE_SECONDS
    assert (started["total"], started["done"]) == (12, 12)
    assert summary(cluster) == {"job_id": job_id, "chunks": 12, "items": 24}
    assert cluster.status(job_id)["finalize"] == "done"

    # When a stray finalize message arrives after the job is done
    stray = messages.TaskMessage("final", cluster.job("Finalized"), job_id)
    cluster.queues.send(cluster.queue("finalized"), messages.encode(stray))
    assert cluster.start("Finalized").wait_exit() == 0, cluster.diagnostics()

    # Then it is deleted unrun: finalize never runs again once recorded complete
    assert len(cluster.events("finalize_start")) == 1
    assert cluster.queues.approximate_length(cluster.queue("finalized")) == 0


def test_worker_killed_inside_finalize_makes_one_more_run(cluster: Cluster) -> None:
    # Given a job of 6 short chunks and three workers
    params = cluster.params(chunks=6, items=2, finalize_seconds=FINALIZE_SECONDS)
    job_id = cluster.submit("Finalized", params)
    workers = [cluster.start("Finalized") for _ in range(3)]

    # When the worker running finalize is SIGKILLed inside it
    first = cluster.wait_event("finalize_start")[0]
    victim = cluster.worker_of(first["pid"])
    killed_at = victim.send(signal.SIGKILL)
    assert victim.wait_exit(10) == -signal.SIGKILL

    # Then another worker runs finalize once more, to its end, after the kill
    for worker in workers:
        if worker is not victim:
            assert worker.wait_exit(60) == 0, cluster.diagnostics()
    assert cluster.job_state(job_id) == "done"
    starts = cluster.events("finalize_start")
    (ended,) = cluster.events("finalize_end")
    assert len(starts) == 2, starts
    assert starts[1]["pid"] == ended["pid"] != victim.pid
    assert_never_overlapping([(first["at"], killed_at), (starts[1]["at"], ended["at"])])
    assert summary(cluster) == {"job_id": job_id, "chunks": 6, "items": 12}


def test_a_finalizer_paused_past_its_lease_stops_at_its_next_result(cluster: Cluster) -> None:
    # Given a job whose finalize sleeps, then reads the chunks' results, and two workers
    params = cluster.params(chunks=4, items=2, finalize_seconds=FINALIZE_SECONDS)
    job_id = cluster.submit("Finalized", params)
    workers = [cluster.start("Finalized") for _ in range(2)]

    # When the worker running finalize is paused past its lease, another worker takes
    # finalize over, and the paused one is then continued
    first = cluster.wait_event("finalize_start")[0]
    paused = cluster.worker_of(first["pid"])
    cluster.pause(paused)
    (other,) = [worker for worker in workers if worker is not paused]
    cluster.wait_until(
        lambda: cluster.events("finalize_start", pid=other.pid), "another finalize", 30
    )
    continued_at = paused.send(signal.SIGCONT)

    # Then the continued finalizer stops at its first look at the results (LeaseLost),
    # runs none of its remainder, and never records finalize as done over the new owner
    (stopped,) = cluster.wait_event("finalize_exit", pid=paused.pid)
    assert stopped["error"] == "LeaseLost"
    assert stopped["at"] - continued_at < 5
    print(f"continued finalizer stopped {stopped['at'] - continued_at:.3f} s after SIGCONT")
    for worker in workers:
        assert worker.wait_exit(60) == 0, cluster.diagnostics()
    (ended,) = cluster.events("finalize_end")
    assert ended["pid"] == other.pid
    assert cluster.job_state(job_id) == "done"
    assert summary(cluster) == {"job_id": job_id, "chunks": 4, "items": 8}
