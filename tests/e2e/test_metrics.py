"""``runner start --workers 2 --metrics-port``: one endpoint for both worker processes,
scraped over HTTP while a job runs and once it is done, on the embedded store.

The counters summed at the one endpoint must equal what the two processes did, as the
job's own event log tells (each chunk logs its end with its worker's pid); the workers'
multiprocess directory (in a temp directory of the test's own, ``TMPDIR``) holds both
workers' files while they run and is gone once ``runner start`` has exited.
"""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.azurite import free_port
from tests.e2e.harness import Cluster
from tests.e2e.processes import descendants

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CHUNKS = 8
JOB_TYPE = "tests.e2e.e2e_jobs:Items"
#: A scrape: each sample's value by its name and labels.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(port: int) -> Samples:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}  # not listening yet
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _showing(port: int, name: str, wanted: Callable[[float], bool]) -> Samples | None:
    """A scrape whose ``name`` of the job type is as ``wanted``, else None."""
    found = _scrape(port)
    value = found.get(_of_type(name))
    return found if value is not None and wanted(value) else None


def _of_type(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("job_type", JOB_TYPE),))


def test_two_workers_are_one_endpoint_whose_counts_are_what_they_did(tmp_path: Path):
    # Given two worker processes serving their metrics at one port, each taking one
    # chunk at a time, and then a job of chunks that take a while (0.4 s each)
    workdir, temp = tmp_path / "work", tmp_path / "temp"
    workdir.mkdir()
    temp.mkdir()
    cluster = Cluster("embedded", str(tmp_path / "store"), workdir, "metrics")
    try:
        port = free_port()
        supervisor = cluster.start(
            *("Items", "--metrics-port", str(port), "--prefetch", "0"),
            burst=False,
            workers=2,
            env={"TMPDIR": str(temp)},
        )
        cluster.wait_until(lambda: supervisor.log().count("serving") >= 2, "2 workers serving")
        job_id = cluster.submit("Items", cluster.params(chunks=CHUNKS, items=4, item_seconds=0.1))

        # When it is scraped while the chunks run: chunks are in flight
        running = cluster.wait_until(
            lambda: _showing(port, "chunkrunner_chunks_in_flight", lambda count: count > 0),
            "a scrape showing chunks in flight",
        )
        workers = [pid for pid in descendants(supervisor.pid) if _is_worker(pid)]
        (directory,) = temp.glob("runner-metrics-*")
        kept = {path.name for path in directory.iterdir()}
        cluster.wait_job(job_id)
        done = cluster.wait_until(
            lambda: _showing(port, "chunkrunner_chunks_done_total", lambda count: count == CHUNKS),
            f"a scrape showing {CHUNKS} chunks done",
        )

        # Then the one endpoint counts every chunk, run by both processes
        ends = cluster.events("end")
        assert {end["chunk"] for end in ends} == set(range(CHUNKS))
        assert len({end["pid"] for end in ends}) == 2, ends
        assert running[_of_type("chunkrunner_chunks_in_flight")] >= 1
        # (a chunk whose lease lapsed on a loaded machine may have started twice)
        assert done[_of_type("chunkrunner_chunks_started_total")] >= CHUNKS
        assert done[_of_type("chunkrunner_chunk_duration_seconds_count")] == CHUNKS
        assert done[_of_type("chunkrunner_chunks_in_flight")] == 0
        assert done[("chunkrunner_workers_alive", ())] == 2
        queue = cluster.queue("items")
        assert ("chunkrunner_queue_messages", (("queue", queue),)) in done
        assert ("chunkrunner_queue_messages", (("queue", f"{queue}-poison"),)) in done
        requests = [
            value
            for (name, labels), value in done.items()
            if name == "chunkrunner_storage_requests_total" and ("outcome", "ok") in labels
        ]
        assert sum(requests) > CHUNKS * 3  # claims, checkpoints, done marks, deletes ...

        # and their values were kept in the one directory, a file of each process's own
        assert len(workers) == 2 and {f"counter_{pid}.db" for pid in workers} <= kept
        # And once runner start has stopped, that directory is gone
        supervisor.send(signal.SIGTERM)
        assert supervisor.wait_exit() == 0
        assert not directory.exists() and list(temp.glob("runner-metrics-*")) == []
    finally:
        cluster.close()


def _is_worker(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"runner worker-")
    except OSError:
        return False
