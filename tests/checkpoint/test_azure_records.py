"""Azure backend: rows another writer left that the SDK cannot decode are bad records,
never a bare ``ValueError`` (checkpoint/backends/azure/records.py, entities.py).

On Azurite, each row written by the plain SDK, as a hand edit or another program would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from azure.data.tables import EdmType, EntityProperty, TableClient

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.errors import BadRecord
from checkpoint.storage import Storage, Where
from checkpoint.store import CheckpointStore
from tests.azurite import Azurite


@pytest.fixture
def storage(azurite: Azurite) -> Iterator[Storage]:
    opened = open_storage(azurite.connection_string, azure_retry_total=1)
    yield opened
    opened.close()


class _Text:
    """A value the SDK sends as the text it prints (its own check of an Int64 only asks
    ``int()`` of it): how another writer's non-numeric Int64 reaches the service."""

    def __init__(self, text: str):
        self.text = text

    def __int__(self) -> int:
        return 0

    def __str__(self) -> str:
        return self.text


def _plain_sdk_row(azurite: Azurite, table: str, partition: str, row: str, **int64: str) -> None:
    """Merge into (or make) a row with the plain SDK, each of ``int64`` an Edm.Int64
    holding that text."""
    entity = {name: EntityProperty(_Text(text), EdmType.INT64) for name, text in int64.items()}
    with TableClient.from_connection_string(azurite.connection_string, table) as client:
        client.upsert_entity({"PartitionKey": partition, "RowKey": row, **entity})


def test_a_non_numeric_int64_reads_as_a_bad_record_by_get_and_by_query(
    azurite: Azurite, storage: Storage
):
    # Given a table with a good row and one whose Edm.Int64 holds text
    table = f"t{uuid.uuid4().hex[:12]}"
    storage.records.create_table(table)
    try:
        storage.records.upsert(table, "p", "a-good", {"attempt": 2})
        _plain_sdk_row(azurite, table, "p", "b-bad", attempt="two")

        # When it is read, then it is a record that says why it cannot be read
        bad = storage.records.get(table, "p", "b-bad")
        assert bad.unreadable == "property 'attempt' is Edm.Int64 'two', not a whole number"
        assert bad.properties == {} and bad.etag and bad.row_key == "b-bad"
        # And a query names it beside the good one, whatever its conditions
        found = list(storage.records.query(table, "p", [Where("attempt", "ge", 1)]))
        assert [(one.row_key, one.unreadable) for one in found] == [
            ("a-good", None),
            ("b-bad", bad.unreadable),
        ]
        # And a write conditional on its ETag writes a readable record over it
        storage.records.merge(table, "p", "b-bad", {"attempt": 3}, etag=bad.etag)
        assert storage.records.get(table, "p", "b-bad").properties["attempt"] == 3
    finally:
        storage.records.delete_table(table)


def test_a_task_whose_int64_is_not_a_number_is_the_projects_bad_record(
    azurite: Azurite, storage: Storage
):
    # Given a job whose planning record's attempt another writer set to text
    store = CheckpointStore(storage)
    job_id = f"int64-{uuid.uuid4().hex[:10]}"
    store.create_job(job_id, "m:Job", "int64-jobs", None)
    store.ensure_task(job_id, "plan")
    partition = layout.control_partition(job_id)
    _plain_sdk_row(azurite, layout.TASKS_TABLE, partition, layout.PLAN_ROW, attempt="x")

    # When it is read as a task, then BadRecord names it and what is wrong
    with pytest.raises(BadRecord, match="property 'attempt' is Edm.Int64 'x', not a whole"):
        store.get_task(job_id, "plan", 0)
