"""``runner start --metrics-port`` / ``$RUNNER_METRICS_PORT``: the option beats the
environment, a port that cannot be listened on is one ``runner: error:`` line and exit 1
before any worker starts (the port taken by the test, as a user runs the command), and
with one worker the endpoint serves that worker's own metrics while it runs (in this
process; ``--workers 2`` in real processes is tests/e2e/test_metrics.py).
"""

from __future__ import annotations

import signal
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker import supervisor
from runner.worker.loop import EXIT_OK, WorkerSettings
from runner.worker.observing.metrics_server import MetricsAddress
from tests.azurite import free_port
from tests.runner.cli.invoke import one_error_line, run_runner

JOB = "samples.quickstart.wordcount:WordCount"
#: What each chunk of :class:`Scraping` found at the endpoint.
SCRAPED: list[str] = []


class Scraping(ChunkedJob):
    """One chunk that scrapes the metrics of the worker running it (its payload: the port)."""

    queue = "metrics-scraping"

    def split(self, params: dict[str, Any]) -> Any:
        return [params["port"]]

    def process(self, chunk: Chunk) -> None:
        url = f"http://127.0.0.1:{chunk.payload}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            SCRAPED.append(answer.read().decode())


@pytest.fixture
def taken() -> Iterator[list[int]]:
    """Two ports something else listens on."""
    sockets = [socket.socket() for _ in range(2)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
    yield [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()


def _start(tmp_path: Path, *options: str, env_port: int | None = None) -> str:
    store = str(tmp_path / "store")
    args = ["start", JOB, "--storage", store, *options]
    if env_port is None:
        return one_error_line(run_runner(tmp_path, *args))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RUNNER_METRICS_PORT", str(env_port))
        return one_error_line(run_runner(tmp_path, *args))


def test_a_metrics_port_in_use_is_one_line_and_no_worker_starts(tmp_path, taken):
    line = _start(tmp_path, "--metrics-port", str(taken[0]))

    assert line == (
        f"runner: error: cannot serve metrics on 127.0.0.1:{taken[0]}: Address already in use"
    )
    assert not (tmp_path / "store").exists()  # no worker got as far as opening it


def test_the_environment_names_the_port_and_the_option_beats_it(tmp_path, taken):
    from_env = _start(tmp_path, env_port=taken[0])
    both = _start(tmp_path, "--metrics-port", str(taken[1]), env_port=taken[0])

    assert f"127.0.0.1:{taken[0]}:" in from_env
    assert f"127.0.0.1:{taken[1]}:" in both


def test_one_worker_serves_its_own_metrics_while_it_runs(tmp_path, monkeypatch):
    # Given a job whose chunk scrapes the endpoint, and one worker serving it with metrics
    monkeypatch.setattr(f"{__name__}.SCRAPED", [])
    store, port, job = str(tmp_path / "store"), free_port(), f"{__name__}:Scraping"
    submit(job, {"port": port}, storage=store)
    settings = WorkerSettings(burst=True, poll_max_seconds=0.05)
    options = supervisor.StartOptions((job,), store, settings, metrics=MetricsAddress(port))
    previous = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = supervisor.run_workers(options, 1)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)

    # Then the chunk saw itself in flight, started, in the one worker alive
    assert code == EXIT_OK
    (text,) = SCRAPED
    found = {
        (sample.name, tuple(sample.labels.values())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert found[("chunkrunner_chunks_in_flight", (job,))] == 1
    assert found[("chunkrunner_chunks_started_total", (job,))] == 1
    assert found[("chunkrunner_workers_alive", ())] == 1
    assert found[("chunkrunner_storage_requests_total", ("record_merge", "ok"))] >= 1
