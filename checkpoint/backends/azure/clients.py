"""The three SDK service clients of one storage account, built in one place.

A :class:`~checkpoint.location.StorageLocation` holds either a connection string or an
account URL. Both are reduced here to :class:`Endpoints` (one URL per service and one
credential), parsed by us rather than by each SDK's ``from_connection_string``: the three
SDKs disagree on details (the storage SDKs want ``UseDevelopmentStorage=true`` in lower
case, tables only as the whole string), and none of them reads "AccountName but no key",
which here means ``DefaultAzureCredential``.

Each client gets the backend's one retry policy (:mod:`.retry`) here, and only here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.pipeline.transport import RequestsTransport
from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobServiceClient
from azure.storage.queue import QueueServiceClient
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from checkpoint.backends.azure.retry import (
    CONNECTION_TIMEOUT_SECONDS,
    check_retry_total,
    storage_retry_policy,
    tables_retry_settings,
)
from checkpoint.errors import ConfigurationError
from checkpoint.location import StorageLocation, connection_settings, redact, shown_url

#: Azurite's and the Storage Emulator's fixed account (public, documented by Microsoft).
DEV_ACCOUNT = "devstoreaccount1"
DEV_ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
DEV_PORTS = {"blob": 10000, "queue": 10001, "table": 10002}
DEFAULT_ENDPOINT_SUFFIX = "core.windows.net"
SERVICES = ("blob", "queue", "table")

IDENTITY_MISSING = (
    "an Azure location without an account key or SAS is reached with DefaultAzureCredential, "
    "which needs azure-identity, the 'identity' extra: `make venv` installs it "
    "(pip install -e '.[identity]' in a clone)"
)


@dataclass(frozen=True)
class Endpoints:
    """Where each service of an account lives, and how to sign requests to it.

    ``credential`` is an ``AzureNamedKeyCredential``, an ``AzureSasCredential``, or None
    for ``DefaultAzureCredential`` (created only when the clients are built).
    """

    account: str
    urls: dict[str, str]
    credential: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        kind = type(self.credential).__name__ if self.credential else "DefaultAzureCredential"
        urls = {service: shown_url(url) for service, url in self.urls.items()}
        return f"Endpoints({self.account}, {urls}, {kind})"


@dataclass
class ServiceClients:
    """The SDK clients of one account and a way to close them all."""

    queues: QueueServiceClient
    tables: TableServiceClient
    blobs: BlobServiceClient
    closers: list[Callable[[], object]] = field(default_factory=list, repr=False)

    def close(self) -> None:
        """Close every client (and the credential, if we made one); idempotent."""
        closers, self.closers = self.closers, []
        for close in closers:
            close()


# --------------------------------------------------------------------------- parsing


def endpoints_for(location: StorageLocation) -> Endpoints:
    """The endpoints and credential a location names.

    Raises:
        ConfigurationError: the location is not an Azure one, or misses what is needed
            to reach every service. Messages never repeat a secret.
    """
    if location.kind != "azure":
        raise ConfigurationError(f"{location.description} is not an Azure Storage location")
    if location.connection_string is not None:
        return parse_connection_string(location.connection_string)
    if location.account_url is not None:
        return parse_account_url(location.account_url)
    raise ConfigurationError("an Azure location needs a connection string or an account URL")


def parse_connection_string(text: str) -> Endpoints:
    """Endpoints from a connection string (keys are case-insensitive, as in the SDKs;
    checked by :func:`checkpoint.location.connection_settings`)."""
    settings = connection_settings(text)
    if settings.get("usedevelopmentstorage", "").lower() == "true":
        return _development_storage(settings)
    account = settings.get("accountname", "")
    if not account:
        raise ConfigurationError("the connection string names no AccountName")
    protocol = settings.get("defaultendpointsprotocol", "https").lower()
    suffix = settings.get("endpointsuffix", DEFAULT_ENDPOINT_SUFFIX)
    urls = {
        service: settings.get(f"{service}endpoint") or f"{protocol}://{account}.{service}.{suffix}"
        for service in SERVICES
    }
    credential = _credential(settings, account)
    if credential is None:
        urls, credential = _sas_of_urls(urls)
    return Endpoints(account, _strip_slashes(urls), credential)


def parse_account_url(url: str) -> Endpoints:
    """Endpoints from any one service URL of an account (``https://acct.blob.<suffix>``).

    A SAS in the URL's query signs requests; without one, DefaultAzureCredential does.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    account, _, rest = host.partition(".")
    service, _, suffix = rest.partition(".")
    if not account or service not in (*SERVICES, "dfs") or not suffix:
        raise ConfigurationError(
            f"{shown_url(url)} is not an account URL like https://<account>.blob.core.windows.net"
        )
    port = f":{parts.port}" if parts.port else ""
    urls = {s: f"{parts.scheme}://{account}.{s}.{suffix}{port}" for s in SERVICES}
    credential = AzureSasCredential(parts.query) if parts.query else None
    return Endpoints(account, urls, credential)


def _development_storage(settings: dict[str, str]) -> Endpoints:
    """Azurite's (and the old emulator's) well-known account on its default ports."""
    base = settings.get("developmentstorageproxyuri", "http://127.0.0.1").rstrip("/")
    urls = {s: f"{base}:{DEV_PORTS[s]}/{DEV_ACCOUNT}" for s in SERVICES}
    return Endpoints(DEV_ACCOUNT, urls, AzureNamedKeyCredential(DEV_ACCOUNT, DEV_ACCOUNT_KEY))


def _credential(settings: dict[str, str], account: str) -> Any:
    if settings.get("accountkey"):
        return AzureNamedKeyCredential(account, settings["accountkey"])
    if settings.get("sharedaccesssignature"):
        return AzureSasCredential(settings["sharedaccesssignature"].lstrip("?"))
    return None


def _sas_of_urls(urls: dict[str, str]) -> tuple[dict[str, str], Any]:
    """A SAS the endpoint URLs carry (``BlobEndpoint=https://...?sv=...&sig=...``) signs
    requests, as the SDKs read it, when the string names no key or SAS of its own; the
    URLs lose it. One SAS for every service, or none: each client has one credential."""
    queries = {urlsplit(url).query for url in urls.values()}
    if queries == {""}:
        return urls, None
    if len(queries) > 1:
        raise ConfigurationError(
            "the connection string's endpoint URLs do not carry the same SAS (or some "
            "carry none): give one SharedAccessSignature= instead"
        )
    bare = {service: url.split("?", 1)[0] for service, url in urls.items()}
    return bare, AzureSasCredential(queries.pop())


def _strip_slashes(urls: dict[str, str]) -> dict[str, str]:
    return {service: url.rstrip("/") for service, url in urls.items()}


# --------------------------------------------------------------------------- clients


def build_clients(endpoints: Endpoints, *, retry_total: int) -> ServiceClients:
    """Queue, table and blob service clients for ``endpoints``.

    Raises:
        ConfigurationError: DefaultAzureCredential is needed but azure-identity is not
            installed, or an SDK refuses the endpoints.
    """
    check_retry_total(retry_total)
    credential = endpoints.credential
    own_credential = credential is None
    if own_credential:
        credential = default_credential()
    try:
        clients = _service_clients(endpoints.urls, credential, retry_total)
    except ValueError as err:
        if own_credential:
            credential.close()
        raise ConfigurationError(
            f"Azure Storage at {redact(repr(endpoints))} is unusable: {redact(str(err))}"
        ) from None
    if own_credential:
        # Last: the credential must outlive every client that signs with it.
        clients.closers.append(credential.close)
    return clients


#: HTTP connections kept per service and host (requests' default: 10).
POOL_CONNECTIONS = 32


def _transport() -> RequestsTransport:
    """The SDK's default transport with room for :data:`POOL_CONNECTIONS` connections.

    requests keeps 10 per host and warns ("Connection pool is full, discarding
    connection") when more threads talk at once: a worker's chunk threads, its finisher
    deleting messages concurrently and its lease keeper easily do. Like the SDK's own
    session, it leaves retries to the pipeline (one retry layer: see ``retry.py``).
    """
    session = requests.Session()
    adapter = HTTPAdapter(
        pool_maxsize=POOL_CONNECTIONS,
        max_retries=Retry(total=False, redirect=False, raise_on_status=False),
    )
    for scheme in ("http://", "https://"):
        session.mount(scheme, adapter)
    return RequestsTransport(session=session, connection_timeout=CONNECTION_TIMEOUT_SECONDS)


def _service_clients(urls: dict[str, str], credential: Any, retry_total: int) -> ServiceClients:
    queues = QueueServiceClient(
        urls["queue"],
        credential,
        retry_policy=storage_retry_policy("queue", retry_total),
        transport=_transport(),
    )
    tables = TableServiceClient(
        urls["table"],
        credential=credential,
        **tables_retry_settings(retry_total),
        transport=_transport(),
    )
    blobs = BlobServiceClient(
        urls["blob"],
        credential,
        retry_policy=storage_retry_policy("blob", retry_total),
        transport=_transport(),
    )
    return ServiceClients(queues, tables, blobs, [queues.close, tables.close, blobs.close])


def default_credential() -> Any:
    """``DefaultAzureCredential()``, or ConfigurationError if azure-identity is missing."""
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise ConfigurationError(IDENTITY_MISSING) from None
    return DefaultAzureCredential()
