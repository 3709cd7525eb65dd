"""The world a task's life is tested in: a worker built by ``runner.worker.loop.assemble``
on one backend and a FakeClock, its queue, and what happens meanwhile (another worker's
write, a store outage) injected at the storage protocol before a given call of the
worker's. The ``world`` fixture (tests/runner/conftest.py) hands one to each test; the
module docstring of tests/runner/worker/tasks/test_task_lifecycle.py says how time moves on
each backend."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, Literal

import pytest

from checkpoint import layout, messages
from checkpoint.clock import FakeClock
from checkpoint.records import JobRecord, TaskKind, TaskRecord
from checkpoint.storage import ANY_ETAG, NEVER_EXPIRES, QueueMessage, QueueStore, Receipt
from checkpoint.store import CheckpointStore
from checkpoint.testing.faults import Fault, FaultyStorage
from jobs.backoff import Backoff
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.job_run import SimulatedCrash
from jobs.summary import JobSummary
from runner.worker.loop import assemble
from runner.worker.tasks.life import handle
from tests.backends import Backend

LEASE_SECONDS = 30
FIRST_BACKOFF_SECONDS = 10
THIS_WORKER = "worker-a"
OTHER_WORKER = "worker-b"
STATES = "waiting, running, retrying, done, poisoned"

#: What happens meanwhile while a job's user code runs, by job id (set by a test).
MEANWHILE: dict[str, Callable[[], None]] = {}
#: The results each finalize run saw, by job id.
FINALIZED: dict[str, list[list[Any]]] = {}


def _nothing() -> None:
    pass


class Verdicts(ChunkedJob):
    """A chunk's payload says what it does after checkpointing "half": ``ok`` returns its
    index times ten, ``fail`` raises, ``unencodable`` returns what msgpack cannot hold."""

    queue = "task-verdicts"  # each test serves a fresh queue instead (World)
    lease_seconds = LEASE_SECONDS
    max_attempts = 2
    checkpoint_interval_seconds = 60.0  # the newest state is written only at the end
    # Its messages stay where they came in, so a test can follow one by its id; the
    # move to the resume queue has tests of its own (tests/runner/worker/tasks/test_resume.py).
    resume_first = False
    backoff = Backoff(first_seconds=FIRST_BACKOFF_SECONDS, max_seconds=100, jitter=0)

    def split(self, params: dict[str, Any]) -> Any:
        if params.get("split") == "fail":
            raise ValueError("split failed")
        return params["payloads"]

    def process(self, chunk: Chunk) -> Any:
        MEANWHILE.get(chunk.job_id, _nothing)()
        chunk.checkpoint("half")
        act = chunk.payload["act"]
        if act == "fail":
            raise ValueError(f"bad row {chunk.index}")
        if act == "unencodable":
            return {"rows": {1, 2}}  # a set
        return chunk.index * 10

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        MEANWHILE.get(summary.job_id, _nothing)()
        FINALIZED.setdefault(summary.job_id, []).append(list(summary.results()))


class Other(ChunkedJob):
    """A job type the worker under test does not serve."""

    queue = "task-verdicts-other"


class Second(ChunkedJob):
    """A job type the worker serves too, from a queue of its own."""

    queue = "task-verdicts-second"


VERDICTS = Verdicts.job_type()


class QueueLog:
    """The real queue store, noting each message's newest pop receipt and every
    visibility change and delete made through it."""

    def __init__(self, queues: QueueStore):
        self._queues = queues
        self.receipts: dict[str, str] = {}
        self.visibility: dict[str, list[int]] = {}
        self.deleted: list[str] = []
        #: ``delay_seconds`` of each message the worker sent (a parked copy, say).
        self.delays: list[int] = []
        #: Each message the worker sent, as the send returned it.
        self.sent: list[QueueMessage] = []

    def send(self, queue: str, body: bytes, **options: Any) -> QueueMessage:
        sent = self._queues.send(queue, body, **options)
        self.delays.append(options.get("delay_seconds", 0))
        self.sent.append(sent)
        assert sent.pop_receipt is not None
        self.receipts[sent.id] = sent.pop_receipt
        return sent

    def receive(self, queue: str, **options: Any) -> list[QueueMessage]:
        received = self._queues.receive(queue, **options)
        for message in received:
            assert message.pop_receipt is not None
            self.receipts[message.id] = message.pop_receipt
        return received

    def update(
        self,
        queue: str,
        message_id: str,
        pop_receipt: str,
        *,
        visibility_seconds: int,
        body: bytes | None = None,
    ) -> Receipt:
        receipt = self._queues.update(
            queue, message_id, pop_receipt, visibility_seconds=visibility_seconds, body=body
        )
        self.receipts[message_id] = receipt.pop_receipt
        self.visibility.setdefault(message_id, []).append(visibility_seconds)
        return receipt

    def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        self._queues.delete(queue, message_id, pop_receipt)
        self.deleted.append(message_id)

    def delete_many(self, queue: str, pairs: Sequence[tuple[str, str]]) -> list[Any]:
        errors = self._queues.delete_many(queue, pairs)
        self.deleted += [m for (m, _), error in zip(pairs, errors, strict=True) if error is None]
        return errors

    def make_visible(self, queue: str, message_id: str) -> None:
        """What the passing of its hidden time does to a message (not logged as the
        worker's)."""
        receipt = self._queues.update(
            queue, message_id, self.receipts[message_id], visibility_seconds=0
        )
        self.receipts[message_id] = receipt.pop_receipt

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queues, name)


class Meanwhile:
    """A fault plan (:class:`checkpoint.testing.faults.FaultPlan`): what else happens just before
    the worker's next call of a kind (another worker's write, an outage beginning), and
    which calls fail busy, unapplied, while an outage lasts."""

    def __init__(self) -> None:
        self.busy: set[str] = set()
        #: Calls to fail busy this many more times (a short outage).
        self.busy_times: Counter[str] = Counter()
        #: Calls to apply but answer as lost this many more times.
        self.ambiguous_times: Counter[str] = Counter()
        #: Set: the worker is dead, as by SIGKILL, and each call of it raises.
        self.dead = False
        self._before: dict[str, list[Callable[[], None]]] = {}

    def before(self, call: str, action: Callable[[], None]) -> None:
        """Run ``action`` once, just before the worker's next ``call`` ("records.merge")."""
        self._before.setdefault(call, []).append(action)

    @property
    def unused(self) -> list[str]:
        return [call for call, actions in self._before.items() if actions]

    def decide(self, service: str, method: str) -> Fault | None:
        call = f"{service}.{method}"
        if self.dead:
            raise SimulatedCrash(f"the worker died before {call}")
        for action in self._before.pop(call, []):
            action()
        if self.busy_times[call] > 0:
            self.busy_times[call] -= 1
            return Fault("busy")
        if self.ambiguous_times[call] > 0:
            self.ambiguous_times[call] -= 1
            return Fault("ambiguous")
        return Fault("busy") if call in self.busy else None


class Unclosed:
    """A storage whose ``with`` block leaves it open (the test's backend owns it)."""

    def __init__(self, storage: Any):
        self._storage = storage

    def __enter__(self) -> Any:
        return self._storage

    def __exit__(self, *exc: Any) -> None:
        pass


class World:
    """One worker, assembled as the loop does, serving Verdicts (from a fresh queue) and
    Second; a store to set records up and read them; the queues as a test sees them."""

    def __init__(self, backend: Backend, monkeypatch: pytest.MonkeyPatch):
        self.backend = backend
        self.monkeypatch = monkeypatch
        self.clock = backend.clock or FakeClock()
        self.queue = backend.queue()
        monkeypatch.setattr(Verdicts, "queue", self.queue)
        for made in (Verdicts.poison_queue(), Verdicts.resume_queue()):
            backend.storage.queues.create_queue(made)
            backend.made.append(("queue", made))
        self.log = QueueLog(backend.storage.queues)
        self.meanwhile = Meanwhile()
        logged = replace(backend.storage, queues=self.log, closer=None)
        faulty = FaultyStorage(logged, self.meanwhile, sleep=self.clock.sleep)
        self.faulty = faulty
        self.worker = assemble(faulty.storage, [Verdicts, Second], self.clock, THIS_WORKER)
        self.store = CheckpointStore(backend.storage, self.clock)

    # ----------------------------------------------------------------- given

    def job(
        self, payloads: list[Any] | None, *, job_type: str = VERDICTS, params: Any = None
    ) -> str:
        """A job recorded with ``payloads`` as its chunks, running (None: planning)."""
        job_id = f"v-{uuid.uuid4().hex[:10]}"
        job, _ = self.store.create_job(job_id, job_type, self.queue, params or {})
        if payloads is not None:
            self.store.add_chunks(job_id, 0, payloads)
            self.store.update_job(job, state="running", total=len(payloads))
        return job_id

    def set_task(
        self,
        job_id: str,
        kind: TaskKind = "chunk",
        values: dict[str, Any] | None = None,
        **changes: Any,
    ) -> None:
        task = self.task(job_id) if kind == "chunk" else self.store.ensure_task(job_id, kind)
        self.store.write_task(task, changes, values or {})

    def running_elsewhere(self, job_id: str, attempt: int, lease_left_seconds: float) -> None:
        """The chunk as another worker left it running (its lease ends in the given time)."""
        lease_until = self.clock.now() + timedelta(seconds=lease_left_seconds)
        self.set_task(
            job_id,
            state="running",
            owner=OTHER_WORKER,
            message_id="message-b",
            attempt=attempt,
            lease_until=lease_until,
        )

    def end_chunk(self, job_id: str, state: Literal["done", "poisoned"], index: int = 0) -> None:
        """Chunk ``index`` ended ``done`` or ``poisoned``, counted in its shard."""
        task = self.task(job_id, index=index)
        values = {"result": index * 10} if state == "done" else {}
        self.store.count_chunk(task, {"state": state, "owner": "", "attempt": 1}, values, state)

    def take_over(self, job_id: str, kind: TaskKind = "chunk") -> Callable[[], None]:
        """Another worker claims the task: what one that received the message once this
        worker's lease ran out does."""

        def claim() -> None:
            task = self.task(job_id, kind)
            lease_until = self.clock.now() + timedelta(seconds=LEASE_SECONDS)
            changes = {
                "state": "running",
                "owner": OTHER_WORKER,
                "message_id": "message-b",
                "attempt": task.attempt + 1,
                "lease_until": lease_until,
            }
            self.store.write_task(task, changes)

        return claim

    def during(self, job_id: str, action: Callable[[], None]) -> None:
        """Run ``action`` inside the job's user code, before it checkpoints."""
        self.monkeypatch.setitem(MEANWHILE, job_id, action)

    def garble(self, job_id: str, changes: dict[str, Any], row: str | None = None) -> None:
        """Write over chunk 0's record (or another row of its shard) as a hand edit would."""
        partition = layout.shard_partition(job_id, 0)
        row = row or layout.chunk_row(0)
        self.backend.storage.records.merge(
            layout.TASKS_TABLE, partition, row, changes, etag=ANY_ETAG
        )

    def garble_job(self, job_id: str, changes: dict[str, Any]) -> None:
        self.backend.storage.records.merge(
            layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, changes, etag=ANY_ETAG
        )

    def send(
        self, job_id: str, kind: TaskKind = "chunk", index: int = 0, job_type: str = VERDICTS
    ) -> None:
        body = messages.encode(messages.TaskMessage(kind, job_type, job_id, index))
        self.backend.storage.queues.send(self.queue, body, ttl_seconds=NEVER_EXPIRES)

    # ----------------------------------------------------------------- when

    def receive(self, max_messages: int = 1) -> QueueMessage:
        (message,) = self.receive_all(max_messages)
        return message

    def receive_all(self, max_messages: int = 32) -> list[QueueMessage]:
        lease_seconds = self.worker.keeper.sizing.seconds(Verdicts)  # as the loop receives
        return self.log.receive(
            self.queue, max_messages=max_messages, visibility_seconds=lease_seconds
        )

    def deliver(self, message: QueueMessage | None = None) -> QueueMessage:
        """Receive the next message (or take ``message``) and have the worker handle it,
        noting its chunk's time as the worker loop does."""
        message = message or self.receive()
        chunk_seconds = handle(self.worker, self.queue, message, self.clock.monotonic())
        if chunk_seconds is not None:
            job_type = self.worker.by_queue[self.queue].job_type()
            self.worker.chunk_times.observe(job_type, chunk_seconds)
        return message

    def run_until_idle(
        self, rounds: int = 50, received: list[QueueMessage] | None = None
    ) -> list[messages.TaskMessage]:
        """Deliver every visible message, again and again, until none is left; the
        messages handled, in order (each as received added to ``received`` too)."""
        handled: list[messages.TaskMessage] = []
        for _ in range(rounds):
            found = self.receive_all()
            if not found:
                return handled
            for message in found:
                handled.append(messages.decode(message.body))
                if received is not None:
                    received.append(message)
                self.deliver(message)
        raise AssertionError(f"still busy after {rounds} rounds")

    def let_pass(self, seconds: float, message: QueueMessage) -> None:
        """``seconds`` pass, ending ``message``'s hidden time."""
        self.clock.advance(seconds)  # on the embedded store, its queue's clock too
        if self.backend.clock is None:  # Azurite: server time cannot be skipped
            self.log.make_visible(self.queue, message.id)

    # ----------------------------------------------------------------- then

    def task(self, job_id: str, kind: TaskKind = "chunk", index: int = 0) -> TaskRecord:
        return self.store.get_task(job_id, kind, index)

    def progress(self, task: TaskRecord) -> Any:
        return self.store.value(task.properties, "progress")

    def job_record(self, job_id: str) -> JobRecord:
        return self.store.get_job(job_id)

    def visible(self) -> list[messages.TaskMessage]:
        found = self.backend.storage.queues.peek(self.queue, max_messages=32)
        return [messages.decode(message.body) for message in found]

    def in_queue(self) -> int:
        return self.backend.storage.queues.approximate_length(self.queue)

    def poisoned(self) -> list[tuple[bytes, str]]:
        """``(original body, reason)`` of each message in the poison queue."""
        found = self.backend.storage.queues.peek(Verdicts.poison_queue(), max_messages=32)
        moved = []
        for message in found:
            record = messages.read_poisoned(message.body)
            assert record is not None and record["queue"] == self.queue
            moved.append((bytes(record["original"]), record["reason"]))
        return moved

    def untouched(self, message: QueueMessage) -> bool:
        """Neither deleted nor released nor still renewed: left to lapse."""
        return (
            message.id not in self.log.deleted
            and message.id not in self.log.visibility
            and self.worker.keeper.leased() == []
        )

    def comes_back_after(self, message: QueueMessage, seconds: int) -> QueueMessage:
        """Check that the worker hid ``message`` for ``seconds`` from now; receive it when
        they have passed (on the embedded store: not a second sooner)."""
        assert self.log.visibility[message.id][-1] == seconds
        assert self.visible() == []
        if self.backend.clock is not None:
            self.clock.advance(seconds - 1)
            assert self.visible() == []
            self.clock.advance(1)
        else:
            self.let_pass(seconds, message)
        again = self.receive()
        assert again.id == message.id
        return again


def make_world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The ``world`` fixture's body, for other test modules' fixtures of that name."""
    made = World(backend, monkeypatch)
    yield made
    assert made.meanwhile.unused == [], "an interference the test set up never happened"
