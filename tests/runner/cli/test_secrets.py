"""A secret in ``--storage`` is shown by no command, log line or page (issue 30 item 1).

Every command is fed connection strings with a planted secret: the spellings the parser
refuses (each command then fails with one line, exit 2, the key named and no value) and
the spellings it accepts, on Azurite, where the secret is the real credential: the
account key, an account SAS, a SAS in each endpoint's URL. One spelling of each credential
runs the whole life of a job (submit, ``start --burst`` with JSON logs and metrics, status
in each form, ``--watch``, report, poison list, limit, the dashboard's pages); the other
spellings of the key reach the same endpoints with the same credential, and are shown
by no command that parses them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.storage.blob import ResourceTypes, generate_account_sas
from click.testing import CliRunner
from starlette.testclient import TestClient

from checkpoint.backends.azure.clients import parse_connection_string
from checkpoint.store import CheckpointStore
from runner.cli.commands import cli
from runner.cli.dashboard import serve
from runner.cli.dashboard.app import build_app
from runner.worker.loop import WorkerSettings
from runner.worker.supervisor import StartOptions
from tests.azurite import ACCOUNT, ACCOUNT_KEY, Azurite, free_port
from tests.e2e.processes import ROOT
from tests.planted_secrets import PLANTED, REFUSED
from tests.runner.cli.invoke import ENTRY, run_runner


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``):
    the views list every active job of the store, each read in full."""
    return own_azurite


#: Every command, with the arguments it needs (the location is added to each).
COMMANDS = [
    ["check"],
    ["submit", "secret_jobs:Echo"],
    ["start", "secret_jobs:Echo", "--burst"],
    ["start", "secret_jobs:Echo", "--burst", "--log-format", "json"],
    ["status"],
    ["status", "--json"],
    ["status", "--watch"],
    ["status", "some-job"],
    ["report", "some-job"],
    ["poison", "list", "some-job"],
    ["poison", "redrive", "some-job"],
    ["limit"],
    ["limit", "secret-echo", "--running", "2"],
    ["cancel", "some-job"],
    ["pause", "some-job"],
    ["resume", "some-job"],
    ["delete", "some-job"],
    ["purge", "--older-than", "1d"],
    ["dashboard"],
]

JOBS_MODULE = textwrap.dedent(
    '''
    import urllib.request
    from pathlib import Path

    from jobs import ChunkedJob


    class Echo(ChunkedJob):
        """Chunk 0 scrapes the worker's metrics into a file; chunk 1 fails for good."""

        queue = "secret-echo"
        max_attempts = 1

        def split(self, params):
            return [0, 1] if params else [0]

        def process(self, chunk):
            if chunk.payload == 1:
                raise ValueError("the planted chunk fails")
            port, scraped = chunk.params["port"], chunk.params["scraped"]
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as answer:
                Path(scraped).write_text(answer.read().decode())
    '''
)


def _shown(result: object) -> str:
    output = getattr(result, "output", "") or ""
    exception = getattr(result, "exception", None)
    return f"{output}\n{exception!r}\n{exception}"


# ----------------------------------------------------------------- refused spellings


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_refuses_every_bad_spelling_in_one_line_without_the_secret(command):
    for text, says in REFUSED:
        for args, env in [
            ([*command, "--storage", text], {}),
            (["--storage", text, *command], {}),
            (command, {"RUNNER_STORAGE": text}),
        ]:
            result = CliRunner().invoke(cli, args, env=env)

            assert result.exit_code == 2, (args, result.output)
            lines = result.output.splitlines()
            assert len(lines) == 1 and lines[0].startswith("runner: error: "), result.output
            assert says in lines[0]
            assert PLANTED not in _shown(result)


@pytest.mark.parametrize("command", [["check"], ["start", "x:Y", "--log-format", "json"]])
def test_the_console_command_refuses_a_misspelled_key_in_one_line(tmp_path, command):
    text = f"DefaultEndpointsProtocol=https;AccountName=myacct;AccountKy={PLANTED}=="

    result = run_runner(tmp_path, *command, "--storage", text)

    assert result.returncode == 2
    assert result.stderr.startswith("runner: error: unknown key 'AccountKy' in the connection")
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
    assert PLANTED not in result.stderr


# ---------------------------------------------------------------- accepted spellings


def _account_sas() -> str:
    return generate_account_sas(
        ACCOUNT,
        ACCOUNT_KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission="rwdlacup",
        expiry=datetime.now(UTC) + timedelta(hours=2),
        services="bqt",
    )


def _accepted(azurite: Azurite) -> list[tuple[str, str, str]]:
    """(id, connection string, its secret) for this Azurite, each usable."""
    base = "http://127.0.0.1"
    ports = {"Blob": azurite.blob_port, "Queue": azurite.queue_port, "Table": azurite.table_port}
    sas = _account_sas()
    signature = dict(part.split("=", 1) for part in sas.split("&"))["sig"]
    key = ACCOUNT_KEY  # ends in '==': a value with '=' must parse

    def endpoints(query: str = "", key: str = "{}Endpoint") -> str:
        return "".join(
            f"{key.format(s)}={base}:{port}/{ACCOUNT}{query};" for s, port in ports.items()
        )

    lower = endpoints(key="{}endpoint").replace("Blob", "blob").replace("Queue", "queue")
    upper = endpoints(key="{}ENDPOINT").replace("Blob", "BLOB").replace("Queue", "QUEUE")
    return [
        ("key", azurite.connection_string, key),
        (
            "lower-case keys, blanks, trailing semicolons",
            f" defaultendpointsprotocol = http ; accountname = {ACCOUNT} ; "
            f"accountkey = {key} ;{lower.replace('Table', 'table')};;",
            key,
        ),
        (
            "upper-case keys, key last",
            f"{upper.replace('Table', 'TABLE')}ACCOUNTNAME={ACCOUNT};ACCOUNTKEY={key}",
            key,
        ),
        (
            "account SAS",
            f"AccountName={ACCOUNT};SharedAccessSignature={sas};{endpoints()}",
            signature,
        ),
        ("SAS in each endpoint URL", f"AccountName={ACCOUNT};{endpoints('?' + sas)}", signature),
    ]


def _spelled(azurite: Azurite, index: int) -> tuple[str, str]:
    _, text, secret = _accepted(azurite)[index]
    return text, secret


#: The spellings a whole job is run through, one per way the secret travels: the account
#: key in the least canonical spelling (lower case, blanks, empty parts), an account SAS,
#: a SAS in each endpoint's URL. Each run takes ~30 s (three processes, every view): the
#: other spellings of the key (0, 2) go through what differs for them, the parse, more
#: cheaply (:func:`test_every_spelling_of_the_key_reaches_the_same_account_and_is_never_shown`).
WHOLE_LIFE = (1, 3, 4)
#: The spelling of the key the others are compared with.
KEY_SPELLING = 1


@pytest.mark.parametrize("index", WHOLE_LIFE, ids=lambda i: f"spelling-{i}")
def test_a_job_run_through_every_command_never_shows_the_secret(
    azurite: Azurite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: int
):
    text, secret = _spelled(azurite, index)
    (tmp_path / "secret_jobs.py").write_text(JOBS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    job_id = f"secret-{index}-{time.monotonic_ns()}"
    seen: list[str] = []

    def invoke(*args: str) -> None:
        seen.append(_invoked(text, *args))

    # Given a job submitted and run to its end by a real worker, logging JSON and
    # serving metrics, which chunk 0 scrapes while it runs
    invoke("check")
    port, scraped = free_port(), tmp_path / "scraped.txt"
    params = json.dumps({"port": port, "scraped": str(scraped)})
    invoke("submit", "secret_jobs:Echo", "--params", params, "--job-id", job_id)
    invoke("limit", "secret-echo", "--running", "4")
    for log_format in ("json", "text"):
        started = run_runner(
            tmp_path,
            "start",
            "secret_jobs:Echo",
            "--burst",
            "--log-format",
            log_format,
            "--metrics-port",
            str(port),
            "--storage",
            text,
            path=str(tmp_path),
        )
        assert started.returncode == 0, started.stderr
        seen += [started.stdout, started.stderr]
    assert f'"job_id": "{job_id}"' in seen[-3]  # the JSON log lines are there
    seen.append(scraped.read_text())
    assert "runner_" in seen[-1]
    # When every view of it is read
    for args in _views(job_id):
        invoke(*args)
    seen += _dashboard_pages(text, job_id)
    seen.append(_watched(tmp_path, text, job_id))
    assert job_id in seen[-1]
    # Then the secret is nowhere, and what the views say is there
    assert "the planted chunk fails" in "".join(seen)
    for shown in seen:
        assert secret not in shown
        assert ACCOUNT_KEY not in shown


@pytest.mark.parametrize(
    "index", sorted(set(range(5)) - set(WHOLE_LIFE)), ids=lambda i: f"spelling-{i}"
)
def test_every_spelling_of_the_key_reaches_the_same_account_and_is_never_shown(
    azurite: Azurite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: int
):
    # Given another spelling of the key than the one a whole job is run through
    text, secret = _spelled(azurite, index)
    whole, whole_secret = _spelled(azurite, KEY_SPELLING)
    assert secret == whole_secret

    # Then it reaches the same endpoints with the same credential: past the parse, the
    # worker, its logs and the views see what they see in that run
    assert _reached(text) == _reached(whole)

    # And the commands, which each parse the text as the worker and the dashboard do
    # (runner.cli.options, checkpoint.location), show no secret: its description, a
    # job submitted through it, that job's views
    (tmp_path / "secret_jobs.py").write_text(JOBS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    job_id = f"secret-{index}-{time.monotonic_ns()}"
    seen = [
        _invoked(text, "check"),
        _invoked(text, "submit", "secret_jobs:Echo", "--params", "1", "--job-id", job_id),
        _invoked(text, "status", job_id, "--json"),
        _invoked(text, "report", job_id),
    ]
    assert f"AccountName={ACCOUNT}" in seen[0] and job_id in seen[-1]
    for shown in seen:
        assert secret not in shown
        assert ACCOUNT_KEY not in shown


def _reached(text: str) -> tuple[str, dict[str, str], str, tuple[str, str]]:
    """Where a connection string leads and as whom: account, endpoint URLs, credential."""
    endpoints = parse_connection_string(text)
    return (
        endpoints.account,
        endpoints.urls,
        type(endpoints.credential).__name__,
        endpoints.credential.named_key,
    )


def _invoked(text: str, *args: str) -> str:
    """What ``runner *args --storage text`` showed, run in this process (it succeeded)."""
    result = CliRunner().invoke(cli, [*args, "--storage", text])
    assert result.exit_code == 0, _shown(result)
    return _shown(result)


def _views(job_id: str) -> list[list[str]]:
    """Every read-only view of ``job_id``, each form (the JSON list cut to the newest: the
    session's Azurite holds other tests' active jobs, each read in full)."""
    return [
        ["status"],
        ["status", "--json", "--limit", "5"],
        ["status", job_id],
        ["status", job_id, "--json"],
        ["report", job_id],
        ["report", job_id, "--json"],
        ["poison", "list", job_id],
        ["poison", "list", job_id, "--json"],
        ["limit"],
        ["limit", "--json"],
    ]


def _dashboard_pages(text: str, job_id: str) -> list[str]:
    listening = serve.prepare(text, "127.0.0.1", 0, 2.0, allow_actions=True)
    try:
        app = build_app(CheckpointStore(listening.storage), listening.settings)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            urls = ["/", "/workers", "/poison", f"/jobs/{job_id}", f"/jobs/{job_id}?state=poisoned"]
            pages = [client.get(url).text for url in urls]
            pages.append(client.get(f"/api/status/{job_id}").text)
            pages.append(client.get("/jobs/no-such-job").text)
    finally:
        listening.close()
    assert all(f"{ACCOUNT}" in page for page in pages[:5])  # the location is shown, masked
    return pages


def _watched(folder: Path, text: str, job_id: str) -> str:
    """What ``runner status JOB_ID --watch`` (no terminal) prints in two refreshes (the
    job named: the session's Azurite holds other tests' jobs, ended more recently)."""
    command = ["status", job_id, "--watch", "--interval", "0.2", "--storage", text]
    process = subprocess.Popen(
        [*ENTRY, *command],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    return "".join(lines) + out + err


def test_an_unreachable_account_is_one_line_without_the_secret(tmp_path: Path):
    # Accepted, but nothing listens: the error quotes the endpoint, never the credential
    dead = "".join(
        f"{service}Endpoint=http://127.0.0.1:9/{ACCOUNT}?sv=1&sig={PLANTED};"
        for service in ("Blob", "Queue", "Table")
    )
    texts = (f"AccountName={ACCOUNT};AccountKey={PLANTED}==;{dead}", f"AccountName=a1;{dead}")
    runs = [
        ("--log-level", "debug", *command, "--storage", text)
        for text in texts
        for command in (["check"], ["status", "--json"])
    ]
    # At once: each waits out the SDK's retries of the refused connection (seconds apart)
    with ThreadPoolExecutor(len(runs)) as pool:
        results = list(pool.map(lambda args: run_runner(tmp_path, *args), runs))
    for result in results:
        assert result.returncode == 1
        assert PLANTED not in result.stdout + result.stderr


def test_the_options_of_a_worker_never_show_the_location():
    options = StartOptions(
        ("secret_jobs:Echo",), f"AccountName=a1;AccountKey={PLANTED}", WorkerSettings()
    )

    assert PLANTED not in repr(options) and PLANTED not in str(options)
