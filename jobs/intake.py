"""Jobs submitted by other programs: the schema ``chunkrunner.submit/1``, read and checked.

A program in any language starts a job by putting one JSON message on a job type's
intake queue, ``<queue>-intake`` (a class with ``intake = True``; docs/intake.md)::

    {"schema": "chunkrunner.submit/1", "submission_id": "nightly-2026-11-25",
     "job_type": "orders:MigrateOrders", "params": {"rows": 1000},
     "after": ["migrate-orders-stage"], "pipeline": "nightly"}

This module is pure: :func:`read_submission` turns a message body into a
:class:`Submission`, or raises :class:`Rejected` naming the field and what is wrong with
it. The body a rejected submission is moved with is :mod:`jobs.rejection`'s; recording
the job, and moving what is rejected, is the worker's (:mod:`runner.worker.intake`).

The body is found in one of two encodings, tried in this order: JSON as UTF-8 text (a
leading byte-order mark allowed), then strict base64 of that (what the Azure Functions
queue output binding and the SDKs' ``TextBase64EncodePolicy`` write). A JSON object
never reads as base64 (``{`` is not in its alphabet), so the two cannot be mistaken for
each other; a body starting with ``{`` or ``[`` is meant as JSON text, and refused with
what JSON finds wrong with it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from checkpoint import checks, codec, layout
from checkpoint.errors import CodecError, RunnerError
from checkpoint.service_targets import MAX_VISIBILITY_SECONDS
from jobs.job import ChunkedJob
from jobs.submit import PRIORITY_RANGE

#: The schema a submission names, and the family it belongs to.
SCHEMA = "chunkrunner.submit/1"
SCHEMA_FAMILY = "chunkrunner.submit/"
#: The fields of schema 1; any other is refused (a misspelt ``parms`` would otherwise be
#: dropped, and the job run without its params).
FIELDS = (
    "schema",
    "submission_id",
    "job_type",
    "params",
    "after",
    "pipeline",
    "priority",
    "delay_seconds",
)
REQUIRED = ("schema", "submission_id", "job_type")
#: Nesting of the JSON document at most (params are a job's settings, not a data set).
MAX_DEPTH = 32
#: Jobs one submission may run after at most (each is one read when it is recorded).
MAX_AFTER = 100
#: A UTF-8 byte-order mark, which some producers (PowerShell) put before the text.
BOM = b"\xef\xbb\xbf"
#: How a body meant as JSON text that JSON cannot read is refused.
INVALID = "not valid JSON: "


class Rejected(RunnerError):
    """A submission that cannot be recorded as it is: ``field`` (None: the message as a
    whole) and what is wrong with it. Never retried: the same body fails the same way."""

    def __init__(self, field: str | None, problem: str):
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Submission:
    """A submission read and checked: the job to record (``job_id`` derived from
    ``submission_id``, :func:`job_id_of`) and how the body was encoded."""

    submission_id: str
    job_id: str
    params: Any = None
    after: tuple[str, ...] = ()
    pipeline: str | None = None
    priority: int = 0
    delay_seconds: int = 0
    #: ``"utf-8"`` (JSON as text) or ``"base64"`` (base64 of that).
    encoding: str = "utf-8"


def job_id_of(queue: str, submission_id: str) -> str:
    """The job id of a submission to ``queue``'s intake: ``<queue>-<submission_id>``.

    Deterministic, so a submission put twice (or received again after a worker died
    before deleting it) is the same job; prefixed by the queue, so two types' producers
    choosing the same ids never meet, and an intake can make jobs of its own type only.
    Raises Rejected if the result is not a job id (1-100 letters, digits, '.', '_' and
    '-')."""
    job_id = f"{queue}-{submission_id}"
    if not layout.is_job_id(job_id) or not submission_id[:1].isalnum():
        room = 100 - len(queue) - 1
        raise Rejected(
            "submission_id",
            f"{submission_id!r} is not 1-{room} letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (the job id is "
            f"'{queue}-' followed by it)",
        )
    return job_id


def read_submission(body: bytes, job_class: type[ChunkedJob]) -> Submission:
    """The submission ``body`` holds, for a job of ``job_class`` (whose intake it was
    received from). Raises Rejected saying which field is wrong and how."""
    document, encoding = decode_body(body)
    if not isinstance(document, dict):
        raise Rejected(None, f"a submission is a JSON object, not {_json_kind(document)}")
    _check_fields(document)
    _check_schema(document["schema"])
    job_type = _text(document, "job_type")
    if job_type != job_class.job_type():
        raise Rejected(
            "job_type",
            f"{job_type!r} is not the job type of this intake queue, "
            f"{job_class.intake_queue()!r}, whose workers run {job_class.job_type()!r}",
        )
    job_id = job_id_of(job_class.queue, _text(document, "submission_id"))
    after = _after(document.get("after"), job_id)
    pipeline = document.get("pipeline")
    if pipeline is not None and not (isinstance(pipeline, str) and layout.is_job_id(pipeline)):
        raise Rejected(
            "pipeline", f"{pipeline!r} is not an id (1-100 letters, digits, '.', '_' and '-')"
        )
    low, high = PRIORITY_RANGE
    priority = _whole(document, "priority", low, high)
    delay_seconds = _whole(document, "delay_seconds", 0, MAX_VISIBILITY_SECONDS)
    params = document.get("params")
    try:
        codec.encode(params, "params")
    except CodecError as error:  # an integer past 64 bits
        raise Rejected("params", str(error)) from None
    return Submission(
        document["submission_id"],
        job_id,
        params,
        after,
        pipeline,
        priority,
        delay_seconds,
        encoding,
    )


def decode_body(body: bytes) -> tuple[Any, str]:
    """The JSON value ``body`` holds and its encoding, ``"utf-8"`` or ``"base64"``;
    Rejected (the message as a whole) if it is neither."""
    if not body.strip():
        raise Rejected(None, "empty message")
    try:
        return _json(body), "utf-8"
    except Rejected as raw:
        if body.lstrip(b" \t\r\n").removeprefix(BOM).startswith((b"{", b"[")):
            raise  # meant as JSON text: what is wrong with it is the reason
        first = raw.problem.removeprefix(INVALID)
    try:
        inner = base64.b64decode(body.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise Rejected(None, f"not JSON, neither raw nor base64 ({first})") from None
    try:
        return _json(inner), "base64"
    except Rejected as wrapped:
        inside = wrapped.problem.removeprefix(INVALID)
        raise Rejected(None, f"base64, but not JSON inside ({inside})") from None


def _json(data: bytes) -> Any:
    """One JSON value, strictly: UTF-8, no NaN or Infinity, no key twice in an object,
    nested at most :data:`MAX_DEPTH` deep."""
    try:
        text = data.removeprefix(BOM).decode("utf-8")
    except UnicodeDecodeError as error:
        raise Rejected(None, f"not UTF-8 text: {error.reason} at byte {error.start}") from None
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except RecursionError:
        raise Rejected(None, f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as error:  # JSONDecodeError, and _object's and _no_constant's
        raise Rejected(None, f"{INVALID}{error}") from None
    if _depth(value) > MAX_DEPTH:
        raise Rejected(None, f"nested deeper than {MAX_DEPTH} levels")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"key {key!r} given twice in one object")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: Any) -> int:
    """How deep ``value`` nests (a scalar: 0), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        children: Iterable[Any] = ()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:
            todo += [(child, level + 1) for child in children]
    return deepest


def _check_fields(document: dict[str, Any]) -> None:
    for name in document:
        if name == "job_id":
            raise Rejected(
                "job_id",
                "not accepted: the job id is derived from submission_id "
                "('<queue>-<submission_id>')",
            )
        if name not in FIELDS:
            raise Rejected(name, f"unknown field (schema {SCHEMA} has {', '.join(FIELDS)})")
    for name in REQUIRED:
        if name not in document:
            raise Rejected(name, "missing")


def _check_schema(schema: Any) -> None:
    if schema == SCHEMA:
        return
    if isinstance(schema, str) and schema.startswith(SCHEMA_FAMILY):
        raise Rejected("schema", f"{schema!r} is not read by this worker, which reads {SCHEMA!r}")
    raise Rejected("schema", f"{schema!r} is not {SCHEMA!r}")


def _text(document: dict[str, Any], name: str) -> str:
    value = document[name]
    if not isinstance(value, str) or not value:
        raise Rejected(name, f"must be a non-empty string, not {_shown(value)}")
    return value


def _whole(document: dict[str, Any], name: str, lowest: int, highest: int) -> int:
    value = document.get(name, 0)
    if value is None:
        return 0
    # A JSON number with a fraction of zero (3.0) is still no whole number here.
    return checks.whole(
        value, name, lowest=lowest, highest=highest, error=lambda said: Rejected(name, said)
    )


def _after(value: Any, job_id: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise Rejected("after", f"must be a list of job ids, not {_shown(value)}")
    if len(value) > MAX_AFTER:
        raise Rejected("after", f"names {len(value)} jobs; at most {MAX_AFTER}")
    kept: list[str] = []
    for item in value:
        if not isinstance(item, str) or not layout.is_job_id(item):
            raise Rejected("after", f"{_shown(item)} is not a job id")
        if item == job_id:
            raise Rejected("after", f"job {job_id!r} cannot run after itself")
        if item not in kept:
            kept.append(item)
    return tuple(kept)


def _json_kind(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
