"""The loopback Spark cluster (samples/migration/cluster.py), and the migration on it.

One cluster for the module (starting one takes ~25 s): a master, three 1-core workers
and a Spark Connect server held to one core (``spark.cores.max``), so the other two
cores are free for two classic drivers. The tests run in file order: the cluster
started and listening only on loopback, the migration by two runner workers that are
each a classic driver on it, then a worker killed, then everything stopped.

PySpark (and Java) are required: a missing one fails, never skips.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark  # noqa: F401  - a missing spark extra must fail here, never skip
import pytest

from jobs.spark import SparkSettings, spark_session, stop_spark
from samples.migration.cluster import ISOLATION_CONF, ClusterError, LoopbackCluster
from samples.migration.daemon import group_pids
from samples.migration.demo import DemoOptions, DemoResult, run_demo
from samples.migration.demo_cluster import CLASSIC_DRIVER_CONF

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.timeout(900)]

#: As the local demo's files (2,000 rows each): what the run shows does not grow with
#: the data, and a 1-core executor's batch does.
ROWS = 8_000
FILES = 4
FILES_PER_CHUNK = 2  # two chunks: one for each runner worker
#: Generous: the master lists a killed worker as dead within its 10 s timeout.
NOTICE_BOUND_SECONDS = 60.0
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    workdir = tmp_path_factory.mktemp("loopback-cluster")
    with LoopbackCluster(workdir, workers=3, connect_conf={"spark.cores.max": "1"}) as started:
        yield started


@pytest.fixture(scope="module")
def classic_run(
    cluster: LoopbackCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[DemoResult, list[str], Path]]:
    """The migration by two runner workers, each a classic driver on the cluster; the
    one-shot check runs on a local session in this process."""
    workdir = tmp_path_factory.mktemp("cluster-classic")
    worker_args = (
        "--spark-master",
        cluster.master_url,
        "--spark-conf",
        json.dumps(CLASSIC_DRIVER_CONF),
    )
    # The staging scratch is a local folder that every executor reads (all are on this
    # machine): the params must say so, or a cluster driver refuses it.
    options = DemoOptions(
        None,
        ROWS,
        FILES,
        FILES_PER_CHUNK,
        kill=False,
        timeout_seconds=600,
        worker_args=worker_args,
        scratch_shared=True,
    )
    said: list[str] = []
    try:
        yield run_demo(options, workdir, say=said.append), said, workdir
    except BaseException:
        print("\n".join(said))
        raise
    finally:
        stop_spark()


def listening(pids: set[int]) -> list[tuple[int, str]]:
    """(pid, local address) of every listening TCP/UDP socket of ``pids`` (``ss``)."""
    out = subprocess.run(["ss", "-ltunpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        columns = line.split()
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append((pid, columns[4]))
    return found


def host_of(address: str) -> str:
    """``[::ffff:127.0.0.1]:4040`` -> ``::ffff:127.0.0.1``; ``*:80`` -> ``*``."""
    return address.rsplit(":", 1)[0].strip("[]")


def every_pid(cluster: LoopbackCluster) -> set[int]:
    return {pid for daemon in cluster.daemons for pid in group_pids(daemon.pid)}


# --------------------------------------------------------------------------- the cluster


def test_cluster_is_up(cluster: LoopbackCluster):
    assert re.fullmatch(r"spark://127\.0\.0\.1:\d+", cluster.master_url)
    assert re.fullmatch(r"sc://127\.0\.0\.1:\d+", cluster.remote_url or "")
    assert [daemon.name for daemon in cluster.daemons] == [
        "master",
        "worker-1",
        "worker-2",
        "worker-3",
        "connect",
    ]
    assert all(daemon.alive() and daemon.log_path.is_file() for daemon in cluster.daemons)
    # Then the master lists every worker, by the port it was given
    ports = sorted(f"127.0.0.1:{daemon.ports['rpc']}" for daemon in cluster.worker_daemons)
    assert cluster.alive_workers() == ports


def test_connect_sessions_share_compiled_code(cluster: LoopbackCluster):
    # Given the cluster's Connect server, started as a plugin of a PySpark application
    assert cluster.remote_url is not None
    session = spark_session(SparkSettings(remote=cluster.remote_url))
    try:
        # Then a client session has no class loaders of its own (Spark's launcher
        # would force them on: each session compiling and warming its code anew)
        assert session.conf.get(ISOLATION_CONF) == "false"
        assert session.range(3).count() == 3
    finally:
        stop_spark()  # and the Connect mode pyspark leaves set in this process


def test_isolated_sessions_use_sparks_own_launcher(tmp_path: Path, monkeypatch):
    launched: list[list[str]] = []
    cluster = LoopbackCluster(tmp_path, isolate_sessions=True)
    monkeypatch.setattr(cluster, "_launch", lambda name, command, *_: launched.append(command))
    monkeypatch.setattr(cluster, "_wait", lambda *_: None)
    monkeypatch.setattr(LoopbackCluster, "master_url", "spark://127.0.0.1:1")
    cluster._start_connect()
    [command] = launched
    assert command[1:3] == ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    assert command[-1] == "spark-internal"
    assert not any(item.startswith(ISOLATION_CONF) for item in command)


def executors_listening(cluster: LoopbackCluster) -> tuple[list[int], list[tuple[int, str]]]:
    """The workers' executor pids and every socket of the cluster, once an executor is
    up and every process listens (an executor binds its ports a few seconds after it
    starts; bounded by :data:`NOTICE_BOUND_SECONDS`)."""
    deadline = time.monotonic() + NOTICE_BOUND_SECONDS
    while True:
        executors = [
            pid
            for daemon in cluster.worker_daemons
            for pid in group_pids(daemon.pid)
            if pid != daemon.pid
        ]
        sockets = listening(every_pid(cluster))
        wanted = {*executors, *(daemon.pid for daemon in cluster.daemons)}
        if (executors and {pid for pid, _ in sockets} >= wanted) or time.monotonic() > deadline:
            return executors, sockets
        time.sleep(0.5)


def test_every_listening_socket_is_on_loopback(cluster: LoopbackCluster):
    # Given the Connect server's executor running on a worker (in its process group)
    # When every listening socket of every process of the cluster is listed
    executors, sockets = executors_listening(cluster)
    assert executors, "no executor JVM found under the workers"
    # Then each daemon and the executor listen, and only on 127.0.0.1
    assert {pid for pid, _ in sockets} >= {*executors, *(d.pid for d in cluster.daemons)}
    assert [entry for entry in sockets if host_of(entry[1]) not in LOOPBACK] == []
    ports = {int(address.rsplit(":", 1)[1]) for _, address in sockets}
    assert {port for daemon in cluster.daemons for port in daemon.ports.values()} <= ports


# --------------------------------------------------------------------------- classic drivers


def test_classic_drivers_migrate_like_the_one_shot_run(
    classic_run: tuple[DemoResult, list[str], Path], cluster: LoopbackCluster
):
    result, said, _ = classic_run
    # Then the chunked output equals the one-shot run's, counts and checksums
    assert result.verdict.ok, "\n".join(said)
    assert result.summary["rows_in"] == ROWS
    assert result.summary["chunks"] == FILES // FILES_PER_CHUNK
    assert set(result.exit_codes.values()) == {0}
    # And both runner workers were applications of the cluster, one core each
    apps = master_state(cluster)["completedapps"]
    drivers = [app for app in apps if app["name"] == "chunkrunner"]
    assert len(drivers) == 2, apps
    assert {app["cores"] for app in drivers} == {1}


def test_each_runner_worker_ran_a_chunk_on_the_cluster(
    classic_run: tuple[DemoResult, list[str], Path], cluster: LoopbackCluster
):
    _, _, workdir = classic_run
    for name in ("worker-1", "worker-2"):
        log = (workdir / f"{name}.log").read_text()
        assert f"master {cluster.master_url}" in log
        assert re.search(r"chunk \d batch 1 of \d", log), log[-2000:]


def master_state(cluster: LoopbackCluster) -> dict[str, Any]:
    with urllib.request.urlopen(f"{cluster.master_ui_url}/json/", timeout=5) as answer:
        return dict(json.load(answer))


# --------------------------------------------------------------------------- kill and stop


#: How long the killed worker's processes may take to leave /proc.
GROUP_GONE_SECONDS = 5.0


def test_kill_worker_kills_its_executors_and_the_master_notices(cluster: LoopbackCluster):
    # Given the worker that runs the Connect server's executor
    host = next(d for d in cluster.worker_daemons if len(group_pids(d.pid)) > 1)
    index = cluster.worker_daemons.index(host)
    assert len(cluster.alive_workers()) == 3
    # When it is killed
    cluster.kill_worker(index)
    # Then its whole process group is gone, executor included (SIGKILLed processes leave
    # /proc within moments; a loaded machine was seen to take longer than one look)
    gone_by = time.monotonic() + GROUP_GONE_SECONDS
    while group_pids(host.pid) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert group_pids(host.pid) == []
    # And the master lists the other two only (within a generous bound)
    deadline = time.monotonic() + NOTICE_BOUND_SECONDS
    while len(cluster.alive_workers()) > 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    others = [d for d in cluster.worker_daemons if d is not host]
    assert cluster.alive_workers() == sorted(f"127.0.0.1:{d.ports['rpc']}" for d in others)
    assert all(d.alive() for d in [*others, cluster.master, cluster.connect_server] if d)


def test_stop_leaves_no_process(cluster: LoopbackCluster):
    daemons = cluster.daemons
    ports = {port for daemon in daemons for port in daemon.ports.values()}
    cluster.stop()
    cluster.stop()  # idempotent
    assert [pid for daemon in daemons for pid in group_pids(daemon.pid)] == []
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    assert [
        line for line in out.splitlines() if int(line.split()[3].rsplit(":", 1)[1]) in ports
    ] == []


def test_a_failed_start_raises_with_the_log_and_stops_what_started(tmp_path: Path):
    cluster = LoopbackCluster(tmp_path, workers=1, worker_memory="no-such-size", connect=False)
    with pytest.raises(ClusterError, match="worker-1 exited") as failed:
        cluster.start()
    assert "worker-1.log" in str(failed.value)
    # Then the master that had started is stopped, its process group gone
    assert cluster.master is not None and not cluster.master.alive()
    assert group_pids(cluster.master.pid) == []
