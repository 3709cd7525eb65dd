"""A Spark standalone cluster on loopback, started from the installed PySpark.

    with LoopbackCluster(workdir, workers=2) as cluster:     # master, 2 workers, Connect
        cluster.master_url    # spark://127.0.0.1:P  (classic drivers)
        cluster.remote_url    # sc://127.0.0.1:P     (Spark Connect clients)
        cluster.kill_worker(1)                             # a machine dying
        cluster.alive_workers()                            # from the master's /json/

    python -m samples.migration.cluster [--workdir D]      # run one until Ctrl-C

Every daemon (master, workers, the Spark Connect server) is a JVM started through the pip
package's ``bin/spark-class`` / ``bin/spark-submit`` (Java 17 on PATH), in a session of
its own, its output in ``<workdir>/<name>/<name>.log``, with its own conf, log, pid,
work and local folders under ``workdir``. ``SPARK_LOCAL_IP=127.0.0.1`` for all of them
and explicit ``--host`` / bind addresses: every listening socket of every daemon and of
every executor is on 127.0.0.1 (the Connect server binds every interface unless told).

A worker's executors are its child processes, in its process group: ``kill_worker``
SIGKILLs the group, the Worker JVM and its executors at once, as a machine dying would.
The worker timeout is lowered to :data:`WORKER_TIMEOUT_SECONDS` (on the master *and* the
workers, which heartbeat every quarter of their own setting) so a worker that dies
silently is declared dead quickly. The master's REST submission server is off (it would
take the fixed port 6066). ``stop()`` stops every daemon by process group (SIGTERM, a bounded
wait, SIGKILL) and is idempotent; a failed or interrupted ``start()`` stops what it had
started before raising.

**Cores.** A standalone master gives an application every free core until it ends
(``spark.deploy.*`` defaults are kept). With ``connect=True`` the Connect server is an
application and holds every worker's core while it runs, so a classic driver started
next to it would wait for cores forever: send the work through the Connect server (the
demo's one-shot check runs as a local driver, off the cluster). For classic drivers,
start the cluster with ``connect=False`` and give each driver ``spark.cores.max`` (e.g.
two chunkrunner workers, each a driver with ``spark.cores.max=1``, on two 1-core
workers). ``connect_conf`` is extra conf for the Connect server (e.g. its own
``spark.cores.max`` to leave cores free); over :data:`CONNECT_ABANDONED_CONF`, which
makes the server drop a dead client's operation within about a minute.

**Sessions share compiled code.** The Connect server is started as the Connect plugin
of an ordinary PySpark application (:mod:`samples.migration.connect_server`), with
``spark.sql.artifact.isolation.enabled=false``. Spark's own launcher
(``SparkConnectServer``, ``sbin/start-connect-server.sh``) forces that isolation on: each
client session then gets class loaders of its own on the driver and every executor, so
the code Spark generates for a plan is compiled and JIT-warmed again in every session,
and a chunked job opens one session per worker process (BENCHMARKS.md, "Spark Connect
sessions that share compiled code"). The price: jars, files or Python modules a client
adds to its session are visible to every session. ``isolate_sessions=True`` starts
Spark's launcher instead.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from runner.worker.signal_safe import off_signal
from samples.migration.daemon import Daemon

#: The master declares a worker dead after this long without a heartbeat.
WORKER_TIMEOUT_SECONDS = 10
#: Bound on each daemon's readiness wait.
START_TIMEOUT_SECONDS = 120.0
#: How often readiness is polled.
POLL_SECONDS = 0.25
HOST = "127.0.0.1"
#: The Connect server drops an operation whose client is gone (nobody reattached) after
#: its stream's longest life plus the detached timeout, checked every maintenance
#: interval: what bounds a SIGKILLed client's work that no reaper reaches (docs/spark.md,
#: "A SIGKILLed worker's action"). Spark's defaults (2 min, 5 min, 30 s) leave it
#: running ~7.5 min. A live client reattaches every stream life (one cheap call per
#: running operation), and the detached timeout outlasts pyspark's quick reattach
#: retries (~17 s of backoff) so a network blip does not cost a live client its work.
CONNECT_ABANDONED_CONF = {
    "spark.connect.execute.reattachable.senderMaxStreamDuration": "30s",
    "spark.connect.execute.manager.detachedTimeout": "30s",
    "spark.connect.execute.manager.maintenanceInterval": "5s",
}
#: Per-session artifact isolation: what Spark's own Connect launcher forces on.
ISOLATION_CONF = "spark.sql.artifact.isolation.enabled"
#: Master and workers alike: the master drops a worker silent this long (default 60 s).
_TIMEOUT_OPT = f"-Dspark.worker.timeout={WORKER_TIMEOUT_SECONDS}"


class ClusterError(RuntimeError):
    """A daemon did not start (the message has its last log lines)."""


def spark_home() -> Path:
    """The installed PySpark's folder: its ``bin/``, ``jars/`` are a Spark distribution."""
    import pyspark  # the spark extra; only needed once a cluster starts

    return Path(pyspark.__file__).parent


def free_port() -> int:
    """A port free on 127.0.0.1 right now (bound to 0, the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


class LoopbackCluster:
    """A Spark standalone master, ``workers`` workers and (``connect``) a Spark Connect
    server, all on 127.0.0.1 and all under ``workdir``; see the module docstring.

    Args:
        workdir: every daemon's folders and logs go under it (created).
        workers: number of Worker daemons.
        cores_per_worker: ``--cores`` of each worker.
        worker_memory: ``--memory`` of each worker (Spark's size syntax).
        connect: also start a Spark Connect server (an application holding the cores).
        connect_conf: extra ``--conf`` for the Connect server.
        isolate_sessions: start the Connect server with Spark's own launcher, which
            gives every client session class loaders of its own (module docstring).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        workers: int = 2,
        cores_per_worker: int = 1,
        worker_memory: str = "1g",
        connect: bool = True,
        connect_conf: Mapping[str, str] | None = None,
        isolate_sessions: bool = False,
    ) -> None:
        self.workdir = Path(workdir)
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.worker_memory = worker_memory
        self.connect = connect
        self.connect_conf = dict(connect_conf or {})
        self.isolate_sessions = isolate_sessions
        self.master: Daemon | None = None
        self.worker_daemons: list[Daemon] = []
        self.connect_server: Daemon | None = None
        self._lock = threading.Lock()
        self._launched: list[Daemon] = []  # in start order, whatever its role

    # ------------------------------------------------------------------ addresses

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self._started(self.master).ports['rpc']}"

    @property
    def master_ui_url(self) -> str:
        return f"http://{HOST}:{self._started(self.master).ports['ui']}"

    @property
    def remote_url(self) -> str | None:
        if self.connect_server is None:
            return None
        return f"sc://{HOST}:{self.connect_server.ports['grpc']}"

    @property
    def daemons(self) -> list[Daemon]:
        """Every daemon started, master first."""
        found = [self.master] if self.master else []
        found += self.worker_daemons
        return found + ([self.connect_server] if self.connect_server else [])

    @staticmethod
    def _started(daemon: Daemon | None) -> Daemon:
        if daemon is None:
            raise ClusterError("the cluster is not started")
        return daemon

    # ------------------------------------------------------------------ life cycle

    def __enter__(self) -> LoopbackCluster:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> LoopbackCluster:
        """Start master, workers and Connect server, each waited for; stops all on failure."""
        if self.daemons:
            raise ClusterError("already started")
        try:
            self._start_master()
            for index in range(self.workers):
                self._start_worker(index)
            self._wait(
                lambda: len(self.alive_workers()) >= self.workers,
                f"{self.workers} alive workers",
                self.daemons,
            )
            if self.connect:
                self._start_connect()
        except BaseException:  # a failed start or Ctrl-C: leave nothing behind
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every daemon started (Connect server, workers, then master); idempotent.
        A daemon that will not die does not keep the others running: its error is
        raised once every one has been tried."""
        errors: list[BaseException] = []
        with self._lock:
            for daemon in reversed(self._launched):
                try:
                    daemon.stop()
                except Exception as error:  # e.g. a JVM stuck past SIGKILL's wait
                    errors.append(error)
        if errors:
            raise ClusterError(f"{len(errors)} daemon(s) did not stop") from errors[0]

    def kill_worker(self, index: int) -> Daemon:
        """SIGKILL worker ``index``'s process group: the Worker JVM and its executors."""
        daemon = self.worker_daemons[index]
        daemon.kill()
        return daemon

    def alive_workers(self) -> list[str]:
        """``host:port`` of every worker the master lists as ALIVE (its ``/json/`` page)."""
        with urllib.request.urlopen(f"{self.master_ui_url}/json/", timeout=5) as answer:
            state = json.load(answer)
        return sorted(
            f"{worker['host']}:{worker['port']}"
            for worker in state["workers"]
            if worker["state"] == "ALIVE"
        )

    # ------------------------------------------------------------------ daemons

    def _start_master(self) -> None:
        rpc, ui = free_port(), free_port()
        # The REST submission server would listen on the fixed port 6066 (a second
        # cluster on the machine could not start); nothing here submits through it.
        env = {"SPARK_MASTER_OPTS": f"{_TIMEOUT_OPT} -Dspark.master.rest.enabled=false"}
        self.master = self._launch(
            "master",
            [
                "spark-class",
                "org.apache.spark.deploy.master.Master",
                "--host",
                HOST,
                "--port",
                str(rpc),
                "--webui-port",
                str(ui),
            ],
            {"rpc": rpc, "ui": ui},
            env,
        )
        self._wait(self._master_answers, "the master's /json/ page", [self.master])

    def _master_answers(self) -> bool:
        try:
            self.alive_workers()
        except (OSError, ValueError):
            # Not up yet; or, seen once under load, up but answering /json/ with an
            # HTML page for a moment: not ready either.
            return False
        return True

    def _start_worker(self, index: int) -> None:
        name = f"worker-{index + 1}"
        rpc, ui = free_port(), free_port()
        command = [
            "spark-class",
            "org.apache.spark.deploy.worker.Worker",
            self.master_url,
            "--host",
            HOST,
            "--port",
            str(rpc),
            "--webui-port",
            str(ui),
            "--cores",
            str(self.cores_per_worker),
            "--memory",
            self.worker_memory,
            "--work-dir",
            str(self._folder(name, "work")),
        ]
        # Workers heartbeat every quarter of *their own* spark.worker.timeout: with the
        # default (60 s) they would beat every 15 s and the master drop them at 10 s.
        env = {"SPARK_WORKER_OPTS": _TIMEOUT_OPT}
        self.worker_daemons.append(self._launch(name, command, {"rpc": rpc, "ui": ui}, env))

    def _start_connect(self) -> None:
        grpc = free_port()
        conf = {
            "spark.connect.grpc.binding.port": str(grpc),
            # It listens on every interface unless told; the driver likewise.
            "spark.connect.grpc.binding.address": HOST,
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            **CONNECT_ABANDONED_CONF,
            **self.connect_conf,
        }
        if self.isolate_sessions:
            # Spark's launcher: it forces per-session artifact isolation whatever --conf says.
            launch = ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
            main = "spark-internal"
        else:
            launch, main = [], str(Path(__file__).with_name("connect_server.py"))
            conf[ISOLATION_CONF] = "false"
        command = ["spark-submit", *launch, "--master", self.master_url, "--name", "spark-connect"]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        self.connect_server = self._launch("connect", [*command, main], {"grpc": grpc})
        self._wait(lambda: _accepts(grpc), "the Connect server's gRPC port", [self.connect_server])

    def _launch(
        self,
        name: str,
        command: list[str],
        ports: dict[str, int],
        extra_env: Mapping[str, str] | None = None,
    ) -> Daemon:
        log_path = self._folder(name) / f"{name}.log"
        executable = str(spark_home() / "bin" / command[0])
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [executable, *command[1:]],
                env=self._env(name, extra_env or {}),
                cwd=self._folder(name),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        daemon = Daemon(name, process, log_path, ports)
        # Recorded at once, before the caller names it: a Ctrl-C right after the
        # Popen must still find it in stop().
        self._launched.append(daemon)
        return daemon

    def _env(self, name: str, extra: Mapping[str, str]) -> dict[str, str]:
        # The caller's SPARK_* / PYSPARK_* settings (a SPARK_CONF_DIR, a master's
        # options) must not leak into the cluster; every daemon gets its own folders.
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("SPARK_", "PYSPARK_"))
        }
        conf_dir = self._folder("conf")  # empty: no spark-defaults.conf, spark-env.sh
        return {
            **env,
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(conf_dir),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(self._folder(name, "logs")),
            "SPARK_PID_DIR": str(self._folder(name, "pid")),
            "SPARK_LOCAL_DIRS": str(self._folder(name, "local")),
            "SPARK_WORKER_DIR": str(self._folder(name, "work")),
            # Executors run Python UDFs in the clients' own interpreter (same version,
            # same packages), as a cluster's nodes must.
            "PYSPARK_PYTHON": sys.executable,
            **extra,
        }

    def _folder(self, *parts: str) -> Path:
        folder = self.workdir.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _wait(self, ready: Callable[[], bool], what: str, watched: list[Daemon]) -> None:
        """Poll ``ready`` until it is true; raise with the logs if a daemon exits or
        :data:`START_TIMEOUT_SECONDS` pass."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not ready():
            dead = [daemon for daemon in watched if not daemon.alive()]
            if dead or time.monotonic() > deadline:
                failed = dead[0] if dead else watched[-1]
                why = f"exited {failed.process.returncode}" if dead else "timed out"
                raise ClusterError(
                    f"waiting for {what}: {failed.name} {why}; {failed.log_path}:\n{failed.tail()}"
                )
            time.sleep(POLL_SECONDS)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="daemons' folders and logs (default: temp)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-connect", dest="connect", action="store_false")
    parser.add_argument(
        "--isolate-sessions",
        action="store_true",
        help="Spark's own Connect launcher: class loaders per session",
    )
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="loopback-spark-"))
    stopping = threading.Event()
    # The handler only sets the flag; the main thread stops the cluster.
    signal.signal(signal.SIGTERM, lambda *_: off_signal(stopping.set))
    try:
        with LoopbackCluster(
            workdir,
            workers=args.workers,
            connect=args.connect,
            isolate_sessions=args.isolate_sessions,
        ) as cluster:
            print(_describe(cluster), flush=True)
            while not stopping.wait(3600):
                pass
    except KeyboardInterrupt:
        pass
    print("stopped", flush=True)
    return 0


def _describe(cluster: LoopbackCluster) -> str:
    lines = [f"master  {cluster.master_url}", f"UI      {cluster.master_ui_url}"]
    if cluster.remote_url:
        lines.append(f"connect {cluster.remote_url}")
    lines += [
        f"{daemon.name:8}pid {daemon.pid} {daemon.ports} log {daemon.log_path}"
        for daemon in cluster.daemons
    ]
    return "\n".join(lines + ["Ctrl-C or SIGTERM stops it."])


if __name__ == "__main__":
    sys.exit(main())
