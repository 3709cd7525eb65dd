"""Test fixtures: every contract test runs once per backend.

``backend`` is parametrised over the embedded store (on a :class:`FakeClock`, so time is
advanced, not slept) and Azure Storage as served by a private Azurite that this test
session starts on free loopback ports and stops at the end. A missing Azurite fails the
run: it never skips (``make test`` installs it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from samples.migration.cluster import LoopbackCluster
from tests import azurite as azurite_process
from tests.backends import BACKENDS, Backend, real_wait
from tests.shared_cluster import SharedCluster


def started_azurite() -> Iterator[azurite_process.Azurite]:
    """A private Azurite until the generator is closed; a missing one fails, never skips."""
    try:
        instance = azurite_process.start()
    except azurite_process.AzuriteMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    yield instance
    instance.stop()


def uses_azurite(item: pytest.Item) -> bool:
    """True if ``item`` needs the session's Azurite: it asks for the fixture, or it is the
    ``azurite`` case of a test parametrised over :data:`BACKENDS` (whose fixtures ask
    for it only then, by ``request.getfixturevalue``)."""
    if "azurite" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "azurite" in callspec.params.values()


def pytest_itemcollected(item: pytest.Item) -> None:
    # Marked as collected, before `-m` deselects: `-m "not azurite"` runs without it.
    if uses_azurite(item):
        item.add_marker(pytest.mark.azurite)


@pytest.fixture(scope="session")
def azurite() -> Iterator[azurite_process.Azurite]:
    """One Azurite for the whole session; tests keep apart by unique names."""
    yield from started_azurite()


# --------------------------------------------------------------------------- Spark cluster

#: The fixtures of the shared loopback Spark cluster (tests/shared_cluster.py).
SHARED_CLUSTER = "loopback_cluster"
DAMAGED_CLUSTER = "loopback_cluster_to_damage"


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    shared = SharedCluster(tmp_path_factory)
    yield shared
    shared.stop()


@pytest.fixture(scope="module")
def loopback_cluster(shared_cluster: SharedCluster) -> LoopbackCluster:
    """The session's loopback Spark cluster, started by the first module asking for it
    (a missing pyspark or Java fails, never skips)."""
    return shared_cluster.get()


@pytest.fixture(scope="module")
def loopback_cluster_to_damage(shared_cluster: SharedCluster) -> Iterator[LoopbackCluster]:
    """The session's cluster for a module that damages it (kills a Spark worker);
    stopped after the module, so a later module asking for one gets a fresh one."""
    yield shared_cluster.get()
    shared_cluster.stop()


def _cluster_turn(item: pytest.Item) -> int:
    names = getattr(item, "fixturenames", ())
    return 2 if DAMAGED_CLUSTER in names else 1 if SHARED_CLUSTER in names else 0


#: What chooses a worker's Spark: code under test sets them in this process (`runner
#: start --spark-master`, the benches), and one left behind changes every later Spark test.
SPARK_TARGET_VARIABLES = ("RUNNER_SPARK_MASTER", "RUNNER_SPARK_REMOTE", "RUNNER_SPARK_CONF")


@pytest.fixture(autouse=True)
def _spark_target_left_as_found() -> Iterator[None]:
    """Each test leaves the Spark target variables as it found them, whatever its order."""
    before = {name: os.environ.get(name) for name in SPARK_TARGET_VARIABLES}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Whole modules on the shared cluster run last, those that damage it after the
    others: one cluster start serves them all, and it is up only while they run. The
    sort is stable: every other test, and each module's tests, keep their order."""
    turn: dict[object, int] = {}
    for item in items:
        turn[item.path] = max(turn.get(item.path, 0), _cluster_turn(item))
    items.sort(key=lambda item: turn[item.path])


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path) -> Iterator[Backend]:
    """The storage contract's subject: embedded on a fake clock, or Azurite in real time."""
    if request.param == "embedded":
        clock = FakeClock()
        storage = open_storage(str(tmp_path / "store"), clock=clock)
        subject = Backend("embedded", storage, clock.advance, clock)
    else:
        server = request.getfixturevalue("azurite")
        storage = open_storage(server.connection_string, azure_retry_total=1)
        subject = Backend("azurite", storage, real_wait)
    try:
        yield subject
    finally:
        subject.clean_up()
        storage.close()
