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
module: :attr:`StorageLocation.description` and ``repr`` are safe to show and log, by an
allow-list (:func:`describe_connection_string`: only the account name, protocol, suffix
and endpoint URLs without their query are shown, every other value is ``***``), and a
key Azure does not know is refused when the string is parsed, named but never its value
(a misspelled ``AccountKy=`` would otherwise be neither used nor hidden).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from checkpoint.errors import ConfigurationError

ENV_VAR = "RUNNER_STORAGE"
DEFAULT_DIRECTORY = ".runner"

_SECRET_SETTINGS = re.compile(
    r"(?i)\b(AccountKey|SharedAccessSignature|SharedAccessKey|SharedAccessKeyName)=[^;]*"
)
_SAS_QUERY = re.compile(
    r"(?i)\b(sig|se|sv|sp|spr|st|srt|ss|sr|skoid|sktid|skt|ske|sks|skv)=[^&;\s]*"
)
#: A URL in free text: its user info and its query are masked by :func:`redact`.
_URL_USER = re.compile(r"(?i)\b(https?://)[^/\s@'\"]+@")
_URL_QUERY = re.compile(r"(?i)\b(https?://[^\s?#'\"]*)[?#][^\s'\"]*")
_ACCOUNT_URL = re.compile(
    r"^(?P<scheme>https?)://(?P<account>[a-z0-9]{3,24})\.(?:blob|queue|table|dfs)\."
    r"(?P<suffix>[^/?]+)/?(?:\?(?P<sas>.*))?$",
    re.IGNORECASE,
)

#: Every key of an Azure Storage connection string, as Azure documents and spells them;
#: a key matches in any case, as in the SDKs. Any other key is refused.
CONNECTION_STRING_KEYS = (
    "DefaultEndpointsProtocol",
    "AccountName",
    "AccountKey",
    "SharedAccessSignature",
    "EndpointSuffix",
    "BlobEndpoint",
    "QueueEndpoint",
    "TableEndpoint",
    "FileEndpoint",
    "BlobSecondaryEndpoint",
    "QueueSecondaryEndpoint",
    "TableSecondaryEndpoint",
    "FileSecondaryEndpoint",
    "UseDevelopmentStorage",
    "DevelopmentStorageProxyUri",
)
_SPELLING = {key.lower(): key for key in CONNECTION_STRING_KEYS}
#: What a shown value must look like, by key; a value of any other key is never shown.
_SHAPES = {
    "accountname": (re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}"), "an account name"),
    "defaultendpointsprotocol": (re.compile(r"(?i)https?"), "http or https"),
    "endpointsuffix": (re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?"), "a host name"),
    "usedevelopmentstorage": (re.compile(r"(?i)true|false"), "true or false"),
}
_URL_KEYS = frozenset(k for k in _SPELLING if k.endswith("endpoint") or k.endswith("uri"))
#: A host name or address that may be shown (a container's name may hold ``_``).
_HOST = re.compile(r"[A-Za-z0-9._:\[\]-]+")
#: A key that is shown when refused: a name, not a fragment of a secret.
_NAME_LIKE = re.compile(r"[A-Za-z][A-Za-z ]{0,39}")
#: Text that is a setting (``Key=value``), not a folder, even without a ``;``.
_SETTING = re.compile(r"[A-Za-z][A-Za-z ]*=")


def redact(text: str) -> str:
    """Free text (an error, a URL) with account keys, SAS tokens, URL queries and user
    info replaced by ``***``. A storage location is shown by
    :attr:`StorageLocation.description` instead, which shows only what is known safe."""
    text = _SECRET_SETTINGS.sub(lambda m: f"{m.group(1)}=***", text)
    text = _URL_USER.sub(lambda m: f"{m.group(1)}***@", text)
    text = _URL_QUERY.sub(lambda m: f"{m.group(1)}?***", text)
    return _SAS_QUERY.sub(lambda m: f"{m.group(1)}=***", text)


def shown_url(url: str) -> str:
    """``url`` as it may be shown: scheme, host, port and path; its user info and its
    query (a SAS token) are ``***``, its fragment dropped."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "***"
    if not parts.scheme or not host or not _HOST.fullmatch(host):
        return "***"
    user = "***@" if "@" in parts.netloc else ""
    query = "?***" if "?" in url else ""
    return f"{parts.scheme}://{user}{host}{port}{parts.path}{query}"


def connection_settings(text: str) -> dict[str, str]:
    """The settings of a connection string, by lower-case key, in the order given.

    Keys match Azure's in any case; values keep any ``=`` they hold (base64 padding);
    blanks around both and empty parts (a trailing ``;``) are ignored.

    Raises:
        ConfigurationError: a key Azure does not know (named, if it looks like a name),
            a part that is not ``Key=value``, a key given twice, an empty value, or a
            value that is not of its key's kind. The message never holds a value.
    """
    settings: dict[str, str] = {}
    parts = [part for part in text.split(";") if part.strip()]
    for number, part in enumerate(parts, 1):
        key, equals, value = (piece.strip() for piece in part.partition("="))
        lowered = key.lower()
        if not equals or not key:
            raise ConfigurationError(
                f"part {number} of the connection string is not Key=value "
                "(its text is not shown: it may be a secret)"
            )
        if lowered not in _SPELLING:
            raise ConfigurationError(_unknown_key(key))
        name = _SPELLING[lowered]
        if lowered in settings:
            raise ConfigurationError(f"{name} appears twice in the connection string")
        if not value:
            raise ConfigurationError(f"the connection string has an empty {name}")
        _check_value(lowered, value)
        settings[lowered] = value
    return settings


#: The known keys as one line names them (the endpoints grouped).
_KNOWN = (
    "DefaultEndpointsProtocol, AccountName, AccountKey, SharedAccessSignature, "
    "EndpointSuffix, {Blob,Queue,Table,File}[Secondary]Endpoint, UseDevelopmentStorage, "
    "DevelopmentStorageProxyUri"
)


def _unknown_key(key: str) -> str:
    known = _KNOWN
    if not _NAME_LIKE.fullmatch(key):
        return (
            "a key of the connection string is not one Azure knows, and not shown: it does "
            f"not look like a name, so it may be a secret (known: {known})"
        )
    close = difflib.get_close_matches(key.lower(), list(_SPELLING), n=1, cutoff=0.75)
    hint = f"did you mean {_SPELLING[close[0]]}? " if close else ""
    return f"unknown key {key!r} in the connection string ({hint}known: {known})"


def _check_value(key: str, value: str) -> None:
    name = _SPELLING[key]
    if key in _SHAPES:
        shape, kind = _SHAPES[key]
        if not shape.fullmatch(value):
            raise ConfigurationError(f"the connection string's {name} is not {kind}")
    elif key in _URL_KEYS and (
        shown_url(value) == "***" or not value.lower().startswith(("http://", "https://"))
    ):
        raise ConfigurationError(
            f"the connection string's {name} is not an http(s) URL like "
            "https://<account>.blob.core.windows.net"
        )


def describe_connection_string(settings: Mapping[str, str]) -> str:
    """Settings as they may be shown (the one place they are): account name, protocol,
    suffix, development storage flag and endpoint URLs as given (URLs without user info
    or query); every other value ``***``."""
    return ";".join(
        f"{_SPELLING[key]}={_shown_value(key, value)}" for key, value in settings.items()
    )


def _shown_value(key: str, value: str) -> str:
    if key in _SHAPES and _SHAPES[key][0].fullmatch(value):
        return value
    if key in _URL_KEYS:
        return shown_url(value)
    return "***"


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
        """Backend and place, showing only what is known not to be a secret (see
        :func:`describe_connection_string`): safe for output, logs, pages and errors."""
        if self.kind == "embedded":
            return f"embedded:{self.directory}"
        if self.connection_string is not None:
            return (
                f"azure:{describe_connection_string(connection_settings(self.connection_string))}"
            )
        url = self.account_url or ""
        how = "SAS" if urlsplit(url).query else "DefaultAzureCredential"
        return f"azure:{shown_url(url)} ({how})"

    def __repr__(self) -> str:
        return f"StorageLocation({self.description})"


def parse_location(text: str | None, environ: Mapping[str, str] | None = None) -> StorageLocation:
    """Parse a ``--storage`` value; None falls back to ``$RUNNER_STORAGE``, then ``./.runner``.

    A connection string is recognised by ``AccountName=`` or ``UseDevelopmentStorage=``,
    by ``=`` and ``;`` together, or by a leading ``Key=`` (a word, then ``=``) without a
    ``/``: so a lone mistyped ``AccountKy=...`` is refused, not taken for a folder.

    Raises:
        ConfigurationError: the text looks like a connection string or URL but is not a
            usable one. The message never repeats a value of it.
    """
    if environ is None:
        environ = os.environ
    if text is None or not text.strip():
        text = environ.get(ENV_VAR, "").strip() or DEFAULT_DIRECTORY
    text = text.strip()
    lowered = text.lower()
    if lowered.startswith(("https://", "http://")) and ";" not in text:
        if not _ACCOUNT_URL.match(text):
            raise ConfigurationError(
                f"{shown_url(text)} is not an account URL like "
                "https://<account>.blob.core.windows.net"
            )
        return StorageLocation("azure", account_url=text)
    if _is_connection_string(text):
        return _connection_string(text)
    if _SETTING.match(text) is not None and "/" not in text and os.sep not in text:
        try:
            return _connection_string(text)
        except ConfigurationError as error:
            raise ConfigurationError(
                f"{error}; a folder with '=' in its name is written ./NAME"
            ) from None
    return StorageLocation("embedded", directory=Path(text).expanduser().absolute())


def _is_connection_string(text: str) -> bool:
    lowered = text.lower()
    return (
        "accountname=" in lowered
        or "usedevelopmentstorage=" in lowered
        or ("=" in text and ";" in text)
    )


def _connection_string(text: str) -> StorageLocation:
    settings = connection_settings(text)
    if "usedevelopmentstorage" in settings:
        if settings["usedevelopmentstorage"].lower() != "true":
            raise ConfigurationError(
                "the connection string's UseDevelopmentStorage is not true: leave it out "
                "for an account of your own"
            )
        return StorageLocation("azure", connection_string=text)
    if "accountname" not in settings:
        raise ConfigurationError(
            "the connection string names no AccountName (nor UseDevelopmentStorage=true)"
        )
    return StorageLocation("azure", connection_string=text)
