"""Azure backend: connection strings and account URLs to endpoints, credentials, clients.

No network: building clients contacts nothing, so these run without Azurite.
"""

from __future__ import annotations

import sys

import pytest
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential

from checkpoint.backends.azure import open_azure
from checkpoint.backends.azure.clients import (
    DEV_ACCOUNT,
    DEV_ACCOUNT_KEY,
    build_clients,
    endpoints_for,
    parse_account_url,
    parse_connection_string,
)
from checkpoint.backends.azure.retry import backoff_seconds, storage_retry_policy
from checkpoint.errors import ConfigurationError
from checkpoint.location import StorageLocation, parse_location
from tests.azurite import ACCOUNT_KEY

SIG = "AccountUrlSignatureNeverShown0123"


def test_use_development_storage_maps_to_azurites_default_ports():
    endpoints = parse_connection_string("UseDevelopmentStorage=true")

    assert endpoints.urls == {
        "blob": "http://127.0.0.1:10000/devstoreaccount1",
        "queue": "http://127.0.0.1:10001/devstoreaccount1",
        "table": "http://127.0.0.1:10002/devstoreaccount1",
    }
    assert isinstance(endpoints.credential, AzureNamedKeyCredential)
    assert endpoints.credential.named_key == (DEV_ACCOUNT, DEV_ACCOUNT_KEY)


def test_development_storage_is_recognised_in_any_case_and_with_a_proxy():
    endpoints = parse_connection_string(
        "usedevelopmentstorage=TRUE;DevelopmentStorageProxyUri=http://azurite.local"
    )

    assert endpoints.urls["queue"] == "http://azurite.local:10001/devstoreaccount1"


def test_development_key_matches_the_test_harness():
    assert DEV_ACCOUNT_KEY == ACCOUNT_KEY


def test_explicit_azurite_string_uses_its_endpoints():
    text = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};"
        "BlobEndpoint=http://127.0.0.1:41000/devstoreaccount1;"
        "QueueEndpoint=http://127.0.0.1:41001/devstoreaccount1/;"
        "TableEndpoint=http://127.0.0.1:41002/devstoreaccount1;"
    )

    endpoints = parse_connection_string(text)

    assert endpoints.urls == {
        "blob": "http://127.0.0.1:41000/devstoreaccount1",
        "queue": "http://127.0.0.1:41001/devstoreaccount1",
        "table": "http://127.0.0.1:41002/devstoreaccount1",
    }
    assert endpoints.credential.named_key.name == "devstoreaccount1"


def test_account_and_key_build_the_public_endpoints():
    endpoints = parse_connection_string(
        f"AccountName=acct;AccountKey={ACCOUNT_KEY};EndpointSuffix=core.chinacloudapi.cn"
    )

    assert endpoints.urls["table"] == "https://acct.table.core.chinacloudapi.cn"
    assert endpoints.urls["blob"] == "https://acct.blob.core.chinacloudapi.cn"


def test_protocol_and_default_suffix():
    endpoints = parse_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey={ACCOUNT_KEY}"
    )

    assert endpoints.urls["queue"] == "http://acct.queue.core.windows.net"


def test_shared_access_signature_becomes_a_sas_credential():
    endpoints = parse_connection_string(f"AccountName=acct;SharedAccessSignature=?sv=1&sig={SIG}")

    assert isinstance(endpoints.credential, AzureSasCredential)
    assert endpoints.credential.signature == f"sv=1&sig={SIG}"
    assert SIG not in repr(endpoints)


def test_a_sas_in_the_endpoint_urls_signs_with_it():
    endpoints = parse_connection_string(
        "AccountName=acct;"
        + "".join(f"{s}Endpoint=https://h:1/acct/?sv=1&sig={SIG};" for s in ("Blob", "Queue"))
        + f"TableEndpoint=https://h:1/acct?sv=1&sig={SIG}"
    )

    assert isinstance(endpoints.credential, AzureSasCredential)
    assert endpoints.credential.signature == f"sv=1&sig={SIG}"
    assert endpoints.urls["queue"] == "https://h:1/acct"
    assert SIG not in repr(endpoints)


def test_endpoints_with_different_sas_tokens_are_refused():
    with pytest.raises(ConfigurationError, match="SAS") as caught:
        parse_connection_string(
            f"AccountName=acct;BlobEndpoint=https://h:1/a?sig={SIG};QueueEndpoint=https://h:1/a"
        )
    assert SIG not in str(caught.value)


def test_account_name_alone_means_default_azure_credential():
    endpoints = parse_connection_string("AccountName=acct;EndpointSuffix=core.windows.net")

    assert endpoints.credential is None
    assert endpoints.urls["queue"] == "https://acct.queue.core.windows.net"
    assert "DefaultAzureCredential" in repr(endpoints)


@pytest.mark.parametrize("service", ["blob", "queue", "table", "dfs"])
def test_any_service_url_of_an_account_names_all_three(service):
    endpoints = parse_account_url(f"https://acct.{service}.core.windows.net/")

    assert endpoints.urls == {
        "blob": "https://acct.blob.core.windows.net",
        "queue": "https://acct.queue.core.windows.net",
        "table": "https://acct.table.core.windows.net",
    }
    assert endpoints.credential is None


def test_account_url_with_a_sas_signs_with_it():
    endpoints = parse_account_url(f"https://acct.blob.core.windows.net/?sv=1&sig={SIG}")

    assert isinstance(endpoints.credential, AzureSasCredential)
    assert SIG not in repr(endpoints)


def test_endpoints_of_a_parsed_location():
    location = parse_location("https://acct.queue.core.windows.net")

    assert endpoints_for(location).account == "acct"


def test_embedded_location_is_not_azure(tmp_path):
    with pytest.raises(ConfigurationError):
        endpoints_for(StorageLocation("embedded", directory=tmp_path))


def test_url_that_is_no_account_url_is_refused():
    with pytest.raises(ConfigurationError):
        parse_account_url("https://example.com/")


def test_missing_azure_identity_says_how_to_install_it(monkeypatch):
    # A None entry in sys.modules makes `import azure.identity` raise ImportError
    monkeypatch.setitem(sys.modules, "azure.identity", None)

    with pytest.raises(ConfigurationError, match=r"the 'identity' extra: `make venv` installs it"):
        open_azure(parse_location("https://acct.blob.core.windows.net"))


def test_account_url_opens_with_default_azure_credential_without_contacting_anything():
    pytest.importorskip("azure.identity")
    location = parse_location("https://acct.blob.core.windows.net")

    with open_azure(location) as storage:
        assert storage.description == location.description
        assert "DefaultAzureCredential" in repr(storage)


def test_token_credential_over_plain_http_is_a_configuration_error():
    pytest.importorskip("azure.identity")
    location = parse_location("DefaultEndpointsProtocol=http;AccountName=acct")

    with pytest.raises(ConfigurationError, match="unusable"):
        open_azure(location)


def test_description_is_the_locations_and_hides_the_key():
    location = parse_location(f"UseDevelopmentStorage=true;AccountKey={ACCOUNT_KEY}")

    with open_azure(location, retry_total=0) as storage:
        assert storage.description == location.description
        assert ACCOUNT_KEY not in repr(storage)


def test_close_closes_every_client_once():
    clients = build_clients(parse_connection_string("UseDevelopmentStorage=true"), retry_total=0)
    closed: list[str] = []
    clients.closers = [lambda: closed.append("a"), lambda: closed.append("b")]

    clients.close()
    clients.close()

    assert closed == ["a", "b"]


@pytest.mark.parametrize("retry_total", [-1, 1.5, True, "3"])
def test_retry_total_must_be_a_whole_number(retry_total):
    with pytest.raises(ConfigurationError):
        open_azure(parse_location("UseDevelopmentStorage=true"), retry_total=retry_total)


def test_backoff_doubles_from_half_a_second_and_is_bounded():
    assert [backoff_seconds(n) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]


def test_storage_retry_policy_counts_and_waits():
    policy = storage_retry_policy("queue", 2)

    assert (policy.total_retries, policy.connect_retries, policy.status_retries) == (2, 2, 2)
    waits = [policy.get_backoff_time({"count": n}) for n in (1, 2, 3)]
    assert 0.4 <= waits[0] <= 0.6 and 0.8 <= waits[1] <= 1.2 and 1.6 <= waits[2] <= 2.4


def test_an_azure_location_with_neither_string_nor_url_is_refused():
    with pytest.raises(ConfigurationError, match="needs a connection string or an account URL"):
        endpoints_for(StorageLocation("azure"))


def test_a_connection_string_naming_no_account_is_refused_without_its_key():
    text = "DefaultEndpointsProtocol=https;AccountKey=c2VjcmV0c2VjcmV0"

    with pytest.raises(ConfigurationError, match="names no AccountName") as caught:
        parse_connection_string(text)

    assert "c2VjcmV0c2VjcmV0" not in str(caught.value)
