"""A program that is not ours starts a job: one JSON message on ``<queue>-intake``, put
by the plain azure-storage-queue SDK on Azurite (by the queue store on the embedded
store, which no other program can write), is taken by a real ``runner start --burst``
process, and run to the end; the garbage beside it is rejected with its reason, which
``runner poison list`` shows and ``runner poison purge`` deletes."""

from __future__ import annotations

import base64
import json

import pytest
from azure.storage.queue import QueueClient, TextBase64EncodePolicy

from jobs.intake import SCHEMA
from tests.e2e.e2e_jobs import Submitted
from tests.e2e.harness import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def put(cluster: Cluster, queue: str, text: str, encoded: bool = False) -> None:
    """``text`` put as another program puts it: as is, or in base64."""
    if cluster.backend == "azurite":
        policy = TextBase64EncodePolicy() if encoded else None
        with QueueClient.from_connection_string(
            cluster.storage, queue, message_encode_policy=policy
        ) as client:
            client.send_message(text)
    else:
        body = text.encode()
        cluster.queues.send(queue, base64.b64encode(body) if encoded else body)


def test_a_job_put_on_the_intake_queue_runs_and_garbage_is_rejected(cluster: Cluster) -> None:
    # Given the type's queues, made by a first burst worker (nothing to do yet)
    assert cluster.start("Submitted").wait_exit() == 0, cluster.diagnostics()
    queue = cluster.queue("submitted")
    intake = f"{queue}-intake"

    # and, from another program, a submission in base64, the same one again as text,
    # and a line of garbage
    submission = {
        "schema": SCHEMA,
        "submission_id": "nightly-1",
        "job_type": cluster.job("Submitted"),
        "params": cluster.params(chunks=2, items=3),
    }
    put(cluster, intake, json.dumps(submission), encoded=True)
    put(cluster, intake, json.dumps(submission))
    put(cluster, intake, "start the nightly job please")

    # When a burst worker serves the type
    worker = cluster.start("Submitted")
    assert worker.wait_exit() == 0, cluster.diagnostics()

    # Then the submission ran once, as one job under the id derived from it
    job_id = f"{queue}-nightly-1"
    status = cluster.status(job_id)
    assert (status["state"], status["chunks"]["total"], status["chunks"]["done"]) == (
        "done",
        2,
        2,
    )
    assert len(cluster.events("split")) == 1
    assert cluster.sink() == {item: str(item) for item in range(6)}
    assert cluster.queues.approximate_length(intake) == 0
    assert Submitted.intake and "rejected" in worker.log()

    # and the garbage is listed with its reason, then purged
    (listed,) = cluster.runner_json("poison", "list", "--queue", queue)
    (rejected,) = listed["rejected"]
    assert rejected["rejection"]["original"] == "start the nightly job please"
    assert rejected["rejection"]["reason"].startswith("not JSON, neither raw nor base64")
    text = cluster.runner("poison", "list").stdout
    assert f"{queue}-intake-rejected: 1 rejected submission(s)" in text
    purged = cluster.runner("poison", "purge", "--queue", queue).stdout
    assert purged.splitlines()[-1] == "deleted 1 rejected submission(s)"
