"""Backend selection, in one place: a storage location in, a :class:`Storage` out.

Backends are imported only when chosen, so the embedded default never loads the Azure
SDKs and the Azure backend never loads SQLite.
"""

from __future__ import annotations

from pathlib import Path

from checkpoint import layout
from checkpoint.clock import Clock
from checkpoint.errors import NotFound, StoreNotFound
from checkpoint.location import StorageLocation, parse_location
from checkpoint.storage import Storage

#: Tries azure-core makes of a failed request (after the first) before our error is
#: raised. Azure SDK defaults (10 tries) wait out ~90 s against a dead endpoint.
DEFAULT_AZURE_RETRY_TOTAL = 3

#: What makes a store, as a "no store" message says.
CREATES_A_STORE = "`runner submit` or `runner start` creates one"


def open_storage(
    location: StorageLocation | str | None = None,
    *,
    clock: Clock | None = None,
    azure_retry_total: int = DEFAULT_AZURE_RETRY_TOTAL,
    create: bool = True,
) -> Storage:
    """Open the storage a ``--storage`` value names (see :mod:`checkpoint.location`).

    Args:
        location: a parsed location, the raw ``--storage`` text, or None for
            ``$RUNNER_STORAGE`` / ``./.runner``.
        clock: time source of the embedded backend (Azure keeps its own time).
        azure_retry_total: retries of a transient Azure fault before it is raised.
        create: False for a command that only reads or changes what is there: a
            location without a store is then refused, and nothing is created (a typo
            in ``--storage`` must not leave a directory and a store behind).

    Raises:
        StoreNotFound: ``create`` is False and there is no store at the location.
        StoreReadOnly: ``create`` and this process may only read the embedded store
            there; with ``create`` False it is opened for reading (its writes raise it).
    """
    if not isinstance(location, StorageLocation):
        location = parse_location(location)
    if location.kind == "embedded":
        from checkpoint.backends.embedded import check_directory, open_embedded, store_file

        assert location.directory is not None
        check_directory(location.directory)
        if not create and not store_file(location.directory).is_file():
            raise StoreNotFound(_no_store(str(location.directory)))
        return open_embedded(location.directory, clock=clock, writable=create)
    from checkpoint.backends.azure import open_azure

    opened = open_azure(location, retry_total=azure_retry_total)
    if not create:
        try:
            require_store(opened)
        except BaseException:
            opened.close()
            raise
    return opened


def require_store(storage: Storage) -> None:
    """An account is a store once it has the jobs table (created with the store's other
    tables by the first ``submit`` or ``start``). A query of a missing table is
    NotFound; of an existing one, never."""
    try:
        list(storage.records.query(layout.JOBS_TABLE, layout.JOBS_PARTITION, limit=1))
    except NotFound as missing:
        raise StoreNotFound(
            _no_store(f"{storage.description} (no {layout.JOBS_TABLE!r} table)")
        ) from missing


def _no_store(where: str) -> str:
    return f"no store at {where}: {CREATES_A_STORE} (is --storage right?)"


def embedded_store_paths(directory: Path) -> list[Path]:
    """What an embedded store in ``directory`` consists of (files and the blob folder)."""
    from checkpoint.backends.embedded import store_paths

    return store_paths(directory)
