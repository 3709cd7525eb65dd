"""The Azure Storage backend: Queue, Table and Blob storage (real Azure or Azurite).

Only this package imports ``azure.*``. :func:`open_azure` builds the three SDK clients
once (retry policy included) and wraps them in the three protocols of
:mod:`checkpoint.storage`; SDK errors are translated to :mod:`jobs.errors` by
:mod:`.errors` at every call.
"""

from __future__ import annotations

from checkpoint.backends.azure.blobs import AzureBlobs
from checkpoint.backends.azure.clients import build_clients, endpoints_for
from checkpoint.backends.azure.queues import AzureQueues
from checkpoint.backends.azure.records import AzureRecords
from checkpoint.location import StorageLocation
from checkpoint.storage import Storage

__all__ = ["AzureBlobs", "AzureQueues", "AzureRecords", "open_azure"]


def open_azure(location: StorageLocation, *, retry_total: int = 3) -> Storage:
    """Open the storage account ``location`` names.

    Args:
        location: an Azure location (connection string or account URL).
        retry_total: retries of a transient fault (connection error, 408, 5xx) per
            request, made by the SDK's retry policy with a short bounded backoff. 0 makes
            every request exactly once.

    Raises:
        ConfigurationError: the location is unusable, or needs azure-identity that is
            not installed. Nothing is contacted until the first operation.
    """
    clients = build_clients(endpoints_for(location), retry_total=retry_total)
    return Storage(
        queues=AzureQueues(clients.queues),
        records=AzureRecords(clients.tables),
        blobs=AzureBlobs(clients.blobs),
        description=location.description,
        closer=clients.close,
    )
