"""How long a SIGKILLed Spark Connect client's action holds the cluster, with and without
the reaper (docs/spark.md, "A SIGKILLed worker's action").

    python -m tests.bench.reaper [--repeats 3] [--lease 10]

On a loopback cluster (one at a time): a client in a subprocess starts an action of two
tasks that would sleep for 10 minutes each (a Python UDF), tagged as an attempt's
operations are; once both tasks run it is SIGKILLed. Then either nothing (the server's
own clean-up, with Spark's defaults and with :data:`CONNECT_ABANDONED_CONF`), or the
reaper is called ``--lease`` seconds after the kill (when a replacement started at once
would claim the chunk) with the previous owner gone. Measured: from the SIGKILL to the
dead action's last task ending, read from the Connect driver's REST API every 0.5 s.
The runs without a reaper go on together (each on its own 2 task slots), the reaper's
one after another. Prints one JSON line per run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from jobs.chunk import Takeover
from jobs.spark.reaper import claim_tag, reap
from samples.migration.cluster import CONNECT_ABANDONED_CONF, LoopbackCluster, free_port
from tests.jobs.connect_jobs import tagged_active_tasks

#: Bound on each run; Spark's defaults drop a dead client's operation after ~7.5 min.
RUN_BOUND_SECONDS = 900
#: Spark's own values of the settings in CONNECT_ABANDONED_CONF.
SPARK_DEFAULTS = {
    "spark.connect.execute.reattachable.senderMaxStreamDuration": "2m",
    "spark.connect.execute.manager.detachedTimeout": "5m",
    "spark.connect.execute.manager.maintenanceInterval": "30s",
}

CLIENT = """
import json, sys
from pyspark.sql import SparkSession
from tests.jobs.connect_jobs import endless_action
remote, tags = sys.argv[1], sys.argv[2:]
spark = SparkSession.builder.remote(remote).getOrCreate()
for tag in tags:
    spark.addTag(tag)
print(json.dumps({"endpoint": remote.removeprefix("sc://").split("/")[0],
                  "session_id": spark.session_id, "user_id": spark.client._user_id or ""}),
      flush=True)
endless_action(spark)
"""


def start_client(remote: str, claim: str, run: str) -> tuple[subprocess.Popen[str], str]:
    """A client in a subprocess, inside its endless action; its session's record."""
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, remote, claim_tag(claim), run],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert client.stdout is not None
    return client, client.stdout.readline().strip()


def wait_running(ui: str, run: str, tasks: int = 2) -> None:
    deadline = time.monotonic() + 300
    while (tagged_active_tasks(ui, run) or 0) < tasks:
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run}: its tasks never all ran")
        time.sleep(0.5)


def seconds_to_idle(ui: str, run: str, killed_at: float) -> float:
    while time.monotonic() - killed_at < RUN_BOUND_SECONDS:
        if tagged_active_tasks(ui, run) == 0:
            return round(time.monotonic() - killed_at, 1)
        time.sleep(0.5)
    return float("inf")


def unreaped(cluster: LoopbackCluster, ui: str, repeats: int, label: str) -> list[float]:
    """``repeats`` clients killed together; nobody reaps."""
    assert cluster.remote_url is not None
    runs = [f"run-{uuid.uuid4().hex[:8]}" for _ in range(repeats)]
    clients = [start_client(cluster.remote_url, uuid.uuid4().hex[:12], run)[0] for run in runs]
    for run in runs:
        wait_running(ui, run)
    killed_at = time.monotonic()
    for client in clients:
        client.send_signal(signal.SIGKILL)
        client.wait()
    found = [seconds_to_idle(ui, run, killed_at) for run in runs]
    for run, seconds in zip(runs, found, strict=True):
        print(json.dumps({"mode": label, "run": run, "seconds": seconds}), flush=True)
    return found


def reaped(cluster: LoopbackCluster, ui: str, repeats: int, lease: float) -> list[float]:
    assert cluster.remote_url is not None
    found = []
    for _ in range(repeats):
        run, claim = f"run-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:12]
        client, recorded = start_client(cluster.remote_url, claim, run)
        wait_running(ui, run)
        killed_at = time.monotonic()
        client.send_signal(signal.SIGKILL)
        client.wait()
        time.sleep(lease)
        done = reap(Takeover("dead:1:x", claim, recorded, owner_gone=True), cluster.remote_url)
        seconds = seconds_to_idle(ui, run, killed_at)
        found.append(seconds)
        print(
            json.dumps(
                {
                    "mode": "reaper",
                    "run": run,
                    "seconds": seconds,
                    "reap_seconds": round(done.seconds, 2) if done else None,
                    "interrupted": len(done.interrupted) if done else None,
                }
            ),
            flush=True,
        )
    return found


def measure(
    conf: dict[str, str], repeats: int, label: str, lease: float | None
) -> tuple[list[float], list[float]]:
    """Runs without a reaper, then (``lease`` given) with one, on one cluster."""
    port = free_port()
    ui_conf = {"spark.ui.enabled": "true", "spark.ui.port": str(port)}
    with tempfile.TemporaryDirectory(prefix="reaper-bench-") as workdir:
        # Task slots for every run at once: sleeping tasks cost no CPU.
        with LoopbackCluster(
            Path(workdir), workers=2, cores_per_worker=repeats, connect_conf={**conf, **ui_conf}
        ) as cluster:
            ui = f"http://127.0.0.1:{port}"
            alone = unreaped(cluster, ui, repeats, label)
            with_reaper = reaped(cluster, ui, repeats, lease) if lease is not None else []
    return alone, with_reaper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--skip-defaults", action="store_true")
    args = parser.parse_args(argv)
    medians = {}
    alone, with_reaper = measure(
        CONNECT_ABANDONED_CONF, args.repeats, "server settings", args.lease
    )
    medians["reaper"] = statistics.median(with_reaper)
    medians["server settings, no reaper"] = statistics.median(alone)
    print(json.dumps({"medians": medians}), flush=True)
    if not args.skip_defaults:
        alone, _ = measure(SPARK_DEFAULTS, args.repeats, "spark defaults", None)
        medians["spark defaults, no reaper"] = statistics.median(alone)
        print(json.dumps({"medians": medians}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
