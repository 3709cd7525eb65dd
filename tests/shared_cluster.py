"""The test session's loopback Spark cluster, shared by the modules that ask for it.

Starting a :class:`~samples.migration.cluster.LoopbackCluster` (master, workers, Connect
server: five JVMs) costs ~25 s on an idle machine, more under load; every module that
can run on the same shape shares one (``tests/conftest.py`` has the fixtures):

- ``loopback_cluster``: the shared cluster, started by the first module that asks;
- ``loopback_cluster_to_damage``: the same, for a module that damages it (a Spark worker
  killed): stopped after that module, so a later module asking gets a fresh one.

``tests/conftest.py`` also orders the run so that no fresh one is needed: the modules on
the shared cluster run last, the damaging ones after the others.

The shape: :data:`WORKERS` 1-core workers and a Connect server holding every core (what
``make demo-cluster`` starts), its driver UI on a free port (its REST API shows a job's
running tasks). ``tests/samples/test_spark_cluster.py`` keeps a cluster of its own: three
workers and a Connect server held to one core, so that two classic drivers find free
cores beside it, and it kills a worker and stops the cluster as part of its tests.
"""

from __future__ import annotations

import pytest

from samples.migration.cluster import HOST, LoopbackCluster, free_port

WORKERS = 2
#: The Connect server's driver UI: on, on a port free at start.
UI_PORT_CONF = "spark.ui.port"


def connect_ui_url(cluster: LoopbackCluster) -> str:
    """The Connect server's driver UI of a cluster started by :class:`SharedCluster`."""
    return f"http://{HOST}:{cluster.connect_conf[UI_PORT_CONF]}"


class SharedCluster:
    """At most one started cluster at a time, started on first :meth:`get`."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp_path_factory = tmp_path_factory
        self._cluster: LoopbackCluster | None = None

    def get(self) -> LoopbackCluster:
        """The running shared cluster; started now if there is none."""
        if self._cluster is None:
            ui = {"spark.ui.enabled": "true", UI_PORT_CONF: str(free_port())}
            workdir = self._tmp_path_factory.mktemp("shared-cluster")
            self._cluster = LoopbackCluster(workdir, workers=WORKERS, connect_conf=ui).start()
        return self._cluster

    def stop(self) -> None:
        """Stop the running cluster, if any; the next :meth:`get` starts a fresh one."""
        cluster, self._cluster = self._cluster, None
        if cluster is not None:
            cluster.stop()
