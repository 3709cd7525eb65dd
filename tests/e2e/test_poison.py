"""Poison: a chunk that always fails, and messages that were never work.

(d) A chunk failing on every attempt is retried with backoff, then moved to
``<queue>-poison`` after ``max_attempts`` with its error recorded and shown by ``runner
status`` and ``runner poison list``; the job ends failed with every other chunk done;
once the cause is fixed, ``runner poison redrive`` lets the job complete and finalize.
(f) A corpus of bad messages leaves the worker alive, each message in the poison queue
with a clear reason, and the good work done.
"""

from __future__ import annotations

import random
import signal

import msgpack
import pytest

from checkpoint import messages
from checkpoint.messages import TaskMessage
from tests.e2e.e2e_jobs import FIXED_FLAG
from tests.e2e.harness import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def poisoned(cluster: Cluster, name: str) -> list[dict]:
    """The poison records in a job's poison queue (peeked: left where they are)."""
    found = cluster.queues.peek(cluster.queue(name) + "-poison", max_messages=32)
    records = [messages.read_poisoned(message.body) for message in found]
    assert all(record is not None for record in records), records
    return records  # type: ignore[return-value]


def test_failing_chunk_is_poisoned_shown_and_redriven(cluster: Cluster) -> None:
    # Given a job of 4 chunks whose chunk 2 fails until a flag file exists
    # (max_attempts 3, backoff 0.5-1 s)
    params = cluster.params(chunks=4, items=3, item_seconds=0.0, fail_chunk=2)
    job_id = cluster.submit("Flaky", params)

    # When a worker runs it until no work is left
    assert cluster.start("Flaky").wait_exit(60) == 0, cluster.diagnostics()

    # Then chunk 2 was tried 3 times, then poisoned; the job failed, the rest is done
    assert [e["attempt"] for e in cluster.events("fail", chunk=2)] == [1, 2, 3]
    status = cluster.status(job_id)
    assert status["state"] == "failed"
    assert {k: status["chunks"][k] for k in ("total", "done", "poisoned")} == {
        "total": 4,
        "done": 3,
        "poisoned": 1,
    }
    # ... its error is shown by `runner status` (JSON and text) and `runner poison list`
    (shown,) = status["poisoned"]
    assert (shown["index"], shown["error_type"]) == (2, "RuntimeError")
    assert "chunk 2 always fails (attempt 3)" in shown["error_message"]
    assert "chunk 2 always fails (attempt 3)" in cluster.runner("status", job_id).stdout
    (listed,) = cluster.runner_json("poison", "list", job_id)
    assert (listed["index"], listed["attempt"], listed["error_type"]) == (2, 3, "RuntimeError")
    assert "always fails" in listed["error_message"] and "Traceback" in listed["traceback"]
    assert "chunk #2 after 3 attempt(s)" in cluster.runner("poison", "list", job_id).stdout
    # ... its message is in <queue>-poison with the reason, the job queue is empty
    (record,) = poisoned(cluster, "flaky")
    assert record["reason"].startswith("failed on attempt 3 of 3: RuntimeError(")
    original = messages.decode(bytes(record["original"]))
    assert (original.kind, original.job_id, original.index) == ("chunk", job_id, 2)
    assert cluster.queues.approximate_length(cluster.queue("flaky")) == 0
    assert not cluster.events("finalize_start")

    # When the cause is fixed and the poisoned chunk redriven
    (cluster.workdir / FIXED_FLAG).touch()
    assert "redrove 1" in cluster.runner("poison", "redrive", job_id).stdout
    assert cluster.job_state(job_id) == "running"
    assert cluster.start("Flaky").wait_exit(60) == 0, cluster.diagnostics()

    # Then the job completes and finalizes, and the poison queue is empty
    assert cluster.job_state(job_id) == "done"
    assert len(cluster.events("finalize_end")) == 1
    assert cluster.sink() == {item: str(item) for item in range(12)}
    assert poisoned(cluster, "flaky") == []
    assert cluster.runner_json("poison", "list", job_id) == []


def bad_messages(cluster: Cluster, job_id: str) -> dict[bytes, str]:
    """Message bodies that are not work -> the reason their poison record must give."""
    ours = cluster.job("Items")
    envelope = messages.encode(TaskMessage("chunk", ours, job_id, 0))
    return {
        b"": "empty message",
        random.Random(7).randbytes(40): "not a chunkrunner message",
        b"not msgpack, just some text": "not a chunkrunner message (not msgpack",
        envelope[:-5]: "not a chunkrunner message (not msgpack",  # truncated
        msgpack.packb({"type": "order", "id": 7}): "not a chunkrunner message (no",
        msgpack.packb([1, 2, 3]): "not a chunkrunner message (no",
        msgpack.packb({"chunkrunner": 99, "k": "c"}): "unsupported envelope version 99",
        msgpack.packb({"chunkrunner": 1, "k": "x", "t": ours}): "malformed envelope",
        messages.encode(TaskMessage("chunk", "elsewhere:Other", job_id, 0)): (
            "unknown job type 'elsewhere:Other'"
        ),
        messages.encode(TaskMessage("chunk", ours, "ghost-job", 0)): "no job 'ghost-job'",
        messages.encode(TaskMessage("chunk", ours, "no/such job?", 0)): (
            "malformed envelope: invalid job id"
        ),
        messages.encode(TaskMessage("chunk", ours, job_id, 999)): (
            f"no record of chunk 999 of job '{job_id}'"
        ),
    }


def test_bad_messages_are_poisoned_and_the_worker_goes_on(cluster: Cluster) -> None:
    # Given a good job of 3 chunks, and a corpus of bad messages on its queue
    # (on Azurite also plain text put by the raw SDK, which is not even base64)
    job_id = cluster.submit("Items", cluster.params(chunks=3, items=4, item_seconds=0.0))
    queue = cluster.queue("items")
    corpus = bad_messages(cluster, job_id)
    for body in corpus:
        cluster.queues.send(queue, body)
    if cluster.backend == "azurite":
        from azure.storage.queue import QueueClient

        text = "plain text from another producer, not base64!"
        with QueueClient.from_connection_string(cluster.storage, queue) as raw:
            raw.send_message(text)
        corpus[text.encode()] = "not a chunkrunner message (not msgpack"

    # When a worker serves the queue
    worker = cluster.start("Items", burst=False)

    # Then every bad message lands in <queue>-poison with a clear reason ...
    records = cluster.wait_until(
        lambda: (found := poisoned(cluster, "items")) and len(found) >= len(corpus) and found,
        f"{len(corpus)} poisoned messages",
    )
    reasons = {bytes(record["original"]): record["reason"] for record in records}
    assert len(records) == len(reasons) == len(corpus)
    for body, expected in corpus.items():
        assert reasons[body].startswith(expected), (body, reasons[body])
        assert all(record["queue"] == queue for record in records)
    # ... the good work is done, and the worker is still serving
    cluster.wait_job(job_id)
    assert cluster.sink() == {item: str(item) for item in range(12)}
    assert len(cluster.events("finalize_end")) == 1
    assert worker.alive(), worker.tail()
    assert worker.log().count(" poisoned: ") >= len(corpus)
    cluster.wait_until(lambda: cluster.queues.approximate_length(queue) == 0, "an empty queue")
    worker.send(signal.SIGTERM)
    assert worker.wait_exit() == 0
