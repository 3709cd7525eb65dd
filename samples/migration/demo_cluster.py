"""The Spark side of ``make demo-cluster``: the loopback cluster's part in the demo.

The demo (:mod:`.demo`, ``--cluster``) runs its two runner workers against a
:class:`~.cluster.LoopbackCluster`; this module says what they are given (Spark Connect
clients by default, classic drivers with ``connect=False``), SIGKILLs a Spark worker
(its executors with it) right after the demo SIGKILLs a runner worker, and reports what
Spark made of it: alive workers before and after, and the master's and drivers' log
lines about the lost worker and executor.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from samples.migration.cluster import HOST, WORKER_TIMEOUT_SECONDS, LoopbackCluster
from samples.migration.daemon import group_pids

#: Each classic driver (a runner worker) takes one core, so two of them share two
#: 1-core workers instead of the first taking both (a standalone master's default).
CLASSIC_DRIVER_CONF = {
    "spark.cores.max": "1",
    # Executors connect back to the driver: on this address, and it listens only there.
    "spark.driver.host": HOST,
    "spark.driver.bindAddress": HOST,
}
#: Why the classic variant kills no Spark worker: each driver holds its core until it
#: ends, and a burst runner worker ends only with the job.
CLASSIC_NO_SPARK_KILL = (
    "   (classic drivers: no Spark worker is killed: with one core fewer than drivers, "
    "the replacement runner worker's driver would wait forever for a core that the other "
    "runner worker's driver holds until the job is done)"
)
#: Log lines about a lost worker or executor, in the master's and the drivers' logs.
LOSS_MARKERS = ("Removing worker", "Lost executor", "ExecutorLostFailure")
#: How many such lines the demo shows.
LOSS_LINES_SHOWN = 6
#: How often the master's page is asked while waiting for it to notice the kill.
POLL_SECONDS = 0.2

Say = Callable[[str], None]


@dataclass
class SparkKill:
    """The Spark worker the demo killed, and what the master and drivers noticed."""

    worker: str
    pids: list[int]
    alive_before: list[str]
    alive_after: list[str] = field(default_factory=list)
    noticed_seconds: float | None = None
    log_lines: list[str] = field(default_factory=list)


class SparkSide:
    """What the demo's runner workers get from the cluster, and the Spark worker kill."""

    def __init__(self, cluster: LoopbackCluster, runner_logs: Path) -> None:
        self.cluster = cluster
        self.runner_logs = runner_logs
        self.kill: SparkKill | None = None

    def describe(self) -> str:
        workers = len(self.cluster.worker_daemons)
        text = (
            f"Spark cluster: master {self.cluster.master_url} with {workers} workers of "
            f"{self.cluster.cores_per_worker} core each (UI {self.cluster.master_ui_url})"
        )
        if self.cluster.remote_url:
            text += f"; Spark Connect server {self.cluster.remote_url}"
        return text

    def worker_args(self) -> tuple[str, ...]:
        """``runner start`` options: a Connect client of the cluster's server, or else
        a classic driver on its master taking one core."""
        if self.cluster.remote_url:
            return ("--spark-remote", self.cluster.remote_url)
        return (
            "--spark-master",
            self.cluster.master_url,
            "--spark-conf",
            json.dumps(CLASSIC_DRIVER_CONF),
        )

    def kill_worker(self, say: Say, index: int = -1) -> SparkKill | None:
        """SIGKILL Spark worker ``index`` (its executors too); wait (bounded) for the
        master to list it dead. Not with classic drivers (:data:`CLASSIC_NO_SPARK_KILL`)."""
        if self.cluster.remote_url is None:
            say(CLASSIC_NO_SPARK_KILL)
            return None
        daemon = self.cluster.worker_daemons[index]
        before = self.cluster.alive_workers()
        pids = group_pids(daemon.pid)  # the Worker JVM and its executors
        killed_at = time.monotonic()
        self.cluster.kill_worker(index)
        kill = self.kill = SparkKill(daemon.name, pids, before)
        say(
            f"   and SIGKILL Spark {daemon.name} (pids {', '.join(map(str, pids))}: the Worker "
            f"JVM and its executors), as a machine dying would; alive Spark workers before: "
            f"{len(before)}"
        )
        # A killed worker's connection drops and the master usually notices at once;
        # a silent one would take up to its worker timeout.
        deadline = killed_at + 3 * WORKER_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            kill.alive_after = self.cluster.alive_workers()
            if len(kill.alive_after) < len(before):
                kill.noticed_seconds = time.monotonic() - killed_at
                break
            time.sleep(POLL_SECONDS)
        noticed = (
            f"after {kill.noticed_seconds:.1f} s" if kill.noticed_seconds is not None else "not yet"
        )
        say(
            f"   the master lists {len(kill.alive_after)} alive Spark worker(s) {noticed}; "
            "Spark goes on with the executors left"
        )
        return kill

    def report(self, say: Say) -> None:
        """Alive workers before and after, and what the logs say about the lost worker
        (once the job is done)."""
        if self.kill is None:
            return
        self.kill.log_lines = self._loss_lines()
        say(
            f"   Spark side: {self.kill.worker} killed; alive Spark workers "
            f"{len(self.kill.alive_before)} -> {len(self.cluster.alive_workers())}"
        )
        for line in self.kill.log_lines[:LOSS_LINES_SHOWN]:
            say(f"   {line}")

    def _loss_lines(self) -> list[str]:
        logs = [
            daemon.log_path
            for daemon in self.cluster.daemons
            if daemon.name in ("master", "connect")
        ]
        if self.cluster.remote_url is None:  # classic: the drivers are the runner workers
            logs += sorted(self.runner_logs.glob("worker-*.log"))
        found = []
        for log in logs:
            text = log.read_text(errors="replace") if log.is_file() else ""
            found += [
                f"{log.stem} log: {line.split(': ', 1)[-1][:150]}"
                for line in text.splitlines()
                if any(marker in line for marker in LOSS_MARKERS)
            ]
        return found
