"""``chunk.limit`` on a worker (runner/worker/limits/unit_limits.py), on both backends and a fake
clock: units of a named resource are taken from its shared bucket, waited for in short
steps that look at the chunk's stop signal, and the store's trouble is the runner's."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from checkpoint import layout
from checkpoint.clock import FakeClock
from checkpoint.errors import StorageTrouble
from checkpoint.limits.book import RATE_ROW, LimitBook
from checkpoint.limits.rates import parse_rate
from checkpoint.retries import STANDALONE, Budget
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import FaultyStorage
from jobs.chunk import Chunk
from jobs.errors import ChunkStopped, JobCancelled, JobDefinitionError
from jobs.job import ChunkedJob
from runner.worker.leases.lease import Lease
from runner.worker.limits.admission import Admission
from runner.worker.limits.unit_limits import STOP_CHECK_SECONDS, LimitedControl
from tests.backends import Backend
from tests.runner.world import Meanwhile

LEASE_SECONDS = 30


class Waiting:
    """A claimed chunk of a job type naming one resource of ``rate``, under a
    LimitedControl; ``on_wait`` runs at each of the control's waits."""

    def __init__(self, backend: Backend, rate: str, storage: Storage | None = None):
        self.clock = FakeClock()
        self.resource = f"ul-{uuid.uuid4().hex[:10]}"
        self.cls: type[ChunkedJob] = type(
            "UsesDb", (ChunkedJob,), {"queue": "ul-jobs", "limits": {self.resource: rate}}
        )
        storage = storage or backend.storage
        store = CheckpointStore(storage, self.clock)
        job_id = f"ul-{uuid.uuid4().hex[:10]}"
        store.create_job(job_id, self.cls.job_type(), self.cls.queue, {})
        store.add_chunks(job_id, 0, [{}])
        task = store.get_task(job_id, "chunk", 0)
        claimed = store.write_task(task, {"state": "running", "owner": "me", "attempt": 1}, {})
        now = self.clock.monotonic()
        lease = Lease("ul-jobs", "m-1", "r-1", LEASE_SECONDS, acquired_at=now, visible_at=now + 999)
        self.stopping = threading.Event()
        self.book = LimitBook(backend.storage.records, self.clock)
        admission = Admission(LimitBook(storage.records, self.clock), self.clock, "me", [self.cls])
        self.control = LimitedControl(store, claimed, lease, self.clock, 0.0, self.stopping)
        self.control.admission, self.control.job_class = admission, self.cls
        self.waits: list[float] = []
        self.on_wait: Any = None
        real_wait = self.clock.wait

        def wait(event: threading.Event, seconds: float) -> bool:
            self.waits.append(seconds)
            if self.on_wait is not None:
                self.on_wait()
            return real_wait(event, seconds)

        self.clock.wait = wait  # type: ignore[method-assign]
        self.chunk = Chunk(
            job_id=job_id,
            index=0,
            payload={},
            params={},
            state=None,
            attempt=1,
            control=self.control,
        )

    def tokens(self) -> float:
        bucket = self.book.get(self.resource, Budget(STANDALONE, self.clock)).rate
        assert bucket is not None
        return bucket.tokens


@pytest.fixture
def waiting(backend: Backend) -> Any:
    CheckpointStore(backend.storage, FakeClock()).ensure()
    return lambda rate, storage=None: Waiting(backend, rate, storage)


def test_units_are_taken_at_once_within_the_rate_then_waited_for(waiting: Any):
    # Given a resource of 4 a second (the class value creates it at the first call)
    one = waiting("4/s")
    one.chunk.limit(one.resource)
    one.chunk.limit(one.resource, units=3)
    assert one.waits == []  # the first second's burst
    # When 6 more are asked for: 1.5 s of tokens, waited for in steps of 0.25 s at most
    one.chunk.limit(one.resource, units=6)
    assert one.waits and max(one.waits) <= STOP_CHECK_SECONDS
    assert sum(one.waits) == pytest.approx(1.5)
    assert one.tokens() == pytest.approx(0)


def test_a_chunk_waiting_for_a_token_stops_when_the_worker_stops(waiting: Any):
    one = waiting("1/h")
    one.chunk.limit(one.resource)  # the only token for an hour
    one.on_wait = lambda: one.stopping.set() if len(one.waits) == 3 else None
    with pytest.raises(ChunkStopped):
        one.chunk.limit(one.resource)
    assert len(one.waits) == 3  # it stopped at the next look, not an hour later


def test_a_chunk_waiting_for_a_token_stops_when_its_job_is_cancelled(waiting: Any):
    one = waiting("1/h")
    one.chunk.limit(one.resource)
    one.on_wait = lambda: one.control.stop_for("cancelled")
    with pytest.raises(JobCancelled):
        one.chunk.limit(one.resource)


def test_an_unknown_resource_is_a_clear_error_at_the_call(waiting: Any):
    one = waiting("4/s")
    with pytest.raises(
        JobDefinitionError,
        match=r"chunk.limit\('orders'\): UsesDb.limits names no such resource \(it names: ul-",
    ):
        one.chunk.limit("orders")
    with pytest.raises(ValueError, match="units must be a whole number >= 1"):
        one.chunk.limit(one.resource, units=0)


def test_a_resource_cleared_by_hand_comes_back_from_the_class(waiting: Any):
    one = waiting("4/s")
    one.chunk.limit(one.resource)
    one.book.set_rate(one.resource, parse_rate("1/s"), one.control.lease_budget())
    one.chunk.limit(one.resource)  # the hand-set bucket: its one token
    one.book.clear(one.resource, one.control.lease_budget())
    one.chunk.limit(one.resource, units=4)
    bucket = one.book.get(one.resource, one.control.lease_budget()).rate
    assert bucket is not None and bucket.rate.text == "4/s" and one.waits == []


def test_storage_trouble_taking_units_is_the_runners_not_the_chunks(backend: Backend, waiting: Any):
    plan = Meanwhile()
    faulty = FaultyStorage(backend.storage, plan).storage
    one = waiting("4/s", faulty)
    plan.busy.add("records.get")
    one.control.lease.visible_at = one.clock.monotonic() + 1  # a short budget
    with pytest.raises(StorageTrouble, match="limit ul-"):
        one.chunk.limit(one.resource)


def test_an_unreadable_resource_record_hands_the_chunk_back_not_poisons_it(
    backend: Backend, waiting: Any
):
    one = waiting("4/s")
    one.chunk.limit(one.resource)
    backend.storage.records.upsert(layout.LIMITS_TABLE, one.resource, RATE_ROW, {"rate": "4/s"})
    with pytest.raises(StorageTrouble, match=r"--clear` resets it"):
        one.chunk.limit(one.resource)
