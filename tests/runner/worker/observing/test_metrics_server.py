"""Serving ``runner start --metrics-port`` (runner/worker/observing/metrics_server.py): one endpoint
for one worker in this process or for N worker processes through prometheus_client's
multiprocess files, the serving process's own gauges, a port in use, and what is left
behind (nothing).

The N worker processes are played in this process: each writes its values as a process
of its own pid would (prometheus_client's multiprocess value class, given that pid), to
the directory the server made. tests/e2e/test_metrics.py runs the real processes.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, values
from prometheus_client.parser import text_string_to_metric_families

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError, NotFound, Throttled
from runner.worker.observing.metrics import PrometheusRecorder
from runner.worker.observing.metrics_server import (
    MULTIPROC_ENV,
    UNCOUNTED_SECONDS,
    MetricsAddress,
    QueueLengths,
    serving,
)
from tests.azurite import free_port

JOB_TYPE = "tests.jobs:Counted"
#: A sample: its name and its labels.
Key = tuple[str, tuple[tuple[str, str], ...]]


def scrape(port: int) -> dict[Key, float]:
    """The endpoint's samples: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def of_type(name: str) -> Key:
    return (name, (("job_type", JOB_TYPE),))


def messages_in(queue: str) -> Key:
    return ("chunkrunner_queue_messages", (("queue", queue),))


def wait_for(condition: Callable[[], Any], seconds: float = 10.0) -> Any:
    ready = threading.Event()
    for _ in range(int(seconds / 0.02)):
        found = condition()
        if found:
            return found
        ready.wait(0.02)
    raise AssertionError("never happened")


@pytest.fixture
def private_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the server makes its multiprocess directory (to see what it leaves)."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _as_process(pid: int, monkeypatch: pytest.MonkeyPatch) -> PrometheusRecorder:
    """A worker process's recorder, as process ``pid`` of ``runner start --workers N``
    keeps it: its values in that process's files of the multiprocess directory."""
    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(lambda: pid))
    return PrometheusRecorder(CollectorRegistry())


def test_one_worker_in_this_process_is_served_from_its_registry(tmp_path: Path):
    # Given a store with a queue of two messages, and metrics served for one worker
    storage = str(tmp_path / "store")
    with open_storage(storage) as opened:
        opened.queues.create_queue("counted")
        for body in (b"a", b"b"):
            opened.queues.send("counted", body)
    port = free_port()
    with serving(MetricsAddress(port), storage, ["counted", "counted-poison"], 1) as metrics:
        assert metrics.recorder is not None and metrics.directory is None
        metrics.workers_alive(1)
        metrics.recorder.task_started(JOB_TYPE, "chunk", resumed=False)

        # Then one scrape shows the worker's metrics and the server's own gauges; the
        # poison queue, which does not exist, is not shown
        found = wait_for(lambda: (got := scrape(port)).get(messages_in("counted")) and got)
    assert found[messages_in("counted")] == 2
    assert messages_in("counted-poison") not in found
    assert found[of_type("chunkrunner_chunks_started_total")] == 1
    assert found[of_type("chunkrunner_chunks_in_flight")] == 1
    assert found[("chunkrunner_workers_alive", ())] == 1
    with pytest.raises(OSError):  # and nothing listens once it ends
        scrape(port)


def test_n_worker_processes_are_one_endpoint_summed_from_their_files(
    tmp_path: Path, private_temp: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    port = free_port()
    with serving(MetricsAddress(port), str(tmp_path / "store"), [], 2) as metrics:
        # Given the directory made for the workers, named in their environment
        assert metrics.recorder is None and metrics.directory is not None
        assert os.environ[MULTIPROC_ENV] == metrics.directory
        assert Path(metrics.directory).parent == private_temp
        # When two worker processes each start a chunk and mark one done
        for pid, lease_seconds in ((101, 40), (102, 20)):
            worker = _as_process(pid, monkeypatch)
            worker.leases_sized([JOB_TYPE], {JOB_TYPE: lease_seconds}.__getitem__)
            worker.task_started(JOB_TYPE, "chunk", resumed=False)
            worker.chunk_done(JOB_TYPE, 1.5)
            worker.request("record_merge", "ok", 0.01)
        metrics.workers_alive(2)

        # Then the one endpoint sums them
        both = scrape(port)
        # and once one of them died, its chunk is no longer in flight; its counts stay
        metrics.exited(101)
        one = scrape(port)

    assert both[of_type("chunkrunner_chunks_started_total")] == 2
    assert both[of_type("chunkrunner_chunks_done_total")] == 2
    assert both[of_type("chunkrunner_chunk_duration_seconds_count")] == 2
    assert both[of_type("chunkrunner_chunks_in_flight")] == 2
    merges = (("operation", "record_merge"), ("outcome", "ok"))
    assert both[("chunkrunner_storage_requests_total", merges)] == 2
    assert both[("chunkrunner_workers_alive", ())] == 2
    assert one[of_type("chunkrunner_chunks_in_flight")] == 1
    # The lease: the longest a live worker gives (a dead one's leaves with it)
    assert both[of_type("chunkrunner_lease_seconds")] == 40
    assert one[of_type("chunkrunner_lease_seconds")] == 20
    assert one[of_type("chunkrunner_chunks_started_total")] == 2
    # And at the end the directory is gone and the environment as it was
    assert list(private_temp.iterdir()) == []
    assert MULTIPROC_ENV not in os.environ


def test_a_directory_named_before_is_named_again_at_the_end(
    tmp_path: Path, private_temp: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(MULTIPROC_ENV, "/somewhere/else")
    with serving(MetricsAddress(free_port()), str(tmp_path / "store"), [], 2) as metrics:
        assert os.environ[MULTIPROC_ENV] == metrics.directory  # a fresh one for our workers
    assert os.environ[MULTIPROC_ENV] == "/somewhere/else"


def test_a_port_in_use_is_one_clear_error_and_leaves_nothing_behind(
    tmp_path: Path, private_temp: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError) as caught:
            with serving(MetricsAddress(port), str(tmp_path / "store"), [], 2):
                raise AssertionError("served on a port in use")

    assert str(caught.value) == f"cannot serve metrics on 127.0.0.1:{port}: Address already in use"
    assert list(private_temp.iterdir()) == []
    assert MULTIPROC_ENV not in os.environ


# --------------------------------------------------------------------------- queue counts


class _Queues:
    """Queues counted as scripted: a count, or an error, per call, per queue."""

    def __init__(self, answers: dict[str, list[Any]]):
        self._answers = answers
        self.asked: list[str] = []

    def approximate_length(self, queue: str) -> int:
        self.asked.append(queue)
        answer = self._answers[queue].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return int(answer)


def test_a_queue_the_store_cannot_count_now_keeps_its_last_count():
    queues = _Queues({"jobs": [3, Throttled("busy")], "gone": [NotFound("no queue"), 0]})
    lengths = QueueLengths(queues, ["jobs", "gone"])  # type: ignore[arg-type]

    lengths.sample()
    first = lengths.lengths()
    lengths.sample()

    assert first == {"jobs": 3}
    assert lengths.lengths() == {"jobs": 3, "gone": 0}


def test_queues_are_sampled_on_their_own_thread_each_interval():
    queues = _Queues({"jobs": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 100})
    lengths = QueueLengths(queues, ["jobs"], interval_seconds=0.01)  # type: ignore[arg-type]

    lengths.start()
    try:
        wait_for(lambda: len(queues.asked) >= 3)
    finally:
        lengths.stop()
    asked = len(queues.asked)

    threading.Event().wait(0.05)
    assert len(queues.asked) == asked  # stopped: no more requests


def test_a_queue_not_counted_yet_is_asked_again_soon_not_at_the_next_interval():
    # Given a queue its workers have not created yet when the server starts
    queues = _Queues({"jobs": [NotFound("no queue yet"), 5]})
    lengths = QueueLengths(queues, ["jobs"], interval_seconds=3600)  # type: ignore[arg-type]

    lengths.start()
    try:
        # Then it is counted once it is there, within UNCOUNTED_SECONDS, not an hour
        wait_for(lambda: lengths.lengths() == {"jobs": 5}, seconds=UNCOUNTED_SECONDS * 5)
    finally:
        lengths.stop()
