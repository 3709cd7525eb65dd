"""``chunk.publish`` and ``chunk.taken_over`` through the runner's own task handling, on
both backends with a FakeClock: a publication is a fenced write (refused once another
worker holds the chunk, retried in place through storage trouble), what was published
reaches ``finalize``, and a claim tells the new attempt whom it took the chunk over from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from checkpoint import layout, settle
from checkpoint.records import OUTPUTS, SPARK_SESSION
from checkpoint.workers import WorkerBook, WorkerRecord
from jobs.chunk import Chunk, Takeover
from jobs.summary import JobSummary
from tests.backends import Backend
from tests.runner.world import (
    FINALIZED,
    MEANWHILE,
    OTHER_WORKER,
    Verdicts,
    World,
    _nothing,
    make_world,
)

#: What each chunk saw of its claim, by job id: (claim, taken_over, published before).
SEEN: dict[str, list[tuple[str, Takeover | None, dict[str, Any]]]] = {}
SESSION = json.dumps({"endpoint": "127.0.0.1:15002", "session_id": "s-1", "user_id": "u"})


def publishing(self: Verdicts, chunk: Chunk) -> Any:
    """Verdicts' chunk, publishing its output (after whatever happens meanwhile)."""
    SEEN.setdefault(chunk.job_id, []).append((chunk.claim, chunk.taken_over, chunk.published()))
    MEANWHILE.get(chunk.job_id, _nothing)()
    chunk.publish("out/part", {"rows": 3, "attempt": chunk.claim})
    chunk.record_spark_session(SESSION)
    chunk.record_spark_session(SESSION)  # recorded already: no second write
    return chunk.index


def finalizing(self: Verdicts, params: Any, summary: JobSummary) -> None:
    FINALIZED.setdefault(summary.job_id, []).append(list(summary.outputs()))


@pytest.fixture
def world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setattr(Verdicts, "process", publishing)
    monkeypatch.setattr(Verdicts, "finalize", finalizing)
    yield from make_world(backend, monkeypatch)


def test_a_publication_is_recorded_with_the_chunk_and_reaches_finalize(world: World):
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)

    world.deliver()

    ((claim, taken_over, before),) = SEEN[job_id]
    assert taken_over is None and before == {}  # a first claim: nothing to take over
    record = {"rows": 3, "attempt": claim}
    assert list(world.store.outputs(job_id)) == [(0, {"out/part": record})]
    task = world.task(job_id)
    assert task.state == "done" and task.properties[SPARK_SESSION] == SESSION
    # and finalize reads the same
    world.send(job_id, "final")
    world.deliver()
    assert FINALIZED[job_id] == [[(0, {"out/part": record})]]


def test_a_publication_is_refused_once_another_worker_holds_the_chunk(world: World):
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    world.during(job_id, world.take_over(job_id))

    world.deliver()

    # The chunk stopped at its publication as at a checkpoint: lease lost, nothing written
    task = world.task(job_id)
    assert task.owner == OTHER_WORKER and task.state == "running"
    assert world.store.value(task.properties, OUTPUTS) is None


def test_a_publication_rides_out_storage_trouble(world: World):
    job_id = world.job([{"act": "ok"}])
    world.send(job_id)
    world.during(job_id, lambda: world.meanwhile.busy_times.update({"records.merge": 2}))

    world.deliver()

    assert world.task(job_id).state == "done"
    assert [outputs for _, outputs in world.store.outputs(job_id)] == [
        {"out/part": {"rows": 3, "attempt": SEEN[job_id][0][0]}}
    ]


def test_a_claim_tells_the_new_attempt_whom_it_took_over_from(world: World):
    # Given a chunk whose attempt on another worker published, recorded its Spark
    # session, and then died (its lease ran out; its worker's heartbeat is long gone)
    job_id = world.job([{"act": "ok"}])
    token = settle.Writer()
    task = world.task(job_id)
    world.store.write_task(
        task,
        {
            "state": "running",
            "owner": OTHER_WORKER,
            "message_id": "message-b",
            "attempt": 1,
            "lease_until": world.clock.now() - timedelta(seconds=1),
            SPARK_SESSION: SESSION,
        },
        {OUTPUTS: {"out/part": {"rows": 2, "attempt": token.claim}}},
        token=token.next(),
    )
    world.send(job_id)

    world.deliver()

    # Then the new attempt knew that attempt, its session and what it had published
    ((claim, taken_over, before),) = SEEN[job_id]
    assert taken_over == Takeover(
        owner=OTHER_WORKER, claim=token.claim, spark_session=SESSION, owner_gone=True
    )
    assert before == {"out/part": {"rows": 2, "attempt": token.claim}}
    assert claim != token.claim
    # and its own publication replaced the old one
    assert list(world.store.outputs(job_id)) == [(0, {"out/part": {"rows": 3, "attempt": claim}})]


def test_an_owner_still_beating_is_not_taken_for_gone(world: World):
    # Given the last attempt's worker still alive by its heartbeat
    job_id = world.job([{"act": "ok"}])
    now = world.clock.now()
    WorkerBook(world.backend.storage.records).beat(
        WorkerRecord(
            worker_id=OTHER_WORKER,
            host="h",
            pid=1,
            queues=(world.queue,),
            job_types=(),
            concurrency=1,
            tasks=(),
            running=0,
            state="serving",
            started_on=now,
            seen_on=now,
            beat_seconds=5.0,
        ),
        world.store.budget(),
    )
    world.set_task(
        job_id, state="retrying", owner=OTHER_WORKER, attempt=1, **{SPARK_SESSION: SESSION}
    )
    world.send(job_id)

    world.deliver()

    ((_, taken_over, _),) = SEEN[job_id]
    assert taken_over is not None and taken_over.owner_gone is False
    assert taken_over.spark_session == SESSION


def test_an_unreadable_heartbeat_does_not_make_its_worker_gone(world: World):
    job_id = world.job([{"act": "ok"}])
    world.backend.storage.records.upsert(
        layout.WORKERS_TABLE, layout.WORKERS_PARTITION, OTHER_WORKER, {"host": "h"}
    )
    world.set_task(
        job_id, state="retrying", owner=OTHER_WORKER, attempt=1, **{SPARK_SESSION: SESSION}
    )
    world.send(job_id)

    world.deliver()

    ((_, taken_over, _),) = SEEN[job_id]
    assert taken_over is not None and taken_over.owner_gone is False
