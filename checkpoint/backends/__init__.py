"""Backend selection, in one place: a storage location in, a :class:`Storage` out.

Backends are imported only when chosen, so the embedded default never loads the Azure
SDKs and the Azure backend never loads SQLite.
"""

from __future__ import annotations

from checkpoint.clock import Clock
from checkpoint.location import StorageLocation, parse_location
from checkpoint.storage import Storage

#: Tries azure-core makes of a failed request (after the first) before our error is
#: raised. Azure SDK defaults (10 tries) wait out ~90 s against a dead endpoint.
DEFAULT_AZURE_RETRY_TOTAL = 3


def open_storage(
    location: StorageLocation | str | None = None,
    *,
    clock: Clock | None = None,
    azure_retry_total: int = DEFAULT_AZURE_RETRY_TOTAL,
) -> Storage:
    """Open the storage a ``--storage`` value names (see :mod:`checkpoint.location`).

    Args:
        location: a parsed location, the raw ``--storage`` text, or None for
            ``$RUNNER_STORAGE`` / ``./.runner``.
        clock: time source of the embedded backend (Azure keeps its own time).
        azure_retry_total: retries of a transient Azure fault before it is raised.
    """
    if not isinstance(location, StorageLocation):
        location = parse_location(location)
    if location.kind == "embedded":
        from checkpoint.backends.embedded import open_embedded

        assert location.directory is not None
        return open_embedded(location.directory, clock=clock)
    from checkpoint.backends.azure import open_azure

    return open_azure(location, retry_total=azure_retry_total)
