"""Backend selection: one string picks the backend, and secrets never show."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.errors import ConfigurationError
from checkpoint.location import DEFAULT_DIRECTORY, ENV_VAR, parse_location, redact

KEY = "c2VjcmV0LWtleS1kby1ub3QtbG9n"  # a fake account key that must never be shown
EXPLICIT = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    f"AccountKey={KEY};QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;"
)


def test_default_is_runner_directory_under_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    location = parse_location(None, environ={})
    assert location.kind == "embedded"
    assert location.directory == tmp_path / DEFAULT_DIRECTORY


def test_environment_variable_is_used_when_no_option(tmp_path):
    location = parse_location(None, environ={ENV_VAR: str(tmp_path / "store")})
    assert (location.kind, location.directory) == ("embedded", tmp_path / "store")


def test_option_wins_over_environment(tmp_path):
    location = parse_location(str(tmp_path / "a"), environ={ENV_VAR: str(tmp_path / "b")})
    assert location.directory == tmp_path / "a"


def test_relative_directory_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_location("data/store", environ={}).directory == tmp_path / "data" / "store"


def test_home_is_expanded():
    assert parse_location("~/store", environ={}).directory == Path.home() / "store"


@pytest.mark.parametrize(
    "text",
    [
        "UseDevelopmentStorage=true",
        "usedevelopmentstorage=TRUE;",
        EXPLICIT,
        "AccountName=acct;AccountKey=abc;EndpointSuffix=core.windows.net",
        "BlobEndpoint=https://acct.blob.core.windows.net;AccountName=acct",
    ],
)
def test_connection_strings_select_azure(text):
    location = parse_location(text, environ={})
    assert location.kind == "azure"
    assert location.connection_string == text


def test_account_url_selects_azure_with_default_credential():
    location = parse_location("https://myacct.queue.core.windows.net/", environ={})
    assert location.kind == "azure"
    assert location.account_url == "https://myacct.queue.core.windows.net/"
    assert "DefaultAzureCredential" in location.description


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("https://example.com/not-an-account", "not an account URL"),
        ("DefaultEndpointsProtocol=https;AccountKey=abc;", "no AccountName"),
        ("AccountName=;AccountKey=abc", "empty AccountName"),
    ],
)
def test_malformed_azure_settings_are_refused_clearly(text, fragment):
    with pytest.raises(ConfigurationError, match=fragment) as caught:
        parse_location(text, environ={})
    assert "abc" not in str(caught.value)


def test_account_key_never_in_description_or_repr():
    location = parse_location(EXPLICIT, environ={})
    for shown in (location.description, repr(location), str(location)):
        assert KEY not in shown
        assert "AccountName=devstoreaccount1" in shown or "StorageLocation" in shown
    assert "AccountKey=***" in location.description


def test_sas_token_is_redacted_in_urls_and_strings():
    sas = "sv=2024-01-01&ss=q&sig=SECRETSIG%3D&se=2030-01-01"
    text = (
        f"AccountName=a;SharedAccessSignature={sas};QueueEndpoint=https://a.queue.core.windows.net"
    )
    assert "SECRETSIG" not in redact(text)
    url = f"https://acct.blob.core.windows.net/?{sas}"
    assert "SECRETSIG" not in redact(url)
    location = parse_location(url, environ={})
    assert "SECRETSIG" not in location.description
    assert "(SAS)" in location.description
