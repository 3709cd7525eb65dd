"""The body a rejected submission is moved with: schema ``chunkrunner.rejected/1``.

A submission that cannot be a job (:class:`jobs.intake.Rejected`) is moved from
``<queue>-intake`` to ``<queue>-intake-rejected`` (:mod:`runner.worker.intake`) as one
JSON object: the reason (field and problem), where and when, and the original body,
as text or in base64 when it is not UTF-8, cut to fit one queue message
(docs/intake.md, "Rejected submissions"). ``runner poison list`` and the dashboard read
it back (:func:`read_rejected`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace

from checkpoint.service_targets import MAX_MESSAGE_BYTES
from jobs.intake import Rejected, decode_body

#: The schema of the body a rejected submission is moved with.
REJECTED_SCHEMA = "chunkrunner.rejected/1"
#: Bytes of the original kept in a rejected body at most, and of its reason: together
#: they fit one queue message (48 KiB of body) with room for the rest.
ORIGINAL_ROOM = 40 * 1024
REASON_ROOM = 4000


@dataclass(frozen=True)
class Rejection:
    """What a rejected body says (schema ``chunkrunner.rejected/1``, docs/intake.md)."""

    reason: str
    field: str | None
    problem: str
    queue: str
    at: str
    submission_id: str | None = None
    message_id: str | None = None
    inserted_on: str | None = None
    dequeue_count: int | None = None
    #: The original body as text, or in base64 if it is not UTF-8 (one of them is set).
    original: str | None = None
    original_base64: str | None = None
    truncated: bool = False


def rejection(
    body: bytes,
    rejected: Rejected,
    *,
    queue: str,
    at: str,
    message_id: str,
    inserted_on: str,
    dequeue_count: int,
) -> Rejection:
    """The rejection of ``body`` (received from intake queue ``queue``) for ``rejected``:
    its reason cut to :data:`REASON_ROOM` bytes, its original to :data:`ORIGINAL_ROOM`."""
    kept = body[:ORIGINAL_ROOM]
    text = _as_text(kept, cut_short=len(body) > ORIGINAL_ROOM)
    return Rejection(
        reason=_cut(str(rejected), REASON_ROOM),
        field=rejected.field,
        problem=_cut(rejected.problem, REASON_ROOM),
        queue=queue,
        at=at,
        submission_id=_submission_id(body),
        message_id=message_id,
        inserted_on=inserted_on,
        dequeue_count=dequeue_count,
        original=text,
        original_base64=None if text is not None else base64.b64encode(kept).decode("ascii"),
        truncated=len(body) > ORIGINAL_ROOM,
    )


def rejected_body(found: Rejection) -> bytes:
    """The JSON body a rejected submission is moved with: at most one queue message, its
    original cut further if escaping it for JSON made it longer (control characters)."""
    while True:
        fields = {"schema": REJECTED_SCHEMA, **vars(found)}
        body = json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if len(body) <= MAX_MESSAGE_BYTES:
            return body
        text, coded = found.original or "", found.original_base64 or ""
        found = replace(
            found,
            original=text[: len(text) // 2] if found.original is not None else None,
            original_base64=coded[: len(coded) // 8 * 4] if found.original is None else None,
            truncated=True,
        )


def read_rejected(body: bytes) -> Rejection | None:
    """The rejection a rejected queue's body holds, or None if it holds none."""
    try:
        fields = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(fields, dict) or fields.pop("schema", None) != REJECTED_SCHEMA:
        return None
    try:
        return Rejection(**fields)
    except TypeError:  # a field missing, or one of a later version of the schema
        return None


def _submission_id(body: bytes) -> str | None:
    """The submission id of a body that was rejected, if it can be read at all."""
    try:
        document, _ = decode_body(body)
    except Rejected:
        return None
    found = document.get("submission_id") if isinstance(document, dict) else None
    return found if isinstance(found, str) else None


def _as_text(kept: bytes, cut_short: bool) -> str | None:
    """``kept`` as text if it is UTF-8 (a character cut in two at its end when it was
    ``cut_short`` left out), else None: it is kept in base64."""
    try:
        return kept.decode("utf-8")
    except UnicodeDecodeError as bad:
        if cut_short and bad.reason == "unexpected end of data":
            return kept[: bad.start].decode("utf-8")
        return None


def _cut(text: str, room: int) -> str:
    """``text`` in at most ``room`` UTF-8 bytes, cut at a character's end."""
    return text.encode("utf-8")[:room].decode("utf-8", "ignore")
