"""What no worker can read or run, poisoned at once: a message that is not ours, a task
record that cannot be read, any other record read on the way that cannot be.

Each would fail the same way at every delivery, so none is retried (docs/semantics.md).
"""

from __future__ import annotations

import logging

from checkpoint import checks, retries
from checkpoint.errors import BadMessage, BadRecord, Conflict, NotFound
from checkpoint.messages import TaskMessage
from checkpoint.settle import Writer
from checkpoint.storage import QueueMessage
from runner.worker.leases.lease import Lease
from runner.worker.observing.logs import TASK_LOGGER
from runner.worker.tasks.delivery import Context, Delivery
from runner.worker.tasks.job_completion import set_job
from runner.worker.tasks.record_changes import TaskChanges
from runner.worker.tasks.task_kinds import KINDS
from runner.worker.tasks.verdict import Verdict

log = logging.getLogger(TASK_LOGGER)

#: Job states in which work is still expected.
_OPEN_STATES = ("waiting", "planning", "running", "finalizing")


def poison_bad_message(
    worker: Context,
    lease: Lease,
    message: QueueMessage,
    bad: BadMessage,
    of_job: TaskMessage | None,
) -> None:
    """Move a message that is not ours to ``<queue>-poison``; ``of_job``: the message
    names its job's own type, which this worker cannot run, so the job fails too."""
    log.error("message %s on %s poisoned: %s", message.id, lease.queue, bad)
    worker.poison.move(lease, message.body, str(bad))
    if of_job is not None:
        # The job exists but nobody here can run it: say so on the job, or it would
        # wait for ever ("runner poison redrive" re-sends it once a worker can).
        set_job(
            worker.store,
            of_job.job_id,
            only_from=_OPEN_STATES,
            budget=lease.budget(retries.BOOKKEEPING, worker.clock),
            state="failed",
            error=f"{of_job.kind} message poisoned: {bad}",
        )


def poison_missing(delivery: Delivery) -> None:
    """Poison a message whose task has no record (its job's records still there)."""
    reason = f"no record of {delivery.kind} {delivery.index} of job {delivery.job_id!r}"
    log.error("message %s on %s poisoned: %s", delivery.message.id, delivery.lease.queue, reason)
    delivery.worker.poison.move(delivery.lease, delivery.message.body, reason, delivery.home_queue)


def poison_unreadable(delivery: Delivery, bad: BadRecord) -> None:
    """Poison a task whose record cannot be read, writing over it with the ETag it has.

    The write gives every property a reader checks a readable value, so the record reads
    as poisoned from then on and is counted once. A record that says it ended already
    (done or poisoned) was counted then: only its message is poisoned.
    """
    worker, lease, index = delivery.worker, delivery.lease, delivery.index
    kind = KINDS[delivery.kind]
    reason = str(bad)
    try:
        found = worker.store.task_as_found(delivery.job_id, kind.name, index)
        if found.properties.get("state") not in ("done", "poisoned"):
            attempt = found.properties.get("attempt")
            verdict = Verdict(reason, retryable=False)
            changes = TaskChanges(
                state="poisoned",
                attempt=attempt if checks.is_whole(attempt) and attempt >= 0 else 0,
                owner="",
                message_id="",
                lease_until=worker.clock.now(),
                verdict=verdict,
                error=(bad, ""),
            )
            kind.write_poisoned(delivery, found, changes, {}, verdict, Writer())
    except (Conflict, NotFound):
        log.warning("%s changed while poisoning; left to its owner", bad)
        worker.keeper.drop(lease)
        return
    log.error("%s %s of %s poisoned: %s", kind.name, index, delivery.job_id, reason)
    worker.poison.move(lease, delivery.message.body, reason, delivery.home_queue)
    kind.after_poisoned(worker, delivery.job_id, index, delivery.budget(retries.BOOKKEEPING))


def unreadable_after_all(
    worker: Context, lease: Lease, message: QueueMessage, bad: BadRecord
) -> None:
    """A record read on the way (the job's, a counter, a value) cannot be read: the
    message would fail the same way each time, so it is poisoned unless it was dealt
    with already (deleted, released, or handed to the finisher)."""
    log.error("message %s on %s: %s", message.id, lease.queue, bad)
    if lease.active and not lease.lost and not lease.handed_over:
        worker.poison.move(lease, message.body, str(bad))
