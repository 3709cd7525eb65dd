"""What travels on a job queue: a small msgpack envelope pointing at a task record.

Payloads and params live in the checkpoint store (spilled to blob when large), so a
message is a claim check whatever the payload's size. Anything that is not exactly our
envelope is a :class:`~checkpoint.errors.BadMessage`.

A chunk message sent at planning also carries the chunk record *as planned*: its ETag
and, when small, its encoded payload (:data:`INLINE_PAYLOAD_BYTES`). A worker can then
claim the chunk with a write conditional on that ETag without reading the record first:
if the write succeeds, the record was exactly as planned. If anything changed it (an
earlier delivery ran it), the write fails and the worker reads the record as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkpoint import checks, codec, layout
from checkpoint.errors import BadMessage, CodecError, ConfigurationError
from checkpoint.records import TaskKind

#: Marks our messages; the value is the envelope version.
MAGIC = "chunkrunner"
VERSION = 1
#: Largest encoded payload carried in a chunk message beside the record (48 KiB fit).
INLINE_PAYLOAD_BYTES = 16 * 1024
_KINDS: dict[str, TaskKind] = {"p": "plan", "c": "chunk", "w": "feed", "f": "final"}
_CODES: dict[TaskKind, str] = {kind: code for code, kind in _KINDS.items()}


@dataclass(frozen=True)
class TaskMessage:
    """A task to run: planning, one chunk, feeding or finalize of a job (a feed
    message's ``index`` is the first chunk it may feed, if its record has no cursor)."""

    kind: TaskKind
    job_type: str
    job_id: str
    index: int = 0
    #: ETag of the chunk record as planned (None: unknown, read the record).
    planned_etag: str | None = None
    #: The planned record's encoded ``payload`` property, if small and inline.
    planned_payload: bytes | None = None
    #: The job record's incarnation when the message was sent (None: sent by a version
    #: before incarnations, or for a job recorded by one).
    incarnation: str | None = None


def encode(message: TaskMessage) -> bytes:
    envelope: dict[str, Any] = {
        MAGIC: VERSION,
        "k": _CODES[message.kind],
        "t": message.job_type,
        "j": message.job_id,
        "i": message.index,
    }
    if message.planned_etag is not None and message.planned_payload is not None:
        envelope["e"] = message.planned_etag
        envelope["p"] = message.planned_payload
    if message.incarnation is not None:
        envelope["n"] = message.incarnation
    return codec.encode(envelope, "message")


def decode(body: bytes) -> TaskMessage:
    """The task a message body names. Raises BadMessage saying what is wrong with it."""
    if not body:
        raise BadMessage("empty message")
    try:
        envelope: Any = codec.decode(body, "message")
    except CodecError as error:
        raise BadMessage(f"not a chunkrunner message (not msgpack: {error})") from error
    if not isinstance(envelope, dict) or MAGIC not in envelope:
        raise BadMessage(f"not a chunkrunner message (no {MAGIC!r} marker)")
    if envelope[MAGIC] != VERSION:
        raise BadMessage(f"unsupported envelope version {envelope[MAGIC]!r}")
    code, job_type = envelope.get("k"), envelope.get("t")
    kind = _KINDS.get(code) if isinstance(code, str) else None
    job_id, index = envelope.get("j"), envelope.get("i")
    if kind is None or not isinstance(job_type, str) or not isinstance(job_id, str):
        raise BadMessage(f"malformed envelope: {_preview(envelope)}")
    # An exact int, as msgpack decodes one, without a call into checks per message.
    if not (type(index) is int or checks.is_whole(index)) or index < 0:
        raise BadMessage(f"malformed envelope (index {index!r})")
    try:
        # A job id no record can have would fail deeper down with a storage error, and
        # the message would be retried forever instead of poisoned.
        layout.check_job_id(job_id)
    except ConfigurationError as error:
        raise BadMessage(f"malformed envelope: {error}") from error
    etag, payload = envelope.get("e"), envelope.get("p")
    if (etag, payload) != (None, None) and (
        kind != "chunk" or not isinstance(etag, str) or not etag or not isinstance(payload, bytes)
    ):
        raise BadMessage(f"malformed envelope (planned record): {_preview(envelope)}")
    incarnation = envelope.get("n")
    if incarnation is not None and (not isinstance(incarnation, str) or not incarnation):
        raise BadMessage(f"malformed envelope (incarnation {incarnation!r})")
    return TaskMessage(kind, job_type, job_id, index, etag, payload, incarnation)


def poisoned(body: bytes, queue: str, reason: str, at: str) -> bytes:
    """A poison-queue body: the original message and why it was poisoned.

    The original is truncated if the reason would not fit beside it in one message.
    """
    room = 40 * 1024
    # Cut by UTF-8 bytes, not characters: 4,000 emoji would not fit beside the original.
    reason = reason.encode("utf-8")[:4000].decode("utf-8", "ignore")
    return codec.encode(
        {
            MAGIC: VERSION,
            "poison": {
                "reason": reason,
                "queue": queue,
                "at": at,
                "original": body[:room],
                "truncated": len(body) > room,
            },
        },
        "poison message",
    )


def read_poisoned(body: bytes) -> dict[str, Any] | None:
    """The poison record a poison-queue body holds, or None if it holds none."""
    try:
        envelope = codec.decode(body, "poison message")
    except CodecError:
        return None
    poison = envelope.get("poison") if isinstance(envelope, dict) else None
    return poison if isinstance(poison, dict) else None


def named_task(body: bytes) -> TaskMessage | None:
    """The task a job-queue body names, or the original of a poison-queue body names;
    None for anything else (not ours, garbled, an original cut short)."""
    poison = read_poisoned(body)
    if poison is not None:
        original = poison.get("original")
        if poison.get("truncated") or not isinstance(original, bytes):
            return None
        body = original
    try:
        return decode(body)
    except BadMessage:
        return None


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."
