"""Where storage lives: the ``--storage`` / ``RUNNER_STORAGE`` value, parsed in one place.

One string selects the backend:

- an Azure Storage connection string, recognised by ``AccountName=`` or
  ``UseDevelopmentStorage=true`` (account key or SAS inside, or neither: then the
  account's endpoints are reached with ``DefaultAzureCredential``);
- an account URL ``https://<account>.<service>.core.windows.net`` (any of the blob,
  queue or table URLs), reached with ``DefaultAzureCredential``, or with the account
  SAS token if the URL carries one (``...windows.net/?sv=...&sig=...``);
- anything else is a directory for the embedded store (made by ``submit`` and ``start`` if
  missing; other commands refuse a location without a store, see
  :func:`checkpoint.backends.open_storage`).

Nothing given means ``$RUNNER_STORAGE``, then ``./.runner/``. Secrets never leave this
module unredacted: :attr:`StorageLocation.description` and ``repr`` are safe to log.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from checkpoint.errors import ConfigurationError

ENV_VAR = "RUNNER_STORAGE"
DEFAULT_DIRECTORY = ".runner"

_SECRET_SETTINGS = re.compile(
    r"(?i)\b(AccountKey|SharedAccessSignature|SharedAccessKey|SharedAccessKeyName)=[^;]*"
)
_SAS_QUERY = re.compile(
    r"(?i)\b(sig|se|sv|sp|spr|st|srt|ss|sr|skoid|sktid|skt|ske|sks|skv)=[^&;\s]*"
)
_ACCOUNT_URL = re.compile(
    r"^(?P<scheme>https?)://(?P<account>[a-z0-9]{3,24})\.(?:blob|queue|table|dfs)\."
    r"(?P<suffix>[^/?]+)/?(?:\?(?P<sas>.*))?$",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with account keys and SAS tokens replaced by ``***``."""
    text = _SECRET_SETTINGS.sub(lambda m: f"{m.group(1)}=***", text)
    return _SAS_QUERY.sub(lambda m: f"{m.group(1)}=***", text)


@dataclass(frozen=True)
class StorageLocation:
    """A parsed storage location. Exactly one of ``directory``, ``connection_string`` and
    ``account_url`` is set, by ``kind``."""

    kind: Literal["embedded", "azure"]
    directory: Path | None = None
    connection_string: str | None = field(default=None, repr=False)
    account_url: str | None = field(default=None, repr=False)

    @property
    def description(self) -> str:
        """Backend and place, with every secret removed: safe for logs and errors."""
        if self.kind == "embedded":
            return f"embedded:{self.directory}"
        if self.connection_string is not None:
            return f"azure:{redact(self.connection_string)}"
        url = self.account_url or ""
        how = "SAS" if "?" in url else "DefaultAzureCredential"
        return f"azure:{redact(url)} ({how})"

    def __repr__(self) -> str:
        return f"StorageLocation({self.description})"


def _settings(connection_string: str) -> dict[str, str]:
    pairs = (part.split("=", 1) for part in connection_string.split(";") if part.strip())
    return {key.strip().lower(): value.strip() for key, value in pairs}


def parse_location(text: str | None, environ: Mapping[str, str] | None = None) -> StorageLocation:
    """Parse a ``--storage`` value; None falls back to ``$RUNNER_STORAGE``, then ``./.runner``.

    Raises:
        ConfigurationError: the text looks like a connection string or URL but is not a
            usable one. The message never repeats a secret.
    """
    if environ is None:
        environ = os.environ
    if text is None or not text.strip():
        text = environ.get(ENV_VAR, "").strip() or DEFAULT_DIRECTORY
    text = text.strip()
    lowered = text.lower()
    if "accountname=" in lowered or "usedevelopmentstorage=true" in lowered:
        return _connection_string(text)
    if lowered.startswith(("https://", "http://")):
        if not _ACCOUNT_URL.match(text):
            raise ConfigurationError(
                f"{redact(text)} is not an account URL like https://<account>.blob.core.windows.net"
            )
        return StorageLocation("azure", account_url=text)
    if "=" in text and ";" in text:
        raise ConfigurationError(
            f"{redact(text)!r} looks like a connection string but names no AccountName= "
            "(or UseDevelopmentStorage=true)"
        )
    return StorageLocation("embedded", directory=Path(text).expanduser().absolute())


def _connection_string(text: str) -> StorageLocation:
    settings = _settings(text)
    if settings.get("usedevelopmentstorage", "").lower() == "true":
        return StorageLocation("azure", connection_string=text)
    if not settings.get("accountname"):
        raise ConfigurationError(f"connection string {redact(text)!r} has an empty AccountName")
    return StorageLocation("azure", connection_string=text)
