"""Records to table entities and back, and ``Where`` conditions to OData filters.

Typing rules, chosen so that what is written reads back the same and filters match:

- Every ``int`` is written as ``Edm.Int64`` and compared with an ``L`` literal. The SDK
  would write small ints as Int32 and refuse larger ones, and Azure compares an Int64
  property only with an Int64 literal, so one integer type is the only consistent one.
- Azure omits the type of an integral ``Edm.Double`` (``3.0`` comes back as ``3``,
  see Azure/azure-sdk-for-js#19899). Since we never write Int32, an untyped integer read
  back was a double: it becomes a ``float`` again.
- ``TablesEntityDatetime`` becomes a plain timezone-aware UTC ``datetime``; bytes stay
  bytes, bools stay bools, and a property written as None is simply not sent.
- A typed value another writer stored that its type cannot hold (an ``Edm.Int64`` of
  ``"two"``) makes the SDK raise a bare ``ValueError`` for the whole entity, or the
  whole page of a query. :func:`tolerate_undecodable_values` has the SDK keep such a
  value as :class:`Undecodable` instead, and the record reads as unreadable, naming it
  (``Record.unreadable``): a bad record like any other, with its keys and ETag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from azure.data.tables import EdmType, EntityProperty, TableEntity
from azure.data.tables import _deserialize as sdk_reading

from checkpoint import service_targets
from checkpoint.backends.azure.times import as_utc
from checkpoint.storage import PropertyValue, Record, Where

KEYS = ("PartitionKey", "RowKey")


# --------------------------------------------------------------------------- writing


def to_entity(
    partition_key: str, row_key: str, properties: Mapping[str, PropertyValue]
) -> dict[str, Any]:
    """The SDK entity for a record (properties already checked by ``service_targets``)."""
    entity: dict[str, Any] = {"PartitionKey": partition_key, "RowKey": row_key}
    for name, value in properties.items():
        if value is not None:
            entity[name] = _to_sdk(value)
    return entity


def _to_sdk(value: PropertyValue) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return EntityProperty(value, EdmType.INT64)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


# --------------------------------------------------------------------------- reading


class Undecodable(NamedTuple):
    """A stored value its Edm type cannot hold, as the service returned it."""

    text: Any
    edm_type: str


def tolerate_undecodable_values() -> None:
    """Have the SDK keep a value it cannot convert to its Edm type as :class:`Undecodable`
    instead of raising ``ValueError`` for the whole entity (idempotent).

    The SDK converts each typed value through one table of functions while it reads a
    response, before any of our code sees the entity: wrapping those functions is the
    one place to catch it. Pinned by tests/checkpoint/test_azure_records.py."""
    conversions: dict[EdmType, Any] = sdk_reading._ENTITY_TO_PYTHON_CONVERSIONS
    for edm_type, convert in list(conversions.items()):
        if not isinstance(convert, _Tolerant):
            conversions[edm_type] = _Tolerant(convert, edm_type)


class _Tolerant:
    """One of the SDK's conversions, returning :class:`Undecodable` where it would raise."""

    def __init__(self, convert: Callable[[Any], Any], edm_type: str):
        self._convert, self._edm_type = convert, edm_type

    def __call__(self, value: Any) -> Any:
        try:
            return self._convert(value)
        except (ValueError, TypeError, ArithmeticError):  # binascii.Error is a ValueError
            return EntityProperty(Undecodable(value, self._edm_type), self._edm_type)


def to_record(entity: TableEntity) -> Record:
    """Our record from an SDK entity: keys split off, values in plain Python types; one
    with a value of another writer that its type cannot hold is unreadable."""
    metadata = entity.metadata
    timestamp = metadata.get("timestamp")
    kept = {name: value for name, value in entity.items() if name not in KEYS and value is not None}
    bad = [(name, value.value) for name, value in kept.items() if _is_undecodable(value)]
    return Record(
        partition_key=entity["PartitionKey"],
        row_key=entity["RowKey"],
        properties={} if bad else {name: from_sdk(value) for name, value in kept.items()},
        etag=metadata.get("etag") or "",
        timestamp=as_utc(timestamp) if timestamp is not None else None,
        unreadable=_why(*bad[0]) if bad else None,
    )


def _is_undecodable(value: Any) -> bool:
    return isinstance(value, EntityProperty) and isinstance(value.value, Undecodable)


def _why(name: str, value: Undecodable) -> str:
    edm = getattr(value.edm_type, "value", value.edm_type)
    wanted = "a whole number" if edm == EdmType.INT64.value else f"a valid {edm}"
    return f"property {name!r} is {edm} {value.text!r}, not {wanted}"


def from_sdk(value: Any) -> PropertyValue:
    """A property value as the SDK returned it, in the types records hold."""
    if isinstance(value, EntityProperty):
        if value.edm_type == EdmType.INT64:
            return int(value.value)
        return from_sdk(value.value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)  # an untyped integer is an integral double (module docstring)
    if isinstance(value, datetime):
        return as_utc(value)
    if isinstance(value, (str, bytes, float)):
        return value
    return str(value)  # a GUID from some other writer: keep it readable


# --------------------------------------------------------------------------- queries


def build_filter(partition_key: str, where: Sequence[Where]) -> tuple[str, dict[str, Any]]:
    """An OData filter and its ``parameters=`` for one partition and ANDed conditions.

    Strings, bytes, floats, bools and datetimes go through the SDK's parameter
    substitution (which quotes and escapes). Ints are written here as ``<digits>L``:
    the SDK would give small ones no ``L`` (so an Int64 property never matches) and
    turn 0 and 1 into ``false``/``true``. An ``int`` formats as digits only, so it
    cannot inject anything. Property names are checked against Azure's name rule.
    """
    clauses = ["PartitionKey eq @pk"]
    parameters: dict[str, Any] = {"pk": partition_key}
    for index, condition in enumerate(where):
        service_targets.check_where(condition)
        literal = _literal(condition.value, f"p{index}", parameters)
        clauses.append(f"{condition.property} {condition.op} {literal}")
    return " and ".join(clauses), parameters


def _literal(value: Any, key: str, parameters: dict[str, Any]) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{int(value)}L"
    parameters[key] = value
    return f"@{key}"


def select_list(select: Sequence[str] | None) -> list[str] | None:
    """The ``$select`` to send: the named properties plus the keys and timestamp.

    Azure returns only what ``$select`` names, keys included, and an empty select
    would mean "everything" to the SDK; the keys make both right.
    """
    names = service_targets.check_select(select)
    if names is None:
        return None
    return [*KEYS, "Timestamp", *dict.fromkeys(name for name in names if name != "RowKey")]
