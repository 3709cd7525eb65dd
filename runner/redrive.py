"""``runner poison redrive``: give a job's poisoned tasks new messages and new attempts.

Each poisoned task goes back to waiting (its shard counter adjusted in the same batch)
and gets a fresh message, so its delivery count starts again; the job leaves ``failed``
and can complete and finalize. The job's old messages in ``<queue>-poison`` are then
deleted; other jobs' poison messages are left where they are.
"""

from __future__ import annotations

from checkpoint import messages
from checkpoint.storage import NEVER_EXPIRES, QueueStore
from checkpoint.store import CheckpointStore
from jobs.errors import BadMessage, Conflict, LeaseLost, NotFound

#: How long poison messages of other jobs stay hidden while we look past them.
SCAN_VISIBILITY_SECONDS = 30


def redrive(store: CheckpointStore, queues: QueueStore, job_id: str) -> int:
    """Re-enqueue every poisoned task of the job; returns how many."""
    job = store.get_job(job_id)
    count = 0
    for task in list(store.chunks(job_id, ("poisoned",))):
        try:
            store.count_chunk(task, {"state": "waiting", "owner": ""}, {}, "-poisoned")
        except Conflict:
            continue  # changed meanwhile: someone else redrove it
        _send(queues, job.queue, messages.TaskMessage("chunk", job.job_type, job_id, task.index))
        count += 1
    for kind in ("plan", "final"):
        try:
            task = store.get_task(job_id, kind, 0)  # type: ignore[arg-type]
        except NotFound:
            continue
        if task.state == "poisoned":
            store.write_task(task, {"state": "waiting", "owner": ""})
            _send(queues, job.queue, messages.TaskMessage(kind, job.job_type, job_id))  # type: ignore[arg-type]
            count += 1
    if count:
        _reopen(store, job_id)
        purge_poison_messages(queues, job.queue + "-poison", job_id)
    return count


def _send(queues: QueueStore, queue: str, message: messages.TaskMessage) -> None:
    queues.send(queue, messages.encode(message), ttl_seconds=NEVER_EXPIRES)


def _reopen(store: CheckpointStore, job_id: str) -> None:
    while True:
        job = store.get_job(job_id)
        if job.state != "failed":
            return
        state = "planning" if job.total is None else "running"
        try:
            store.update_job(job, state=state, error="")
            return
        except Conflict:
            continue


def purge_poison_messages(queues: QueueStore, poison_queue: str, job_id: str) -> int:
    """Delete the poison-queue messages of ``job_id``; returns how many."""
    deleted = 0
    while True:
        batch = queues.receive(
            poison_queue, max_messages=32, visibility_seconds=SCAN_VISIBILITY_SECONDS
        )
        if not batch:
            return deleted
        for message in batch:
            record = messages.read_poisoned(message.body)
            try:
                original = messages.decode(bytes(record["original"])) if record else None
            except BadMessage:
                original = None
            if original is not None and original.job_id == job_id:
                try:
                    queues.delete(poison_queue, message.id, message.pop_receipt or "")
                    deleted += 1
                except LeaseLost:
                    pass
