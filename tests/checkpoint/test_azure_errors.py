"""Azure backend: SDK failures become :mod:`jobs.errors`, retried in one layer only.

Real faults come from a tiny HTTP server on 127.0.0.1 that answers every request with
one Azure error (XML for queues and blobs, OData JSON for tables), and from a closed
loopback port. Nothing leaves the machine; every server stops with its test. The
translation table itself is checked with constructed SDK exceptions.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.data.tables import TableTransactionError

from checkpoint.backends.azure import open_azure
from checkpoint.backends.azure.errors import scrub, translate, translated
from checkpoint.errors import (
    AlreadyExists,
    BatchFailed,
    ConfigurationError,
    Conflict,
    InvalidRequest,
    LeaseLost,
    NotFound,
    StorageError,
    Throttled,
    TooLarge,
    Unavailable,
)
from checkpoint.location import parse_location
from checkpoint.storage import Storage
from tests.azurite import free_port

#: A well-formed (base64) account key that must never be echoed anywhere.
SECRET_KEY = base64.b64encode(b"never-print-this-account-key-0123456789").decode()
SECRET_SIG = "NeverPrintThisSignature0123456789abcdef"


# --------------------------------------------------------------------------- fake Azure


class QuietHTTPServer(http.server.ThreadingHTTPServer):
    """Clients that give up mid-answer are expected here: no traceback on stderr."""

    def handle_error(self, request: object, client_address: object) -> None:
        pass


@dataclass
class FaultServer:
    """An HTTP server on loopback answering every request with one Azure error."""

    status: int
    code: str
    requests: list[str] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.server_address[1]

    def connection_string(self, secret: str = f"AccountKey={SECRET_KEY}") -> str:
        base = f"http://127.0.0.1:{self.port}"
        return (
            f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;{secret};"
            f"BlobEndpoint={base}/devstoreaccount1;QueueEndpoint={base}/devstoreaccount1;"
            f"TableEndpoint={base}/devstoreaccount1;"
        )


def _handler(fault: FaultServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            fault.requests.append(f"{self.command} {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            body = _error_body(fault.code, json_wanted="json" in self.headers.get("Accept", ""))
            self.send_response(fault.status)
            self.send_header("x-ms-error-code", fault.code)
            self.send_header("Content-Type", body[1])
            self.send_header("Content-Length", str(len(body[0])))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body[0])

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_MERGE = do_PATCH = _answer

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def _error_body(code: str, *, json_wanted: bool) -> tuple[bytes, str]:
    """Azure's error payload: OData JSON for tables, XML for queues and blobs."""
    message = f"Simulated {code}.\nRequestId:00000000-0000-0000-0000-000000000000"
    if json_wanted:
        payload = {"odata.error": {"code": code, "message": {"lang": "en-US", "value": message}}}
        return json.dumps(payload).encode(), "application/json;odata=minimalmetadata"
    xml = (
        '<?xml version="1.0" encoding="utf-8"?>'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    )
    return xml.encode(), "application/xml"


@pytest.fixture
def fault() -> Iterator[Callable[[int, str], FaultServer]]:
    """Start fault servers on demand; all are shut down after the test."""
    started: list[FaultServer] = []

    def start(status: int, code: str) -> FaultServer:
        server = FaultServer(status, code)
        server.server = QuietHTTPServer(("127.0.0.1", 0), _handler(server))
        server.server.daemon_threads = True
        threading.Thread(target=server.server.serve_forever, args=(0.05,), daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        assert server.server is not None
        server.server.shutdown()
        server.server.server_close()


def _open(connection_string: str, retry_total: int) -> Storage:
    return open_azure(parse_location(connection_string), retry_total=retry_total)


#: One operation per service, each a different HTTP verb.
OPERATIONS: dict[str, Callable[[Storage], object]] = {
    "queue send": lambda s: s.queues.send("jobs", b"x"),
    "queue receive": lambda s: s.queues.receive("jobs"),
    "queue update": lambda s: s.queues.update("jobs", "id", "receipt", visibility_seconds=1),
    "record get": lambda s: s.records.get("records", "p", "r"),
    "record insert": lambda s: s.records.insert("records", "p", "r", {"n": 1}),
    "record query": lambda s: list(s.records.query("records", "p")),
    "blob put": lambda s: s.blobs.put("blobs", "a/b", b"data"),
    "blob get": lambda s: s.blobs.get("blobs", "a/b"),
    "blob info": lambda s: s.blobs.info("blobs", "a/b"),
}


# --------------------------------------------------------------------------- real faults


@pytest.mark.parametrize("operation", OPERATIONS)
def test_server_busy_is_throttled_with_status_and_code(fault, operation):
    server = fault(503, "ServerBusy")

    with _open(server.connection_string(), retry_total=0) as storage:
        with pytest.raises(Throttled) as raised:
            OPERATIONS[operation](storage)

    assert (raised.value.status, raised.value.code) == (503, "ServerBusy")
    assert isinstance(raised.value.__cause__, HttpResponseError)
    assert len(server.requests) == 1, server.requests


@pytest.mark.parametrize("operation", ["queue send", "record insert", "blob put"])
def test_internal_error_is_throttled(fault, operation):
    server = fault(500, "InternalError")

    with _open(server.connection_string(), retry_total=0) as storage:
        with pytest.raises(Throttled) as raised:
            OPERATIONS[operation](storage)

    assert (raised.value.status, raised.value.code) == (500, "InternalError")


@pytest.mark.parametrize("operation", ["queue receive", "record get", "blob get"])
def test_retries_happen_once_per_request_in_one_layer(fault, operation):
    # Given a service that is always busy and a budget of 2 retries
    server = fault(503, "ServerBusy")

    # When one operation runs
    with _open(server.connection_string(), retry_total=2) as storage:
        with pytest.raises(Throttled):
            OPERATIONS[operation](storage)

    # Then exactly 1 + 2 requests reached the server: nothing retried on top of the SDK
    assert len(server.requests) == 3, server.requests
    assert len(set(server.requests)) == 1


def test_client_errors_are_not_retried(fault):
    server = fault(404, "QueueNotFound")

    with _open(server.connection_string(), retry_total=3) as storage:
        with pytest.raises(NotFound) as raised:
            storage.queues.send("jobs", b"x")

    assert (raised.value.status, raised.value.code) == (404, "QueueNotFound")
    assert len(server.requests) == 1


CREATES: dict[str, Callable[[Storage], object]] = {
    "Queue": lambda s: s.queues.create_queue("jobs"),
    "Table": lambda s: s.records.create_table("records"),
    "Container": lambda s: s.blobs.create_container("blobs"),
}


@pytest.mark.parametrize("kind", CREATES)
def test_create_of_an_existing_resource_is_quiet(fault, kind):
    server = fault(409, f"{kind}AlreadyExists")

    with _open(server.connection_string(), retry_total=0) as storage:
        CREATES[kind](storage)


@pytest.mark.parametrize("kind", CREATES)
def test_create_while_the_old_one_is_being_deleted_is_throttled(fault, kind):
    # Azure refuses a name for a while after deleting it: that is "not yet", not "exists"
    server = fault(409, f"{kind}BeingDeleted")

    with _open(server.connection_string(), retry_total=0) as storage:
        with pytest.raises(Throttled) as raised:
            CREATES[kind](storage)

    assert (raised.value.status, raised.value.code) == (409, f"{kind}BeingDeleted")


@pytest.mark.parametrize("operation", ["queue send", "record get", "blob get"])
def test_closed_port_is_unavailable_quickly(operation):
    port = free_port()  # bound and released: nothing listens there now
    base = f"http://127.0.0.1:{port}/devstoreaccount1"
    connection_string = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={SECRET_KEY};"
        f"BlobEndpoint={base};QueueEndpoint={base};TableEndpoint={base};"
    )
    started = time.monotonic()

    with _open(connection_string, retry_total=0) as storage:
        with pytest.raises(Unavailable) as raised:
            OPERATIONS[operation](storage)

    assert time.monotonic() - started < 5
    assert raised.value.code == "ServiceRequestError"
    assert isinstance(raised.value.__cause__, ServiceRequestError)


# --------------------------------------------------------------------------- secrets


def _everything_shown(storage: Storage, error: BaseException) -> str:
    """Every text a user or a log could see: description, reprs, full traceback."""
    shown = traceback.format_exception(type(error), error, error.__traceback__)
    return "\n".join([storage.description, repr(storage), str(error), repr(error), *shown])


@pytest.mark.parametrize("operation", ["queue send", "record insert", "blob put"])
def test_account_key_never_shown(fault, operation):
    server = fault(503, "ServerBusy")

    with _open(server.connection_string(), retry_total=0) as storage:
        with pytest.raises(StorageError) as raised:
            OPERATIONS[operation](storage)
        shown = _everything_shown(storage, raised.value)

    assert SECRET_KEY not in shown
    assert "AccountKey=***" in storage.description


@pytest.mark.parametrize("operation", ["queue send", "record get", "blob get"])
def test_sas_signature_never_shown_even_in_connection_errors(operation):
    # A SAS credential puts sig= into every request URL, which network errors may quote
    port = free_port()
    base = f"http://127.0.0.1:{port}/devstoreaccount1"
    sas = f"sv=2022-11-02&ss=bqt&srt=sco&sp=rwdlacup&se=2099-01-01T00:00:00Z&sig={SECRET_SIG}"
    connection_string = (
        f"AccountName=devstoreaccount1;SharedAccessSignature={sas};"
        f"BlobEndpoint={base};QueueEndpoint={base};TableEndpoint={base};"
    )

    with _open(connection_string, retry_total=0) as storage:
        with pytest.raises(Unavailable) as raised:
            OPERATIONS[operation](storage)
        shown = _everything_shown(storage, raised.value)

    assert SECRET_SIG not in shown
    assert "127.0.0.1" in shown  # the URL is still there to debug with, minus its secret


def test_scrub_redacts_the_whole_cause_chain():
    inner = ConnectionError(f"GET /q?sv=1&sig={SECRET_SIG} failed")
    try:
        try:
            raise inner
        except ConnectionError as err:
            raise ServiceRequestError(err, error=err) from err
    except ServiceRequestError as outer:
        scrub(outer)
        shown = "".join(traceback.format_exception(outer))

    assert SECRET_SIG not in shown
    assert "sig=***" in shown


# --------------------------------------------------------------------------- the table


class FakeResponse:
    """Just enough of an azure-core HTTP response to build SDK exceptions from."""

    def __init__(self, status: int, code: str | None, body: str = "") -> None:
        self.status_code = status
        self.reason = "Reason"
        self.headers = {"x-ms-error-code": code} if code else {}
        self._body = body

    def text(self, encoding: str | None = None) -> str:
        return self._body


def _http_error(status: int, code: str | None, kind: type = HttpResponseError, **kw):
    return kind(message=f"{code} happened", response=FakeResponse(status, code), **kw)


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "PopReceiptMismatch", LeaseLost),
        (404, "MessageNotFound", LeaseLost),
        (412, "ConditionNotMet", Conflict),
        (412, "UpdateConditionNotSatisfied", Conflict),
        (404, "QueueNotFound", NotFound),
        (404, "TableNotFound", NotFound),
        (404, "ResourceNotFound", NotFound),
        (404, "BlobNotFound", NotFound),
        (404, "ContainerNotFound", NotFound),
        (409, "EntityAlreadyExists", AlreadyExists),
        (409, "BlobAlreadyExists", AlreadyExists),
        (409, "TableAlreadyExists", AlreadyExists),
        (409, "ContainerBeingDeleted", Throttled),
        (413, "RequestBodyTooLarge", TooLarge),
        (400, "EntityTooLarge", TooLarge),
        (400, "PropertyValueTooLarge", TooLarge),
        (503, "ServerBusy", Throttled),
        (500, "InternalError", Throttled),
        (500, "OperationTimedOut", Throttled),
        (429, None, Throttled),
        (502, None, Unavailable),
        (400, "InvalidInput", InvalidRequest),
        (400, "OutOfRangeInput", InvalidRequest),
        (403, "AuthenticationFailed", InvalidRequest),
        (416, "InvalidRange", InvalidRequest),
    ],
)
def test_translation_of_each_status_and_code(status, code, expected):
    translated_error = translate(_http_error(status, code), "do something")

    assert type(translated_error) is expected
    assert (translated_error.status, translated_error.code) == (status, code)
    assert str(translated_error).startswith("do something: ")


def test_code_is_found_when_the_sdk_leaves_error_code_unset():
    # azure-data-tables 12.7.0 on a duplicate insert: ResourceExistsError, no error_code
    err = _http_error(409, "EntityAlreadyExists", ResourceExistsError)
    assert getattr(err, "error_code", None) is None

    translated_error = translate(err, "insert")

    assert isinstance(translated_error, AlreadyExists)
    assert translated_error.code == "EntityAlreadyExists"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('<?xml version="1.0"?><Error><Code>BlobNotFound</Code></Error>', "BlobNotFound"),
        ('{"odata.error": {"code": "TableNotFound", "message": {"value": "x"}}}', "TableNotFound"),
    ],
)
def test_code_is_read_from_the_body_without_a_header(body, code):
    err = ResourceNotFoundError(message="gone", response=FakeResponse(404, None, body))

    assert translate(err, "read").code == code


def test_enum_error_codes_become_plain_strings():
    err = _http_error(412, "UpdateConditionNotSatisfied", ResourceModifiedError)
    err.error_code = "UpdateConditionNotSatisfied"

    assert translate(err, "replace").code == "UpdateConditionNotSatisfied"


def test_transaction_error_names_the_failing_operation():
    err = _http_error(412, "UpdateConditionNotSatisfied", TableTransactionError, index=3)
    err.error_code = "UpdateConditionNotSatisfied"

    failed = translate(err, "batch")

    assert isinstance(failed, BatchFailed)
    assert failed.index == 3
    assert isinstance(failed.reason, Conflict)
    assert (failed.status, failed.code) == (412, "UpdateConditionNotSatisfied")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ServiceRequestError("connection refused"), Unavailable),
        (ServiceResponseError("connection reset"), Unavailable),
        (ClientAuthenticationError("no credential found"), ConfigurationError),
    ],
)
def test_errors_without_a_response(error, expected):
    assert type(translate(error, "talk")) is expected


def test_translated_raises_from_the_sdk_error():
    original = _http_error(404, "BlobNotFound", ResourceNotFoundError)

    with pytest.raises(NotFound) as raised, translated("read blob 'x'"):
        raise original

    assert raised.value.__cause__ is original


def test_translated_leaves_other_errors_alone():
    with pytest.raises(KeyError), translated("anything"):
        raise KeyError("not an SDK error")


@pytest.mark.parametrize(("status", "expected"), [(413, TooLarge), (503, Throttled)])
def test_transaction_refused_as_a_whole_is_not_an_operations_failure(status, expected):
    err = _http_error(status, "Whatever", TableTransactionError)

    assert type(translate(err, "batch")) is expected


def test_another_sdk_error_without_a_response_is_unavailable_saying_what_failed():
    error = translate(AzureError("the pipeline broke"), "send")

    assert type(error) is Unavailable
    assert str(error).startswith("send: failed talking to Azure Storage (AzureError: ")


class UnreadableResponse(FakeResponse):
    """A response whose body was streamed away already."""

    def text(self, encoding: str | None = None) -> str:
        raise RuntimeError("the body was consumed")


def test_a_body_that_cannot_be_read_just_has_no_code():
    err = HttpResponseError(message="gone", response=UnreadableResponse(404, None))

    translated_error = translate(err, "read")

    assert isinstance(translated_error, NotFound) and translated_error.code is None


def test_scrub_follows_an_exception_given_as_an_argument():
    secret = "AccountKey=c2VjcmV0c2VjcmV0c2VjcmV0"
    inner = ValueError(f"connection string {secret}")
    outer = RuntimeError("wrapped", inner)

    scrub(outer)

    assert secret not in repr(outer.args) and secret not in str(inner)
