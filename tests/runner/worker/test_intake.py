"""Jobs submitted by other programs (runner/worker/intake.py, docs/intake.md), on both
backends: a message put on ``<queue>-intake`` becomes one job, whatever its encoding,
however often it is put, wherever its worker dies and whatever the store does; what
cannot be read is moved to ``<queue>-intake-rejected`` with its reason on first sight.

On Azurite the messages are put by the plain azure-storage-queue SDK, as another
program would put them (text as is, or through ``TextBase64EncodePolicy``, or bytes
through ``BinaryBase64EncodePolicy``), never by our backend. The embedded store has no
other producer: a message is its bytes, put by its queue store. A worker is assembled
as the loop does (``runner.worker.loop.assemble``) on a FakeClock, its storage wrapped
to be killed or to fail at any call, and handles one message at a time.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from azure.storage.queue import BinaryBase64EncodePolicy, QueueClient, TextBase64EncodePolicy

from checkpoint import layout, messages
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import LeaseLost
from checkpoint.records import JobRecord
from checkpoint.storage import ANY_ETAG, QueueMessage, QueueStore
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import Fault, FaultyStorage, ScriptedFaults, parse_fault_spec
from jobs import Chunk, ChunkedJob
from jobs.backoff import compute_backoff
from jobs.intake import SCHEMA
from jobs.job_run import SimulatedCrash
from jobs.rejection import Rejection, read_rejected
from runner.worker.intake import AFTER_DELIVERIES, AFTER_WAIT, MAX_DELIVERIES
from runner.worker.loop import WorkerLoop, WorkerSettings, assemble
from runner.worker.supervisor import _queues as supervisor_queues
from runner.worker.tasks.life import handle
from tests.azurite import Azurite
from tests.backends import Backend
from tests.runner.world import QueueLog

LEASE_SECONDS = 30
#: Storage calls of the worker that write (those a lost answer can leave applied).
WRITES = {"insert", "replace", "merge", "upsert", "batch", "send", "send_many", "delete"}


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite: its tests count the store's jobs, and the session's
    holds every other test's."""
    return own_azurite


class Submitted(ChunkedJob):
    """A job type taking submissions (each test gives it a fresh queue)."""

    queue = "intake-submitted"
    intake = True
    lease_seconds = LEASE_SECONDS

    def validate(self, params: Any) -> None:
        if params.get("explode"):
            raise RuntimeError("validate blew up")
        if params.get("rows", 0) < 0:
            raise ValueError("rows must be >= 0")

    def split(self, params: Any) -> Any:
        return range(params.get("chunks", 1))

    def process(self, chunk: Chunk) -> None:
        pass


class Plan:
    """The worker's fate at each storage call: killed just before the ``kill_at``-th
    (as by SIGKILL) or just after it was applied, scripted faults, random ones."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, kill_at: int | None = None, applied: bool = False) -> None:
        self.calls, self.kill_at, self.applied, self.dead = 0, kill_at, applied, False
        self.script = ScriptedFaults()
        self.random: Any = None
        #: Calls failing busy, unapplied, every time (the store past its targets).
        self.busy: set[str] = set()

    def decide(self, service: str, method: str) -> Fault | None:
        if self.dead:
            raise SimulatedCrash(f"the worker died before {service}.{method}")
        self.calls += 1
        if self.calls == self.kill_at:
            self.dead = True
            if not self.applied:
                raise SimulatedCrash(f"killed before {service}.{method}")
            return Fault("ambiguous")  # applied; the worker dies before the answer
        fault = self.script.decide(service, method)
        if f"{service}.{method}" in self.busy:
            fault = Fault("busy")
        if fault is None and self.random is not None:
            fault = self.random.decide(service, method)
        return fault


class Producer:
    """Another program putting messages on an intake queue: the plain SDK given a
    connection string (Azurite), else the queue store (the embedded store)."""

    def __init__(self, queues: QueueStore, queue: str, connection: str | None):
        self.queues, self.queue = queues, queue
        self.clients: dict[str, QueueClient] = {}
        if connection is not None:
            policies = {
                "text": None,
                "base64": TextBase64EncodePolicy(),
                "binary": BinaryBase64EncodePolicy(),
            }
            for name, policy in policies.items():
                self.clients[name] = QueueClient.from_connection_string(
                    connection, queue, message_encode_policy=policy
                )

    def put(self, document: Any, encoding: str = "text") -> None:
        """``document`` as JSON text (a str is put as it is), as is or in base64."""
        text = document if isinstance(document, str) else json.dumps(document)
        if self.clients:
            self.clients[encoding].send_message(text)
        elif encoding == "base64":
            self.queues.send(self.queue, base64.b64encode(text.encode()))
        else:
            self.queues.send(self.queue, text.encode())

    def put_bytes(self, data: bytes) -> None:
        if self.clients:
            self.clients["binary"].send_message(data)
        else:
            self.queues.send(self.queue, data)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


class Intake:
    """One worker of :class:`Submitted` and its intake queue, as a test sees them."""

    def __init__(self, backend: Backend, monkeypatch: pytest.MonkeyPatch, connection: str | None):
        self.backend = backend
        self.clock = backend.clock or FakeClock()
        self.queue = f"in-{uuid.uuid4().hex[:10]}"
        monkeypatch.setattr(Submitted, "queue", self.queue)
        self.intake, self.rejected_queue = Submitted.intake_queue(), Submitted.rejected_queue()
        for name in (self.queue, self.intake, self.rejected_queue):
            backend.storage.queues.create_queue(name)
            backend.made.append(("queue", name))
        self.log = QueueLog(backend.storage.queues)
        self.plan = Plan()
        logged = replace(backend.storage, queues=self.log, closer=None)
        self.faulty = FaultyStorage(logged, self.plan, sleep=self.clock.sleep)
        self.worker = assemble(self.faulty.storage, [Submitted], self.clock, "worker-a")
        self.store = CheckpointStore(backend.storage, self.clock)
        self.connection = connection
        self.producer = Producer(backend.storage.queues, self.intake, connection)

    def submission(self, submission_id: str = "s-1", **fields: Any) -> dict[str, Any]:
        document: dict[str, Any] = {
            "schema": SCHEMA,
            "submission_id": submission_id,
            "job_type": Submitted.job_type(),
            "params": {"chunks": 2},
        }
        document.update(fields)
        return {k: v for k, v in document.items() if v is not ...}

    def job_id(self, submission_id: str) -> str:
        return f"{self.queue}-{submission_id}"

    # ----------------------------------------------------------------- when

    def receive(self) -> QueueMessage | None:
        found = self.log.receive(self.intake, max_messages=1, visibility_seconds=LEASE_SECONDS)
        return found[0] if found else None

    def handle(self, message: QueueMessage) -> None:
        assert handle(self.worker, self.intake, message, self.clock.monotonic()) is None

    def deliver(self) -> QueueMessage:
        message = self.receive()
        assert message is not None, "nothing visible on the intake queue"
        self.handle(message)
        return message

    def lapse(self, message: QueueMessage, seconds: int = LEASE_SECONDS) -> None:
        """``seconds`` pass: the message is visible again, if it is still there."""
        if self.backend.clock is not None:
            self.clock.advance(seconds)
            return
        try:
            self.log.make_visible(self.intake, message.id)
        except LeaseLost:
            pass  # deleted

    # ----------------------------------------------------------------- then

    def jobs(self) -> list[JobRecord]:
        return [job for job in self.store.list_jobs() if job.queue == self.queue]

    def rejected(self) -> list[Rejection]:
        found = self.backend.storage.queues.peek(self.rejected_queue, max_messages=32)
        read = [read_rejected(message.body) for message in found]
        assert None not in read
        return [rejection for rejection in read if rejection is not None]

    def in_intake(self) -> int:
        return self.backend.storage.queues.approximate_length(self.intake)

    def planned(self) -> list[str]:
        """The job ids of the planning messages on the job queue, taken off it."""
        queues, ids = self.backend.storage.queues, []
        while batch := queues.receive(self.queue, max_messages=32, visibility_seconds=60):
            ids += [messages.decode(message.body).job_id for message in batch]
            queues.delete_many(self.queue, [(m.id, m.pop_receipt or "") for m in batch])
        return ids


@pytest.fixture
def intake(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Intake]:
    connection = None
    if backend.name == "azurite":
        connection = request.getfixturevalue("azurite").connection_string
    made = Intake(backend, monkeypatch, connection)
    yield made
    made.producer.close()
    assert made.worker.keeper.leased() == [], "a message left leased"


# --------------------------------------------------------------------------- recorded


@pytest.mark.parametrize("encoding", ["text", "base64"])
def test_a_submission_becomes_a_job_and_its_message_is_deleted(intake: Intake, encoding: str):
    # Given a submission put by another program, as JSON text or in base64
    intake.producer.put(
        intake.submission(params={"chunks": 3, "name": "é"}, priority=4, pipeline="nightly"),
        encoding,
    )

    # When the worker receives it
    intake.deliver()

    # Then its job is recorded under the id derived from the submission id, planning
    # with its params, its planning message sent, and the submission deleted
    (job,) = intake.jobs()
    assert job.job_id == intake.job_id("s-1")
    assert (job.job_type, job.state, job.priority, job.pipeline) == (
        Submitted.job_type(),
        "planning",
        4,
        "nightly",
    )
    assert intake.store.params(job) == {"chunks": 3, "name": "é"}
    assert intake.planned() == [job.job_id]
    assert intake.in_intake() == 0
    assert intake.rejected() == []


def test_the_same_submission_put_twice_is_one_job(intake: Intake):
    # Given one submission put twice, once in each encoding
    intake.producer.put(intake.submission())
    intake.producer.put(intake.submission(), "base64")

    # When both are received
    intake.deliver()
    intake.deliver()

    # Then there is one job, and neither message is left or rejected
    assert [job.job_id for job in intake.jobs()] == [intake.job_id("s-1")]
    assert intake.in_intake() == 0
    assert intake.rejected() == []


def test_a_submission_waits_for_a_job_it_runs_after_until_that_is_submitted(intake: Intake):
    # Given a submission naming in its after a job whose own submission comes later
    first = intake.job_id("first")
    intake.producer.put(intake.submission("second", after=[first]))

    # When it is received first
    waiting = intake.deliver()

    # Then nothing is recorded or rejected: it is hidden for 5 s
    assert intake.log.visibility[waiting.id] == [5]
    assert intake.jobs() == [] and intake.rejected() == []
    assert intake.in_intake() == 1

    # When the job it runs after is submitted, and the 5 s pass
    intake.producer.put(intake.submission("first"))
    assert intake.deliver().id != waiting.id
    intake.lapse(waiting, 5)
    again = intake.deliver()

    # Then at its second delivery it is recorded, waiting on the first
    assert (again.id, again.dequeue_count) == (waiting.id, 2)
    second = intake.store.get_job(intake.job_id("second"))
    assert (second.state, second.after) == ("waiting", (first,))
    assert intake.in_intake() == 0 and intake.rejected() == []


def test_a_submission_whose_after_never_comes_is_rejected_at_its_last_delivery(intake: Intake):
    # Given a submission running after a job nobody submits
    intake.producer.put(intake.submission(after=["nobody"]))

    # When it is received again and again, each time once its wait is over
    for delivery in range(1, AFTER_DELIVERIES):
        message = intake.deliver()
        wait = compute_backoff(AFTER_WAIT, delivery)
        assert intake.log.visibility[message.id][-1] == wait
        assert intake.rejected() == []
        intake.lapse(message, wait)
    last = intake.deliver()

    # Then the last delivery rejects it, saying which job never came
    assert last.dequeue_count == AFTER_DELIVERIES == 7
    (rejected,) = intake.rejected()
    assert rejected.field == "after"
    assert rejected.problem == (
        "no job 'nobody', though this submission waited for it to be submitted over 7 deliveries"
    )
    assert intake.jobs() == [] and intake.in_intake() == 0


# --------------------------------------------------------------------------- rejected


def _without(field: str) -> Any:
    return lambda intake: {k: v for k, v in intake.submission().items() if k != field}


GARBAGE = {
    "binary": (b"\x00\xff\x10 not text", None, "not JSON, neither raw nor base64 (not UTF-8"),
    "plain text": ("hello from a shell script", None, "not JSON, neither raw nor base64"),
    "bad JSON": ('{"schema": "chunkrunner.submit/1", ', None, "not valid JSON: Expecting"),
    "an array": ("[1, 2]", None, "a submission is a JSON object, not an array"),
    "another schema version": ({"schema": "chunkrunner.submit/2"}, "schema", "is not read by"),
    "a field missing": (_without("job_type"), "job_type", "missing"),
    "a number for an id": ({"submission_id": 42}, "submission_id", "must be a non-empty string"),
    "a string for a list": ({"after": "a-job"}, "after", "must be a list of job ids"),
    "an unknown field": ({"parms": {}}, "parms", "unknown field"),
    "a job id of its own": ({"job_id": "mine"}, "job_id", "not accepted"),
    "an unknown job type": ({"job_type": "other:Job"}, "job_type", "is not the job type of"),
    "params refused": (
        {"params": {"rows": -1}},
        "params",
        "refused its params: rows must be >= 0",
    ),
    "validate raising": (
        {"params": {"explode": True}},
        "params",
        "validate raised RuntimeError: validate blew up",
    ),
}


@pytest.mark.parametrize("case", list(GARBAGE))
def test_what_cannot_be_a_job_is_rejected_on_first_sight_with_its_reason(intake: Intake, case: str):
    # Given a message that cannot be recorded as a job
    body, field, problem = GARBAGE[case]
    if isinstance(body, bytes):
        intake.producer.put_bytes(body)
    elif callable(body):
        intake.producer.put(body(intake))
    elif isinstance(body, dict):
        intake.producer.put(intake.submission(**body))
    else:
        intake.producer.put(body)

    # When the worker receives it once
    message = intake.deliver()

    # Then it is moved to the rejected queue with the field and what is wrong with it,
    # its original kept, nothing recorded and nothing left on the intake queue
    assert message.dequeue_count == 1
    (rejected,) = intake.rejected()
    assert (rejected.field, rejected.queue, rejected.message_id) == (
        field,
        intake.intake,
        message.id,
    )
    assert problem in rejected.problem, rejected.problem
    assert rejected.reason == (f"{field}: {rejected.problem}" if field else rejected.problem)
    if isinstance(body, bytes):
        assert base64.b64decode(rejected.original_base64 or "") == body
    else:
        assert rejected.original == message.body.decode()
    assert intake.jobs() == [] and intake.in_intake() == 0


def test_an_id_taken_by_another_job_is_rejected_with_what_differs(intake: Intake):
    # Given a job recorded from a submission, and another with its id and other params
    intake.producer.put(intake.submission())
    intake.deliver()
    intake.producer.put(intake.submission(params={"chunks": 9}))

    # When that one is received
    intake.deliver()

    # Then it is rejected, saying what differs and what to do
    (rejected,) = intake.rejected()
    assert rejected.field == "submission_id" and rejected.submission_id == "s-1"
    job_id = intake.job_id("s-1")
    assert rejected.problem == (
        f"job '{job_id}' exists already with other params ({{'chunks': 2}}): use another "
        f"submission_id, or `runner delete {job_id}` first (--force if it has not ended)"
    )
    assert [job.job_id for job in intake.jobs()] == [job_id]


def test_a_record_it_needs_that_cannot_be_read_rejects_it(intake: Intake):
    # Given a job whose record was garbled by hand, and a submission to run after it
    garbled = intake.job_id("garbled")
    intake.store.create_job(garbled, Submitted.job_type(), intake.queue, {})
    intake.backend.storage.records.merge(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, garbled, {"state": "molten"}, etag=ANY_ETAG
    )
    intake.producer.put(intake.submission(after=[garbled]))

    # When it is received
    intake.deliver()

    # Then it is rejected saying which record cannot be read, and why
    (rejected,) = intake.rejected()
    assert rejected.field is None
    assert rejected.problem.startswith("a record it needs cannot be read: job ")
    assert "molten" in rejected.problem
    assert intake.in_intake() == 0


@pytest.mark.parametrize(
    ("kind", "call"),
    [
        ("recorded", "records.batch"),
        ("rejected", "queues.send"),
        ("rejected", "queues.create_queue"),
    ],
)
def test_a_store_busy_for_a_whole_lease_leaves_the_submission_to_come_back(
    intake: Intake, kind: str, call: str
):
    # Given the store refusing one kind of call, busy, for longer than a lease
    intake.plan.busy = {call}
    params = {"chunks": 1} if kind == "recorded" else {"rows": -1}
    intake.producer.put(intake.submission(params=params))

    # When the submission is received
    message = intake.deliver()

    # Then it is left as it is: neither recorded, rejected nor deleted
    assert message.id not in intake.log.deleted
    assert intake.jobs() == [] and intake.rejected() == []
    assert intake.in_intake() == 1

    # When the store answers again and its lease has run out
    intake.plan.busy = set()
    intake.lapse(message)
    again = intake.deliver()

    # Then it is received again and ends as it would have
    assert again.id == message.id
    assert len(intake.jobs() if kind == "recorded" else intake.rejected()) == 1
    assert intake.in_intake() == 0


def test_a_failure_of_no_known_kind_comes_back_then_is_rejected(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
):
    # Given recording failing for a reason nobody planned for (a bug)
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr("runner.worker.intake.record_job", broken)
    intake.producer.put(intake.submission())

    # When it is received until its last delivery
    for _ in range(1, MAX_DELIVERIES):
        message = intake.deliver()
        assert intake.rejected() == [] and intake.in_intake() == 1
        intake.lapse(message)
    intake.deliver()

    # Then it came back each time and is rejected at the last, with the error
    (rejected,) = intake.rejected()
    assert rejected.field is None
    assert rejected.problem == (
        f"not recorded in {MAX_DELIVERIES} deliveries, the last failing with KeyError: 'a bug'"
    )


# --------------------------------------------------------------------------- kills and faults


@pytest.mark.parametrize("applied", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("kind", ["recorded", "rejected"])
def test_a_worker_killed_at_any_call_loses_nothing_and_strands_nothing(
    intake: Intake, kind: str, applied: bool
):
    def put(submission_id: str) -> None:
        params = {"chunks": 1} if kind == "recorded" else {"rows": -1}
        intake.producer.put(intake.submission(submission_id, params=params))

    # Given how many storage calls the worker makes for one submission
    put("clean")
    intake.deliver()
    calls = intake.plan.calls
    assert calls >= (6 if kind == "recorded" else 3)
    intake.planned()

    for point in range(1, calls + 1):
        # When a worker is killed at that call (before it, or once it was applied) ...
        submission_id = f"kill-{point}"
        put(submission_id)
        intake.plan.reset(kill_at=point, applied=applied)
        message = intake.receive()
        assert message is not None
        try:
            intake.handle(message)
        except SimulatedCrash:
            pass
        # ... and a live worker receives what it left once its lease has run out
        intake.plan.reset()
        intake.lapse(message)
        again = intake.receive()
        if again is not None:
            intake.handle(again)

        # Then the submission is in exactly one place: its job, planned; or rejected
        assert intake.in_intake() == 0, point
        if kind == "recorded":
            job = intake.store.get_job(intake.job_id(submission_id))
            assert job.state == "planning" and job.job_id in intake.planned(), point
        else:
            assert submission_id in {r.submission_id for r in intake.rejected()}, point
    if kind == "recorded":
        assert len(intake.jobs()) == calls + 1
        assert intake.rejected() == []
    else:
        # (two copies of one rejection where the worker died between copy and delete)
        rejected = intake.rejected()
        assert {r.submission_id for r in rejected} == {"clean"} | {
            f"kill-{n}" for n in range(1, calls + 1)
        }
        assert intake.jobs() == []


def test_writes_applied_with_their_answers_lost_make_one_job(intake: Intake):
    # Given every kind of write recording a submission makes, each applied once with
    # its answer lost
    intake.producer.put(intake.submission("clean"))
    intake.deliver()
    writes = [call for call in intake.faulty.counts.calls if call.split(".")[1] in WRITES]
    assert {"records.batch", "queues.send", "queues.delete"} <= set(writes)
    for call in writes:
        intake.plan.script.add(call, "ambiguous")
    intake.producer.put(intake.submission(params={"chunks": 5}))

    # When the worker receives the submission until none is left
    delivered = 0
    while message := intake.receive():
        delivered += 1
        intake.handle(message)
        intake.lapse(message)
        assert delivered < 5

    # Then it is one job with its params, planned, and nothing was rejected
    assert intake.plan.script.pending == []
    job = intake.store.get_job(intake.job_id("s-1"))
    assert (job.state, intake.store.params(job)) == ("planning", {"chunks": 5})
    assert len(intake.jobs()) == 2 and intake.rejected() == []
    assert job.job_id in intake.planned()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_under_runner_faults_each_submission_is_one_job(intake: Intake, seed: int):
    # Given the faults RUNNER_FAULTS injects (busy and applied-then-lost calls)
    intake.plan.random = parse_fault_spec(f"busy=0.15,ambiguous=0.15,seed={seed}")
    for n in range(6):
        intake.producer.put(intake.submission(f"s-{n}", params={"chunks": n + 1}))

    # When the worker receives submissions until none is left
    for _ in range(60):
        message = intake.receive()
        if message is None:
            break
        intake.handle(message)
        intake.lapse(message)

    # Then each is exactly one job with its own params, and none was rejected
    assert intake.in_intake() == 0
    jobs = sorted(intake.jobs(), key=lambda job: job.job_id)
    assert [job.job_id for job in jobs] == [intake.job_id(f"s-{n}") for n in range(6)]
    assert [intake.store.params(job)["chunks"] for job in jobs] == list(range(1, 7))
    assert intake.rejected() == []


# --------------------------------------------------------------------------- the loop


class Looped(Submitted):
    """A job type of its own for a whole worker: a burst worker waits for every job of
    its types in the store, and this module's other tests leave theirs planning."""

    queue = "intake-looped"


def test_a_burst_worker_takes_submissions_and_runs_their_jobs(
    intake: Intake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given a store (the embedded one on the real clock) with submissions put on the
    # intake queue of a type no worker has served yet
    monkeypatch.setattr(Looped, "queue", f"{intake.queue}-l")
    storage, own = intake.backend.storage, None
    if intake.backend.clock is not None:
        storage = own = open_storage(str(tmp_path / "real"))
    storage.queues.create_queue(Looped.intake_queue())
    intake.backend.made += [("queue", Looped.intake_queue()), ("queue", Looped.rejected_queue())]
    connection = None if own is not None else intake.connection
    producer = Producer(storage.queues, Looped.intake_queue(), connection)
    submission = {**intake.submission(), "job_type": Looped.job_type()}
    producer.put({**submission, "submission_id": "a", "params": {"chunks": 2}})
    producer.put({**submission, "submission_id": "b", "params": {"chunks": 3}}, "base64")
    producer.put("garbage")

    # When a burst worker serves the type
    settings = WorkerSettings(burst=True, poll_max_seconds=0.05)
    assert WorkerLoop(storage, [Looped], settings).run() == 0

    # Then both jobs ran to the end, the garbage was rejected, the intake is empty
    store = CheckpointStore(storage)
    for name, chunks in (("a", 2), ("b", 3)):
        job = store.get_job(f"{Looped.queue}-{name}")
        assert (job.state, job.total) == ("done", chunks)
    (found,) = storage.queues.peek(Looped.rejected_queue(), max_messages=32)
    rejected = read_rejected(found.body)
    assert rejected is not None and rejected.original == "garbage"
    assert storage.queues.approximate_length(Looped.intake_queue()) == 0
    producer.close()
    if own is not None:
        own.close()


def test_the_metrics_count_the_intake_queue_and_its_rejected_queue():
    counted = supervisor_queues([Submitted])
    assert counted == [
        Submitted.queue,
        f"{Submitted.queue}-poison",
        f"{Submitted.queue}-resume",
        f"{Submitted.queue}-intake",
        f"{Submitted.queue}-intake-rejected",
    ]
