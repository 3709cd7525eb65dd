"""Azure Blob storage as a :class:`~checkpoint.storage.BlobStore` (block blobs).

ETags are kept in the quoted form (``"0x8D..."``) that uploads and property reads return;
listings return them unquoted, so they are quoted here to compare equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobProperties, BlobServiceClient, ContainerClient

from checkpoint import service_targets
from checkpoint.backends.azure.errors import being_deleted, error_code, translated
from checkpoint.backends.azure.times import as_utc
from checkpoint.errors import InvalidRequest
from checkpoint.storage import BlobInfo


class AzureBlobs:
    """The blob containers of one storage account (see :class:`~checkpoint.storage.BlobStore`).

    Args:
        service: the account's blob service client (retry policy already set).
    """

    def __init__(self, service: BlobServiceClient) -> None:
        self._service = service

    def _container(self, container: str) -> ContainerClient:
        service_targets.check_container_name(container)
        return self._service.get_container_client(container)

    def create_container(self, container: str) -> None:
        """Create ``container``; creating an existing container is not an error."""
        client = self._container(container)
        with translated(f"create container {container!r}"):
            try:
                client.create_container()
            except ResourceExistsError as err:
                if being_deleted(err):  # recently deleted: it does not exist yet
                    raise

    def delete_container(self, container: str) -> None:
        """Delete ``container`` and its blobs; deleting a missing one is not an error."""
        client = self._container(container)
        with translated(f"delete container {container!r}"):
            try:
                client.delete_container()
            except ResourceNotFoundError:
                pass

    def put(
        self,
        container: str,
        name: str,
        data: bytes,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> BlobInfo:
        """Write a blob, overwriting unless a condition says otherwise."""
        blob = self._container(container).get_blob_client(service_targets.check_blob_name(name))
        data = _bytes(data)
        service_targets.check_put_conditions(if_match, if_none_match)
        # overwrite=False sends If-None-Match: * (409 BlobAlreadyExists if present).
        conditions: dict[str, Any] = {"overwrite": not if_none_match}
        if if_match is not None:
            conditions.update(etag=if_match, match_condition=MatchConditions.IfNotModified)
        with translated(f"write blob {name!r} in container {container!r}"):
            written = blob.upload_blob(data, **conditions)
        return BlobInfo(name, len(data), _quoted(written["etag"]), as_utc(written["last_modified"]))

    def get(
        self, container: str, name: str, *, offset: int = 0, length: int | None = None
    ) -> bytes:
        """Read the blob, or ``length`` bytes from ``offset``. Raises NotFound."""
        blob = self._container(container).get_blob_client(service_targets.check_blob_name(name))
        service_targets.check_range(offset, length)
        if offset == 0 and length is None:
            # A whole read: also right for an empty blob, where any range gives 416.
            with translated(f"read blob {name!r} in container {container!r}"):
                return blob.download_blob().readall()
        if length == 0:
            self.info(container, name)  # still NotFound for a missing blob
            return b""
        with translated(f"read blob {name!r} in container {container!r}"):
            try:
                return blob.download_blob(offset=offset, length=length).readall()
            except HttpResponseError as err:
                # 416 InvalidRange: the offset is past the end. Answer as slicing
                # bytes would, with nothing.
                if err.status_code == 416 and error_code(err) == "InvalidRange":
                    return b""
                raise

    def info(self, container: str, name: str) -> BlobInfo:
        """The blob's properties. Raises NotFound."""
        blob = self._container(container).get_blob_client(service_targets.check_blob_name(name))
        with translated(f"read properties of blob {name!r} in container {container!r}"):
            props = blob.get_blob_properties()
        return BlobInfo(name, int(props.size), _quoted(props.etag), as_utc(props.last_modified))

    def delete(self, container: str, name: str, *, if_match: str | None = None) -> None:
        """Delete the blob. Raises NotFound if missing, Conflict if ``if_match`` differs."""
        blob = self._container(container).get_blob_client(service_targets.check_blob_name(name))
        conditions: dict[str, Any] = {}
        if if_match is not None:
            conditions.update(etag=if_match, match_condition=MatchConditions.IfNotModified)
        with translated(f"delete blob {name!r} in container {container!r}"):
            blob.delete_blob(**conditions)

    def list(self, container: str, prefix: str = "") -> Iterator[BlobInfo]:
        """Blobs whose name starts with ``prefix``, in name order.

        The container is checked now; listing pages are fetched as the iterator goes.
        """
        client = self._container(container)
        operation = f"list blobs in container {container!r}"
        with translated(operation):
            pages = client.list_blobs(name_starts_with=prefix or None)
        return _infos(pages, operation)


def _infos(pages: Iterator[BlobProperties], operation: str) -> Iterator[BlobInfo]:
    with translated(operation):
        for props in pages:
            yield BlobInfo(
                props.name, int(props.size), _quoted(props.etag), as_utc(props.last_modified)
            )


def _bytes(data: bytes) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidRequest(f"blob data is bytes, not {type(data).__name__}", code="InvalidInput")
    return bytes(data)


def _quoted(etag: str) -> str:
    return etag if etag.startswith('"') else f'"{etag}"'
