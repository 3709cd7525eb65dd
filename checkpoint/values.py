"""A record's values: msgpack inline or, past :data:`~checkpoint.records.SPILL_BYTES`,
spilled to a blob of their own.

A spilled value's blob is never overwritten (each write gets a fresh name), so a lost
race leaves the winner's blob intact; the loser deletes its own. What a write spilled is
deleted once the write is known not applied (:func:`refused`), and what it replaced once
it is.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from checkpoint import codec, layout
from checkpoint.errors import BadRecord, CodecError, NotFound, StorageError
from checkpoint.records import SPILL_BYTES
from checkpoint.retries import TRANSIENT
from checkpoint.storage import Storage

log = logging.getLogger(__name__)


class Values:
    """Stored values of the records of one storage account, and their blobs."""

    def __init__(self, storage: Storage):
        self._storage = storage

    def put(self, owner: tuple[str, str, int], field: str, value: Any) -> dict[str, Any]:
        """Properties holding ``value`` inline or, if large, as a fresh blob named for
        ``owner`` (job id, task kind, index). Raises CodecError if it cannot be stored."""
        data = codec.encode(value, field)
        if len(data) <= SPILL_BYTES:
            return {field: data, f"{field}_blob": ""}
        name = layout.blob_name(*owner, field, uuid.uuid4().hex[:12])
        self._storage.blobs.put(layout.DATA_CONTAINER, name, data)
        return {field: b"", f"{field}_blob": name}

    def read(
        self,
        properties: Mapping[str, Any],
        field: str,
        default: Any = None,
        of: str = "record",
        required: bool = False,
    ) -> Any:
        """A stored field's value, read from its blob if it was spilled.

        Raises BadRecord naming ``of`` (the record, as ``TaskRecord.name`` says it) and
        the field if what is stored there is not a msgpack value or its blob is gone,
        or, if ``required``, if the record holds neither the value nor its blob (every
        write of it stores one: None is stored as msgpack's nil).
        """
        blob, data = properties.get(f"{field}_blob"), properties.get(field)
        if required and not blob and not data:
            raise BadRecord(f"{of}: {field} is missing")
        try:
            if blob:
                if not isinstance(blob, str):
                    raise BadRecord(f"{of}: {field}_blob {blob!r} is not a blob name")
                data = self._storage.blobs.get(layout.DATA_CONTAINER, blob)
            if not data:
                return default
            if not isinstance(data, bytes):
                raise BadRecord(f"{of}: {field} is a {type(data).__name__}, not msgpack bytes")
            return codec.decode(data, field)
        except CodecError as error:
            raise BadRecord(f"{of}: {error}") from error
        except NotFound as missing:
            raise BadRecord(f"{of}: {field}_blob {blob!r} names no blob") from missing

    def drop_replaced(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Delete the blobs of ``old`` that the applied write ``new`` named others for."""
        for key, name in old.items():
            if key.endswith("_blob") and name and key in new and new[key] != name:
                self._delete(name)

    def drop_unwritten(self, unwritten: Iterable[Mapping[str, Any]]) -> None:
        """Delete the blobs spilled for writes known not applied: nothing names them.

        Best effort, called while the write's own error is raised: a blob that cannot
        be deleted now is left (deleting the job removes it) rather than the caller
        being told of the delete's trouble instead of why its write failed."""
        for properties in unwritten:
            for name in [v for k, v in properties.items() if k.endswith("_blob") and v]:
                try:
                    self._delete(name)
                except StorageError as error:
                    log.warning("spilled blob %s of an unwritten record left: %s", name, error)

    def _delete(self, name: str) -> None:
        try:
            self._storage.blobs.delete(layout.DATA_CONTAINER, name)
        except NotFound:
            pass


def refused(error: Exception) -> bool:
    """Whether a write that raised ``error`` is known not to have been applied: every
    error says so but the transient ones, after which it may have been (the answer
    lost). Blobs spilled for a refused write can go; for the others, not."""
    return not isinstance(error, TRANSIENT)
