"""Submissions the intake queues rejected: what ``runner poison list`` (with no JOB_ID),
``runner poison purge`` and the dashboard's poison page show of ``<queue>-intake-rejected``.

A rejected submission has no job and no record (it could not be read as one): it is
only its message, moved to its type's rejected queue with the reason
(:mod:`runner.worker.intake`, docs/intake.md). So it is read from the queue, by peeking:
nothing is received, no dequeue count moves, and a listing shows the oldest
:data:`SHOWN` of each queue beside its count. Redriving one makes no sense: the same
body would be rejected again. Its producer sends a mended one (the same submission id
will do: nothing was recorded under it); ``purge`` deletes the rejected ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from checkpoint import layout
from checkpoint.clock import SystemClock, utc_text
from checkpoint.deletion import sweep_where
from checkpoint.errors import NotFound
from checkpoint.retries import Budget
from checkpoint.storage import QueueMessage, QueueStore
from jobs.rejection import Rejection, read_rejected

#: Rejections shown per queue at most: one peek (Azure's most).
SHOWN = 32
#: Characters of an original body a line of text shows.
SHOWN_ORIGINAL_CHARS = 100


@dataclass(frozen=True)
class RejectedMessage:
    """One message of a rejected queue: its rejection, or None if it holds none (put
    there by something else than a worker)."""

    message_id: str
    inserted_on: datetime
    rejection: Rejection | None
    body_preview: str


@dataclass(frozen=True)
class RejectedQueue:
    """A rejected queue: the intake queue it serves, its messages counted (Azure's
    approximate count) and the oldest of them."""

    queue: str
    intake_queue: str
    count: int
    shown: tuple[RejectedMessage, ...]


def rejected_queues(queues: QueueStore, job_queue: str | None = None) -> list[str]:
    """The rejected queue of ``job_queue``'s intake, or every rejected queue there is.

    Raises:
        NotFound: ``job_queue`` has no rejected queue (no worker taking submissions for
            it ever started on this store)."""
    if job_queue is None:
        return [name for name in queues.list_queues() if layout.is_rejected_queue(name)]
    name = layout.rejected_queue_of(job_queue)
    if name not in queues.list_queues(prefix=name):
        raise NotFound(
            f"no queue {name!r}: no worker of a job type on queue {job_queue!r} with "
            "intake = True has started on this store"
        )
    return [name]


def read_rejections(queues: QueueStore, job_queue: str | None = None) -> list[RejectedQueue]:
    """What the rejected queues hold (of ``job_queue``'s intake, or of every intake)."""
    found = []
    for name in rejected_queues(queues, job_queue):
        try:
            count = queues.approximate_length(name)
            peeked = queues.peek(name, max_messages=SHOWN) if count else []
        except NotFound:  # deleted since it was listed
            count, peeked = 0, []
        intake = name.removesuffix(layout.REJECTED_SUFFIX) + layout.INTAKE_SUFFIX
        shown = tuple(_message(message) for message in peeked)
        found.append(RejectedQueue(name, intake, max(count, len(shown)), shown))
    return found


def purge_rejections(
    queues: QueueStore,
    budget: Budget,
    job_queue: str | None = None,
    older_than: timedelta | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
) -> dict[str, int]:
    """Delete the rejected submissions (of ``job_queue``'s intake, or every intake),
    those put longer ago than ``older_than`` if given; returns how many per queue (with
    ``dry_run``: would be; each looked at and handed back)."""
    cutoff = None if older_than is None else (now or SystemClock().now()) - older_than

    def wanted(message: QueueMessage) -> bool:
        return cutoff is None or message.inserted_on < cutoff

    return {
        name: sweep_where(queues, name, wanted, budget, delete=not dry_run)
        for name in rejected_queues(queues, job_queue)
    }


def render_rejections(found: list[RejectedQueue]) -> str:
    """The text of ``runner poison list`` with no JOB_ID."""
    if not found:
        return "no rejected submissions: no intake queue in this store"
    lines: list[str] = []
    for each in found:
        more = f", the {len(each.shown)} oldest shown" if each.count > len(each.shown) else ""
        lines.append(f"{each.queue}: {each.count} rejected submission(s){more}")
        lines += [line for message in each.shown for line in _lines(message)]
    return "\n".join(lines)


def rejections_json(found: list[RejectedQueue]) -> list[dict[str, object]]:
    """``runner poison list --json`` with no JOB_ID: an object per rejected queue."""
    return [
        {
            "queue": each.queue,
            "intake_queue": each.intake_queue,
            "count": each.count,
            "rejected": [_message_json(message) for message in each.shown],
        }
        for each in found
    ]


def _message(message: QueueMessage) -> RejectedMessage:
    preview = message.body[:SHOWN_ORIGINAL_CHARS].decode("utf-8", "replace")
    return RejectedMessage(message.id, message.inserted_on, read_rejected(message.body), preview)


def _lines(message: RejectedMessage) -> list[str]:
    found = message.rejection
    if found is None:
        return [f"  {utc_text(message.inserted_on)}  not a rejection: {message.body_preview!r}"]
    who = f"submission {found.submission_id!r}" if found.submission_id else "no submission id"
    original = found.original if found.original is not None else found.original_base64 or ""
    encoded = "" if found.original is not None else " (base64: not UTF-8)"
    if len(original) > SHOWN_ORIGINAL_CHARS:
        original = original[: SHOWN_ORIGINAL_CHARS - 3] + "..."
    return [f"  {found.at}  {who}: {found.reason}", f"      original{encoded}: {original}"]


def _message_json(message: RejectedMessage) -> dict[str, object]:
    """A message of a rejected queue: its own id and when it was moved there, and the
    rejection it holds (the original message's id and time among its fields)."""
    found = message.rejection
    return {
        "rejected_message_id": message.message_id,
        "rejected_on": utc_text(message.inserted_on),
        "rejection": None if found is None else vars(found),
        "body_preview": message.body_preview if found is None else None,
    }
