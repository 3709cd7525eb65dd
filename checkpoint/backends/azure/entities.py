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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from azure.data.tables import EdmType, EntityProperty, TableEntity

from checkpoint import limits
from checkpoint.backends.azure.times import as_utc
from checkpoint.storage import PropertyValue, Record, Where

KEYS = ("PartitionKey", "RowKey")


# --------------------------------------------------------------------------- writing


def to_entity(
    partition_key: str, row_key: str, properties: Mapping[str, PropertyValue]
) -> dict[str, Any]:
    """The SDK entity for a record (properties already checked by ``limits``)."""
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


def to_record(entity: TableEntity) -> Record:
    """Our record from an SDK entity: keys split off, values in plain Python types."""
    metadata = entity.metadata
    properties = {
        name: from_sdk(value)
        for name, value in entity.items()
        if name not in KEYS and value is not None
    }
    timestamp = metadata.get("timestamp")
    return Record(
        partition_key=entity["PartitionKey"],
        row_key=entity["RowKey"],
        properties=properties,
        etag=metadata.get("etag") or "",
        timestamp=as_utc(timestamp) if timestamp is not None else None,
    )


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
        limits.check_where(condition)
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
    names = limits.check_select(select)
    if names is None:
        return None
    return [*KEYS, "Timestamp", *dict.fromkeys(name for name in names if name != "RowKey")]
