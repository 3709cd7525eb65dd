"""Azure Table storage as a :class:`~checkpoint.storage.RecordStore`.

Every write is checked by :mod:`checkpoint.service_targets` before it is sent (Azurite accepts
more properties than Azure and answers 500 to some keys). Conditional writes pass the
ETag with ``MatchConditions.IfNotModified``; :data:`~checkpoint.storage.ANY_ETAG` means
``If-Match: *`` (the record must exist, any version).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.core.paging import ItemPaged
from azure.data.tables import TableClient, TableEntity, TableServiceClient, UpdateMode

from checkpoint import service_targets
from checkpoint.backends.azure.entities import (
    build_filter,
    select_list,
    to_entity,
    to_record,
    tolerate_undecodable_values,
)
from checkpoint.backends.azure.errors import being_deleted, translated
from checkpoint.errors import InvalidRequest
from checkpoint.storage import ANY_ETAG, BatchOp, PropertyValue, Record, Where

#: Most entities Azure returns in one page of a query.
MAX_PAGE_SIZE = 1000

_MODES = {"replace": UpdateMode.REPLACE, "merge": UpdateMode.MERGE}


class AzureRecords:
    """The tables of one storage account (see :class:`~checkpoint.storage.RecordStore`).

    Args:
        service: the account's table service client (retry policy already set).
    """

    def __init__(self, service: TableServiceClient) -> None:
        self._service = service
        self._clients: dict[str, TableClient] = {}
        # A value another writer stored that its type cannot hold: a bad record, not
        # a ValueError out of the SDK (checkpoint.backends.azure.entities).
        tolerate_undecodable_values()

    def _table(self, table: str) -> TableClient:
        service_targets.check_table_name(table)
        client = self._clients.get(table)
        if client is None:
            client = self._clients[table] = self._service.get_table_client(table)
        return client

    def create_table(self, table: str) -> None:
        """Create ``table``; creating an existing table is not an error."""
        service_targets.check_table_name(table)
        with translated(f"create table {table!r}"):
            try:
                self._service.create_table(table)
            except ResourceExistsError as err:
                if being_deleted(err):  # recently deleted: it does not exist yet
                    raise

    def delete_table(self, table: str) -> None:
        """Delete ``table``; deleting a missing table is not an error."""
        service_targets.check_table_name(table)
        with translated(f"delete table {table!r}"):
            try:
                self._service.delete_table(table)
            except ResourceNotFoundError:
                pass  # 12.7.0 already swallows the 404; older versions raise it

    def get(self, table: str, partition_key: str, row_key: str) -> Record:
        """Read one record. Raises NotFound."""
        client = self._table(table)
        _check_keys(partition_key, row_key)
        with translated(f"read record {partition_key!r}/{row_key!r} of table {table!r}"):
            return to_record(client.get_entity(partition_key, row_key))

    def insert(
        self, table: str, partition_key: str, row_key: str, properties: Mapping[str, PropertyValue]
    ) -> str:
        """Create a record that must not exist yet; returns its ETag."""
        client = self._table(table)
        service_targets.check_entity(partition_key, row_key, properties)
        entity = to_entity(partition_key, row_key, properties)
        with translated(f"insert record {partition_key!r}/{row_key!r} into table {table!r}"):
            return str(client.create_entity(entity)["etag"])

    def replace(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        etag: str,
    ) -> str:
        """Replace all properties if the ETag still matches; returns the new ETag."""
        return self._update(table, partition_key, row_key, properties, etag, "replace")

    def merge(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        etag: str,
    ) -> str:
        """Update the given properties if the ETag still matches; returns the new ETag."""
        return self._update(table, partition_key, row_key, properties, etag, "merge")

    def _update(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        etag: str,
        kind: str,
    ) -> str:
        client = self._table(table)
        service_targets.check_entity(partition_key, row_key, properties)
        entity = to_entity(partition_key, row_key, properties)
        condition = _condition(_required_etag(etag))
        with translated(f"{kind} record {partition_key!r}/{row_key!r} in table {table!r}"):
            return str(client.update_entity(entity, mode=_MODES[kind], **condition)["etag"])

    def upsert(
        self,
        table: str,
        partition_key: str,
        row_key: str,
        properties: Mapping[str, PropertyValue],
        *,
        merge: bool = False,
    ) -> str:
        """Create or overwrite (``merge=True``: create or merge) unconditionally."""
        client = self._table(table)
        service_targets.check_entity(partition_key, row_key, properties)
        entity = to_entity(partition_key, row_key, properties)
        mode = UpdateMode.MERGE if merge else UpdateMode.REPLACE
        with translated(f"upsert record {partition_key!r}/{row_key!r} in table {table!r}"):
            return str(client.upsert_entity(entity, mode=mode)["etag"])

    def delete(self, table: str, partition_key: str, row_key: str, *, etag: str) -> None:
        """Delete if the ETag still matches; a missing record is not an error."""
        client = self._table(table)
        _check_keys(partition_key, row_key)
        condition = _condition(_required_etag(etag))
        with translated(f"delete record {partition_key!r}/{row_key!r} from table {table!r}"):
            # The SDK treats 404 as success, as the RecordStore contract wants.
            client.delete_entity(partition_key, row_key, **condition)

    def query(
        self,
        table: str,
        partition_key: str,
        where: Sequence[Where] = (),
        *,
        select: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> Iterator[Record]:
        """Records of one partition matching every condition, in RowKey order.

        Arguments are checked now; requests are made as the iterator is consumed.
        """
        client = self._table(table)
        service_targets.check_key(partition_key, "PartitionKey")
        query_filter, parameters = build_filter(partition_key, where)
        service_targets.check_limit(limit)
        page_size = min(limit or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
        operation = f"query partition {partition_key!r} of table {table!r}"
        with translated(operation):
            pages = client.query_entities(
                query_filter,
                parameters=parameters,
                select=select_list(select),
                results_per_page=page_size,
            )
        return _records(pages, limit, operation)

    def batch(self, table: str, partition_key: str, operations: Sequence[BatchOp]) -> list[str]:
        """Apply 1-100 operations on distinct rows of one partition atomically."""
        client = self._table(table)
        sizes = [_check_op(partition_key, op) for op in operations]
        service_targets.check_batch([op.row_key for op in operations], sizes)
        actions = [_action(partition_key, op) for op in operations]
        with translated(f"batch of {len(actions)} in partition {partition_key!r} of {table!r}"):
            results = client.submit_transaction(actions)
        return [str(result.get("etag") or "") for result in results]


def _records(pages: ItemPaged[TableEntity], limit: int | None, operation: str) -> Iterator[Record]:
    """Records as the pages arrive (Azure returns a partition in RowKey order)."""
    if limit == 0:
        return
    count = 0
    with translated(operation):
        for entity in pages:
            yield to_record(entity)
            count += 1
            if limit is not None and count >= limit:
                return


def _check_keys(partition_key: str, row_key: str) -> None:
    service_targets.check_key(partition_key, "PartitionKey")
    service_targets.check_key(row_key, "RowKey")


def _required_etag(etag: str) -> str:
    if not isinstance(etag, str) or not etag:
        raise InvalidRequest(
            f"a conditional write needs the record's ETag (or '*' for any), not {etag!r}",
            code="InvalidInput",
        )
    return etag


def _condition(etag: str | None) -> dict[str, Any]:
    """SDK keywords for If-Match: the ETag, or ``*`` (the record must exist)."""
    if etag is None or etag == ANY_ETAG:
        return {"match_condition": MatchConditions.Unconditionally}
    return {"etag": etag, "match_condition": MatchConditions.IfNotModified}


def _check_op(partition_key: str, op: BatchOp) -> int:
    if op.kind not in ("insert", "replace", "merge", "upsert_replace", "upsert_merge", "delete"):
        raise InvalidRequest(f"unknown batch operation {op.kind!r}", code="InvalidInput")
    if op.etag is not None:
        _required_etag(op.etag)
    properties = {} if op.kind == "delete" else op.properties
    return service_targets.check_entity(partition_key, op.row_key, properties)


def _action(partition_key: str, op: BatchOp) -> tuple[Any, ...]:
    """One ``submit_transaction`` operation for a :class:`BatchOp`."""
    if op.kind == "delete":
        keys = {"PartitionKey": partition_key, "RowKey": op.row_key}
        return ("delete", keys, _condition(op.etag))
    entity = to_entity(partition_key, op.row_key, op.properties)
    if op.kind == "insert":
        return ("create", entity)
    if op.kind in ("replace", "merge"):
        return ("update", entity, {"mode": _MODES[op.kind], **_condition(op.etag)})
    mode = UpdateMode.MERGE if op.kind == "upsert_merge" else UpdateMode.REPLACE
    return ("upsert", entity, {"mode": mode})
