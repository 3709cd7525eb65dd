"""Submitting: ``--delay`` holds planning back; the same ``--job-id`` makes one job, and
refuses another job under it."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter

import pytest

from checkpoint.errors import NotFound
from tests.azurite import Azurite
from tests.e2e.harness import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``): a status lists the
    store's planning jobs, each read in full, and the session's holds every other test's;
    the delay's half-way look must come back well inside the delay."""
    return own_azurite


#: Long enough that a slow `runner submit` (seconds, on a loaded machine) still leaves
#: the half-way look inside the delay.
DELAY_SECONDS = 8
#: Azure and Azurite count visibility to about 10 ms; allow for that and clock reads.
CLOCK_SLACK_SECONDS = 0.25


def test_delay_holds_planning_back(cluster: Cluster) -> None:
    # Given a worker already serving the queue
    worker = cluster.start("Delayed", burst=False, ready=True)

    # When a job is submitted with --delay 8
    before = time.time()
    job_id = cluster.submit("Delayed", cluster.params(chunks=2, items=2), delay=DELAY_SECONDS)
    submitted = time.time()

    # Then planning has not started half way through the delay (looked at only where
    # the submitting process returned in time: on a loaded machine its start-up alone
    # once took longer than the delay) ...
    time.sleep(max(0.0, before + DELAY_SECONDS / 2 - time.time()))
    if time.time() < before + DELAY_SECONDS - 0.5:
        job = cluster.store.get_job(job_id)
        assert (job.state, job.total) == ("planning", None)
        try:
            plan = cluster.store.get_task(job_id, "plan", 0)
        except NotFound:
            pass  # not even received yet
        else:
            assert (plan.state, plan.attempt) == ("waiting", 0)
        assert not cluster.events("split")
    # ... starts once the delay is over, not before (the worker's own record of when
    # split ran, whenever this looks), and the job completes
    (split,) = cluster.wait_event("split")
    assert split["at"] >= before + DELAY_SECONDS - CLOCK_SLACK_SECONDS
    assert split["at"] <= submitted + DELAY_SECONDS + 10
    cluster.wait_job(job_id)
    assert cluster.sink() == {item: str(item) for item in range(4)}
    worker.send(signal.SIGTERM)
    assert worker.wait_exit() == 0


def test_submitting_one_job_id_twice_makes_one_job(cluster: Cluster) -> None:
    # Given a job submitted twice under one --job-id
    job_id = f"once-{cluster.tag}"
    assert cluster.submit("Delayed", cluster.params(chunks=3, items=2), job_id=job_id) == job_id
    assert cluster.submit("Delayed", cluster.params(chunks=3, items=2), job_id=job_id) == job_id
    # and a third time asking for another job under it, which is refused
    other = json.dumps(cluster.params(chunks=5, items=2))
    refused = cluster.runner(
        "submit", cluster.job("Delayed"), "--params", other, "--job-id", job_id, check=False
    )
    assert refused.returncode == 1 and "exists already with other params" in refused.stderr

    # Then there is one job, with the first submit's params (listed among the planning
    # ones only: the session's store holds every other test's jobs too, and a status of
    # all of them took over a minute on a loaded machine)
    planning = cluster.runner_json("status", "--state", "planning")
    assert [job["job_id"] for job in planning].count(job_id) == 1

    # When a worker runs it
    assert cluster.start("Delayed").wait_exit() == 0, cluster.diagnostics()

    # Then it was planned once and each of its 3 chunks processed once
    status = cluster.status(job_id)
    assert (status["state"], status["chunks"]["total"], status["chunks"]["done"]) == (
        "done",
        3,
        3,
    )
    assert len(cluster.events("split")) == 1
    assert sorted(Counter(e["chunk"] for e in cluster.events("start")).items()) == [
        (0, 1),
        (1, 1),
        (2, 1),
    ]
    assert cluster.sink() == {item: str(item) for item in range(6)}

    # When it is submitted again once done, nothing new is queued
    assert cluster.submit("Delayed", cluster.params(chunks=3, items=2), job_id=job_id) == job_id
    assert cluster.queues.approximate_length(cluster.queue("delayed")) == 0
    assert cluster.job_state(job_id) == "done"
