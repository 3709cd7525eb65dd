"""Serving ``runner start --metrics-port``: one Prometheus endpoint however many workers.

With ``--workers 1`` the worker runs in the serving process and its metrics are kept in
the registry served. With ``--workers N`` the parent serves and each worker process keeps
its values in files of a directory the parent makes afresh (``PROMETHEUS_MULTIPROC_DIR``,
prometheus_client's multiprocess mode) and removes when it exits; the environment
variable is set before any worker is spawned, because prometheus_client chooses where
values go when it is first imported, which a spawned worker does while it starts. A
worker that dies or is replaced is marked dead, so the gauges of live processes
(chunks in flight) leave it out; its counters stay in the sums, as counters must.

Beside the workers' metrics the serving process keeps two gauges of its own: the worker
processes alive, and each queue's approximate message count. That count is sampled on
a thread of its own every :data:`QUEUE_SAMPLE_SECONDS`, one request per queue: a scrape
reads the last sample and never waits on the store, and scraping more often costs the
store nothing more.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError, StorageError
from checkpoint.storage import QueueStore
from runner.worker.observing.metrics import PREFIX, PrometheusRecorder

log = logging.getLogger(__name__)

#: Where prometheus_client's multiprocess mode keeps each process's values.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
DEFAULT_HOST = "127.0.0.1"
#: How often the serving process asks the store for each queue's message count.
QUEUE_SAMPLE_SECONDS = 15.0
#: How soon a queue never counted yet (its workers have not created it yet, say) is
#: asked again.
UNCOUNTED_SECONDS = 1.0
#: How long a stop waits for a sample under way.
STOP_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class MetricsAddress:
    """Where the endpoint listens: ``http://HOST:PORT/metrics``."""

    port: int
    host: str = DEFAULT_HOST


class QueueLengths:
    """Each queue's approximate message count, sampled every ``interval_seconds`` on a
    thread of its own (a daemon: a store that hangs never holds up the exit); every
    :data:`UNCOUNTED_SECONDS` while a queue has never been counted."""

    def __init__(
        self, queues: QueueStore, names: list[str], interval_seconds: float = QUEUE_SAMPLE_SECONDS
    ):
        self._queues, self._names, self._interval = queues, names, interval_seconds
        self._lengths: dict[str, int] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="queue-lengths", daemon=True)

    def sample(self) -> None:
        """Ask once for each queue's count; a queue the store cannot count now keeps its
        last count (none yet: it is not shown)."""
        for name in self._names:
            try:
                self._lengths[name] = self._queues.approximate_length(name)
            except StorageError as error:
                log.debug("counting the messages of %s failed: %s", name, error)

    def lengths(self) -> dict[str, int]:
        return dict(self._lengths)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling; wait a little for a sample under way (not for a store that
        hangs: the storage is closed next)."""
        self._stopped.set()
        self._thread.join(STOP_WAIT_SECONDS)

    def _run(self) -> None:
        self.sample()
        while not self._stopped.wait(self._next_seconds()):
            self.sample()

    def _next_seconds(self) -> float:
        if len(self._lengths) < len(self._names):
            return min(self._interval, UNCOUNTED_SECONDS)
        return self._interval


class ServingGauges(Collector):
    """The serving process's own gauges, read at each scrape (a prometheus_client
    collector): the worker processes alive, and the last sample of the queues."""

    def __init__(self, lengths: QueueLengths):
        self._lengths = lengths
        #: Set by the supervisor as workers start and end.
        self.workers_alive = 0

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            f"{PREFIX}_workers_alive", "Worker processes running.", value=self.workers_alive
        )
        messages = GaugeMetricFamily(
            f"{PREFIX}_queue_messages",
            f"Messages in each queue, visible or not (approximate; sampled every "
            f"{QUEUE_SAMPLE_SECONDS:g} s).",
            labels=["queue"],
        )
        for queue, count in sorted(self._lengths.lengths().items()):
            messages.add_metric([queue], count)
        yield messages


class Serving:
    """What ``runner start`` does with its metrics while it runs.

    Attributes:
        recorder: the metrics of a worker run in this process (``--workers 1``); None
            when the workers are processes of their own (they keep theirs in files).
        gauges: the serving process's own gauges.
        directory: the multiprocess directory, or None with ``--workers 1``.
    """

    def __init__(
        self, recorder: PrometheusRecorder | None, gauges: ServingGauges, directory: str | None
    ):
        self.recorder, self.gauges, self.directory = recorder, gauges, directory

    def workers_alive(self, count: int) -> None:
        self.gauges.workers_alive = count

    def exited(self, pid: int) -> None:
        """A worker process ended: its live gauges leave the sums."""
        if self.directory is not None:
            # (prometheus_client's multiprocess module has no annotations)
            mark_process_dead(pid, self.directory)  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def serving(
    address: MetricsAddress, storage: str | None, queues: list[str], workers: int
) -> Iterator[Serving]:
    """Serve the metrics of ``workers`` worker processes at ``address`` until the block
    ends, sampling ``queues`` on ``storage``.

    Raises:
        ConfigurationError: the address cannot be listened on (the port is taken, say).
    """
    registry = CollectorRegistry()
    directory = _multiprocess_directory() if workers > 1 else None
    previous = os.environ.get(MULTIPROC_ENV)
    try:
        if directory is not None:
            MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
            os.environ[MULTIPROC_ENV] = directory  # before the first worker is spawned
            recorder = None
        else:
            recorder = PrometheusRecorder(registry)
        server = _listen(address, registry)
        try:
            with open_storage(storage) as opened:
                lengths = QueueLengths(opened.queues, queues)
                gauges = ServingGauges(lengths)
                registry.register(gauges)
                lengths.start()
                try:
                    yield Serving(recorder, gauges, directory)
                finally:
                    lengths.stop()
        finally:
            server.shutdown()
            server.server_close()
    finally:
        if directory is not None:
            _restore(previous)
            shutil.rmtree(directory, ignore_errors=True)


def _multiprocess_directory() -> str:
    # Fresh and private: values another run left behind would be summed with ours.
    return tempfile.mkdtemp(prefix="runner-metrics-")


def _listen(address: MetricsAddress, registry: CollectorRegistry) -> WSGIServer:
    try:
        server, _ = start_http_server(address.port, address.host, registry)
    except OSError as error:
        raise ConfigurationError(
            f"cannot serve metrics on {address.host}:{address.port}: {error.strerror or error}"
        ) from error
    log.info("metrics on http://%s:%d/metrics", address.host, address.port)
    return server


def _restore(previous: str | None) -> None:
    if previous is None:
        os.environ.pop(MULTIPROC_ENV, None)
    else:
        os.environ[MULTIPROC_ENV] = previous
