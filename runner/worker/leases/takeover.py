"""What a claim learns of the attempt it takes a task over from (``chunk.taken_over``).

An attempt that died, stalled or lost its lease may still have work running outside
the worker (a Spark Connect operation outlives its client). The claim passes on who
leased the task, that attempt's claim token and the Spark session it recorded, and
whether its worker is gone by its heartbeat, so the new attempt can cut that work short
(:mod:`jobs.spark.reaper`) before it starts its own.
"""

from __future__ import annotations

import logging

from checkpoint.clock import Clock
from checkpoint.errors import BadRecord, NotFound, StorageError
from checkpoint.records import SPARK_SESSION, TaskRecord
from checkpoint.retries import Budget
from checkpoint.settle import token_of
from checkpoint.workers import WorkerBook
from jobs.chunk import Takeover

log = logging.getLogger(__name__)


def takeover_of(
    before: TaskRecord | None, workers: WorkerBook | None, clock: Clock, budget: Budget
) -> Takeover | None:
    """The attempt ``before`` (the record as read before the claim) describes, or None
    if it describes none (a first claim).

    The previous owner's heartbeat is read only when that attempt recorded a Spark
    session (one point read per such takeover): only the reaper uses it. A heartbeat
    that cannot be read counts as not gone, which makes the reaper the more careful.
    """
    if before is None or before.attempt == 0:
        return None
    session = before.properties.get(SPARK_SESSION)
    session = session if isinstance(session, str) and session else None
    claim = token_of(before.properties).partition(".")[0]
    owner = before.owner or ""
    gone = False
    if session is not None and owner and workers is not None:
        gone = _owner_gone(workers, owner, clock, budget)
    return Takeover(owner=owner, claim=claim, spark_session=session, owner_gone=gone)


def _owner_gone(workers: WorkerBook, owner: str, clock: Clock, budget: Budget) -> bool:
    try:
        record = workers.get(owner, budget)
    except NotFound:
        return True  # never beat, or removed an hour after it was last seen
    except (BadRecord, StorageError) as error:
        log.warning("heartbeat of %s unreadable (%s): taken as not gone", owner, error)
        return False
    return record.gone(clock.now())
