"""What the engine writes on a task record, typed: the claim, a checkpoint's marks, the
done, retrying, handed-back and poisoned marks.

:class:`TaskChanges` names each field the engine sets, so a misspelt or mistyped field
fails the type check, not a reader months later. The store still takes a mapping of
record properties (:meth:`~checkpoint.store.CheckpointStore.write_task`): the stored
format is :meth:`TaskChanges.properties`, field for field what it was.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from checkpoint.records import (
    CHECKPOINT_ON,
    LEASE_ON_RECORD,
    SPARK_SESSION,
    Progress,
    TaskState,
    error_properties,
)
from runner.worker.tasks.verdict import Verdict


@dataclass(frozen=True)
class TaskChanges:
    """Fields to merge into a task record; None leaves a field as it is (a merge keeps
    what it does not name).

    Attributes:
        spark_session: the attempt's Spark Connect session (JSON text), ``""`` for none.
        lease_on_record: True while finalize is leased on its record alone.
        checkpoint_on: when the newest state was written (with that state).
        how_far: how far the chunk said it got with that state.
        verdict: whether trying again could have helped (``retryable``,
            ``max_attempts``), for status and the report.
        error: the error and its traceback text, or ``(None, "")`` to clear them.
    """

    state: TaskState | None = None
    owner: str | None = None
    message_id: str | None = None
    attempt: int | None = None
    started_on: datetime | None = None
    done_on: datetime | None = None
    retry_at: datetime | None = None
    lease_until: datetime | None = None
    spark_session: str | None = None
    lease_on_record: bool | None = None
    checkpoint_on: datetime | None = None
    how_far: Progress | None = None
    verdict: Verdict | None = None
    error: tuple[BaseException | None, str] | None = None

    def properties(self) -> dict[str, Any]:
        """The record properties these changes write (the stored names and values)."""
        plain = {
            "state": self.state,
            "owner": self.owner,
            "message_id": self.message_id,
            "attempt": self.attempt,
            "started_on": self.started_on,
            "done_on": self.done_on,
            "retry_at": self.retry_at,
            "lease_until": self.lease_until,
            SPARK_SESSION: self.spark_session,
            LEASE_ON_RECORD: self.lease_on_record,
            CHECKPOINT_ON: self.checkpoint_on,
        }
        written: dict[str, Any] = {
            name: value for name, value in plain.items() if value is not None
        }
        if self.how_far is not None:
            written.update(self.how_far.properties())
        if self.verdict is not None:
            written.update(self.verdict.properties())
        if self.error is not None:
            written.update(error_properties(*self.error))
        return written

    def plus(self, other: TaskChanges) -> TaskChanges:
        """These changes with ``other``'s set fields added (``other`` wins where both
        set one)."""
        ours = {f.name: getattr(other, f.name) for f in fields(other)}
        return replace(self, **{name: value for name, value in ours.items() if value is not None})
