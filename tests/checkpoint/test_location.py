"""Backend selection: one string picks the backend, and secrets never show."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from checkpoint.errors import ConfigurationError
from checkpoint.location import (
    CONNECTION_STRING_KEYS,
    DEFAULT_DIRECTORY,
    ENV_VAR,
    parse_location,
    redact,
)
from tests.planted_secrets import ACCEPTED, PLANTED, REFUSED, SECRET

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


# --------------------------------------------------------------- connection strings
#
# Redaction is an allow-list: only AccountName, DefaultEndpointsProtocol,
# EndpointSuffix, UseDevelopmentStorage and the endpoint URLs (without their query) are
# shown. A key Azure does not know is refused, named, its value never shown.


@pytest.mark.parametrize("text, says", REFUSED)
def test_a_bad_connection_string_is_refused_naming_the_key_never_the_value(text, says):
    with pytest.raises(ConfigurationError) as caught:
        parse_location(text, environ={})

    line = str(caught.value)
    assert says in line and "\n" not in line
    assert PLANTED not in line


def test_an_unknown_key_lists_the_known_ones_and_suggests_the_nearest():
    with pytest.raises(ConfigurationError) as caught:
        parse_location(f"AccountName=a1;AccountKy={SECRET}", environ={})

    assert str(caught.value) == (
        "unknown key 'AccountKy' in the connection string (did you mean AccountKey? known: "
        "DefaultEndpointsProtocol, AccountName, AccountKey, SharedAccessSignature, "
        "EndpointSuffix, {Blob,Queue,Table,File}[Secondary]Endpoint, UseDevelopmentStorage, "
        "DevelopmentStorageProxyUri)"
    )


def test_every_known_key_is_accepted_in_any_case():
    for key in CONNECTION_STRING_KEYS:
        value = {"DefaultEndpointsProtocol": "https", "AccountName": "a1"}.get(key, "x")
        if key.endswith(("Endpoint", "Uri")):
            value = "https://h/a"
        elif key == "UseDevelopmentStorage":
            continue  # alone, and only true: above
        text = f"AccountName=a1;{key.upper()}={value}" if key != "AccountName" else "ACCOUNTNAME=a1"
        assert parse_location(text, environ={}).kind == "azure", key


@pytest.mark.parametrize("text", ACCEPTED)
def test_an_accepted_connection_string_shows_only_what_is_allowed(text):
    location = parse_location(text, environ={})

    for shown in (location.description, repr(location)):
        assert PLANTED not in shown
    assert location.kind == "azure"


def test_what_is_shown_of_a_connection_string():
    location = parse_location(
        f"defaultendpointsprotocol=https;AccountName=myacct;AccountKey={SECRET};"
        f"BlobEndpoint=https://u:p@myacct.blob.example.net:444/x/?sv=1&sig={SECRET};"
        "EndpointSuffix=core.windows.net;;",
        environ={},
    )

    assert location.description == (
        "azure:DefaultEndpointsProtocol=https;AccountName=myacct;AccountKey=***;"
        "BlobEndpoint=https://***@myacct.blob.example.net:444/x/?***;"
        "EndpointSuffix=core.windows.net"
    )


def test_an_account_url_is_shown_without_its_query():
    location = parse_location(f"https://acct.blob.core.windows.net/?sv=1&zz={SECRET}", {})

    assert location.description == "azure:https://acct.blob.core.windows.net/?*** (SAS)"


def test_a_bare_setting_is_a_connection_string_not_a_directory(tmp_path):
    # "AccountKy=..." alone (no ';') must not become an embedded store named after it
    with pytest.raises(ConfigurationError, match="'AccountKy'.*written ./NAME"):
        parse_location(f"AccountKy={SECRET}", environ={})
    assert parse_location(str(tmp_path / "a=b"), environ={}).kind == "embedded"
    assert parse_location("./a=b", environ={}).kind == "embedded"


def test_a_secret_in_the_environment_variable_is_refused_the_same_way():
    with pytest.raises(ConfigurationError) as caught:
        parse_location(None, environ={ENV_VAR: f"AccountName=a1;AccountKy={SECRET}"})

    assert PLANTED not in str(caught.value)


def test_free_text_loses_url_queries_and_user_info():
    text = f"GET https://u:{PLANTED}@h/q?x={PLANTED} failed; AccountKey={PLANTED}"

    assert PLANTED not in redact(text)


@pytest.mark.parametrize(
    "text, says",
    [
        ("UseDevelopmentStorage=false", "UseDevelopmentStorage is not true: leave it out"),
        ("AccountName=a1;BlobEndpoint=http://[::1", "BlobEndpoint is not an http(s) URL"),
        ("AccountName=a1;QueueEndpoint=ftp:///x", "QueueEndpoint is not an http(s) URL"),
        ("AccountName=a1;TableEndpoint=ftp://h/x", "TableEndpoint is not an http(s) URL"),
    ],
)
def test_a_known_key_with_an_unusable_value_is_refused(text, says):
    with pytest.raises(ConfigurationError, match=re.escape(says)):
        parse_location(text, environ={})


def test_an_endpoint_on_a_container_name_with_an_underscore_is_accepted():
    text = "AccountName=devstoreaccount1;BlobEndpoint=http://azurite_1:10000/devstoreaccount1"

    assert "http://azurite_1:10000/devstoreaccount1" in parse_location(text, {}).description
