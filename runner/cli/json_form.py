"""The one JSON convention of every ``--json`` output (docs/cli.md, "JSON output").

- Keys are snake_case; every key an object can have is always there, ``null`` when it
  does not apply.
- Times are strings, ISO 8601 in UTC ending in ``Z``, to the microsecond
  (``2026-11-25T17:19:52.564877Z``); their keys end in ``_on``, ``_at`` or ``_until``.
- Durations are numbers of seconds, their keys end in ``_seconds``; fractions are 0-1,
  their keys end in ``_fraction``.
- Values of the user's (payloads, params, states) are JSON values, as msgpack decoded
  them; what JSON cannot hold exactly is an object with one key starting with ``$``:
  ``{"$bytes": BASE64}``, ``{"$datetime": TIME}``, ``{"$float": "nan"|"inf"|"-inf"}``,
  and ``{"$map": [[KEY, VALUE], ...]}`` for a map with a key that is not a string (or
  whose only key starts with ``$``, so no user's object is taken for one of these).

Typed values (:mod:`runner.cli.status_types`) become JSON in one place, :func:`to_json`.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any, overload

from checkpoint.clock import utc_text

#: Largest user value given in full (as compact JSON text); larger ones are omitted.
VALUE_JSON_BYTES = 4096


@overload
def utc(when: datetime) -> str: ...
@overload
def utc(when: None) -> None: ...
@overload
def utc(when: datetime | None) -> str | None: ...
def utc(when: datetime | None) -> str | None:
    """``when`` as ISO 8601 UTC ending in ``Z``, to the microsecond
    (:func:`checkpoint.clock.utc_text`, the one format of every output); None stays
    None."""
    return None if when is None else utc_text(when)


def to_json(value: Any) -> Any:
    """A typed value as its ``--json`` form: a dataclass is an object of its fields, in
    field order, each named as it is; a time is :func:`utc`; a tuple a list. A user's
    value in a field is already a JSON value (:func:`bounded_user_value`) and stays as
    it is."""
    if is_dataclass(value) and not isinstance(value, type):
        return {each.name: to_json(getattr(value, each.name)) for each in fields(value)}
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


def user_value(value: Any) -> Any:
    """A value of the user's (as msgpack decoded it) as a JSON value, losing nothing."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime):
        return {"$datetime": utc(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": str(value)}  # 'nan', 'inf', '-inf'
    if isinstance(value, list | tuple):
        return [user_value(item) for item in value]
    if isinstance(value, dict):
        plain = all(isinstance(key, str) for key in value)
        tag_like = len(value) == 1 and plain and next(iter(value)).startswith("$")
        if plain and not tag_like:
            return {key: user_value(item) for key, item in value.items()}
        return {"$map": [[user_value(key), user_value(item)] for key, item in value.items()]}
    return value


def user_text(value: Any, chars: int) -> str:
    """A value of the user's as people see it: its JSON (:func:`user_value`) on one line,
    as ``runner report`` shows a payload, cut to ``chars`` with ``...``."""
    text = json.dumps(user_value(value), ensure_ascii=False)
    return text if len(text) <= chars else text[: chars - 3] + "..."


def bounded_user_value(value: Any) -> tuple[Any, bool]:
    """``(user_value(value), False)``, or ``(None, True)`` when its JSON text is over
    :data:`VALUE_JSON_BYTES`: status and report stay small whatever a chunk holds."""
    shown = user_value(value)
    if len(json.dumps(shown, separators=(",", ":")).encode("utf-8")) > VALUE_JSON_BYTES:
        return None, True
    return shown, False
