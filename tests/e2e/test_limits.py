"""A running limit held across real worker processes (``runner start --workers 2``),
each with four chunk slots: never more chunks at once than ``max_running``, and every
slot back once the job is done, on both backends."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Cluster

pytestmark = pytest.mark.e2e

MAX_RUNNING = 2


def most_at_once(starts: list[float], ends: list[float]) -> int:
    running = most = 0
    for _, change in sorted([(at, 1) for at in starts] + [(at, -1) for at in ends]):
        running += change
        most = max(most, running)
    return most


def test_two_worker_processes_of_four_slots_run_at_most_max_running_chunks(cluster: Cluster):
    # Given a job of 6 chunks of about 0.6 s, and 2 worker processes of 4 slots each
    job_id = cluster.submit("Limited", cluster.params(chunks=6, items=2, item_seconds=0.3))
    cluster.start("Limited", "--concurrency", "4", workers=2)
    # When it has run
    cluster.wait_job(job_id)
    # Then never more than 2 chunks ran at once, over both processes, and 2 did (which
    # process runs which is up to them: either may take a slot freed by the other)
    starts = [entry["at"] for entry in cluster.events("start")]
    ends = [entry["at"] for entry in cluster.events("end")]
    assert len(starts) == len(ends) == 6
    assert most_at_once(starts, ends) == MAX_RUNNING
    # And the slots went back: `runner limit` shows none held
    (shown,) = cluster.runner_json("limit", cluster.queue("limited"))
    assert (shown["kind"], shown["max_running"], shown["running"]) == ("running", 2, 0)
