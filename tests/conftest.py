"""Test fixtures: every contract test runs once per backend.

``backend`` is parametrised over the embedded store (on a :class:`FakeClock`, so time is
advanced, not slept) and Azure Storage as served by a private Azurite that this test
session starts on free loopback ports and stops at the end. A missing Azurite fails the
run: it never skips (``make test`` installs it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from jobs.spark import SparkSettings, spark_session, stop_spark
from samples.migration.cluster import LoopbackCluster
from samples.migration.job import MigrateOrders
from tests import azurite as azurite_process
from tests.backends import BACKENDS, Backend, real_wait
from tests.shared_cluster import SharedCluster

#: Options for every JVM the tests start (local sessions, runner workers' drivers, the
#: loopback clusters' daemons and executors): the client JIT only and the serial
#: collector. Those JVMs live for seconds to minutes on small data, where the server
#: JIT's compiler threads and the parallel collector's threads only take CPU from the
#: rest of the run: a local session's start and three small migration batches took 34
#: CPU seconds with the defaults, 16 with these. What the JVMs compute is the same. A
#: JAVA_TOOL_OPTIONS already set is kept (then these are not added); `make bench` and
#: the demos run outside pytest and keep the defaults.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("JAVA_TOOL_OPTIONS", TEST_JVM_OPTIONS)


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


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[azurite_process.Azurite]:
    """A private Azurite for one module, which takes it as its ``azurite`` (a fixture of
    that name in the module, returning this one): a module whose views list the store's
    jobs. Such a listing reads every active job in full, and the session's Azurite holds
    every other test's by then: hundreds late in a run, a test of a few seconds alone
    taking minutes. Starting one costs about 2 s."""
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


#: Where a module runs in the order of the run, heaviest first: the modules on a loopback
#: Spark cluster (one with a cluster of its own, those on the shared one, then those that
#: damage it), then the local Spark session's, then other Spark work (worker processes
#: with their own JVMs), then real processes (e2e, chaos), then the rest. Serially, one
#: cluster is up at a time and one start serves every module on the shared one; spread
#: over xdist's workers, the longest units start first and the short ones fill in at
#: the end.
(
    OWN_CLUSTER_TURN,
    CLUSTER_TURN,
    DAMAGE_TURN,
    LOCAL_SPARK_TURN,
    SPARK_TURN,
    PROCESSES_TURN,
    REST_TURN,
) = range(7)
#: Turns whose modules are one xdist work unit, run on one worker in the order above:
#: all the Spark work. Each Spark module uses both cores on its own (a local session, a
#: cluster of five JVMs, Spark worker processes); two side by side took five times as
#: long and pushed real-time tests past their bounds. One at a time, the other workers
#: run the rest of the suite beside it, and one cluster and one local session serve all.
SPARK_TURNS = {OWN_CLUSTER_TURN, CLUSTER_TURN, DAMAGE_TURN, LOCAL_SPARK_TURN, SPARK_TURN}
SPARK_GROUP = "spark"
#: The modules of that unit by name. xdist's scheduler sees only test ids, not fixtures
#: or marks (and pytest-xdist 3.8's ``xdist_group`` no longer reaches it under pytest 9),
#: so they are written out here, and every collection checks the list against the turns
#: (:func:`_check_groups`): a new Spark module not listed fails the run by name.
SPARK_MODULES = frozenset(
    {
        "tests/samples/test_spark_cluster.py",
        "tests/jobs/spark/test_spark_connect.py",
        "tests/samples/test_migration_cluster.py",
        "tests/jobs/spark/test_spark.py",
        "tests/samples/test_migration_sample.py",
        "tests/bench/test_cluster.py",
        "tests/bench/test_streaming.py",
    }
)


#: The longest units of the last turn, longest first (their tests' time in a full run,
#: 2026-11-29: 150 s down to 38 s): sent out at the start of their turn, not where the
#: alphabet puts them. In their place one of them started last and ran on alone after
#: the other workers were done (tests/runner/worker/test_storage_faults.py, 57 s), a
#: share of a minute of the run with one of the two cores idle. Only the order: a module
#: not named here runs all the same, in the order it was collected.
LONG_MODULES = (
    "tests/runner/worker/tasks/test_feed.py",
    "tests/runner/cli/dashboard/test_app.py",
    "tests/runner/worker/test_storage_faults.py",
    "tests/project/test_docs.py",
    "tests/runner/worker/tasks/test_planning_memory.py",
    "tests/runner/cli/test_secrets.py",
    "tests/jobs/test_dependencies.py",
    "tests/jobs/test_retention.py",
    "tests/runner/worker/test_several_queues.py",
    "tests/checkpoint/test_store.py",
    "tests/runner/worker/test_intake.py",
    "tests/bench/test_requests_per_chunk.py",
    "tests/runner/cli/test_pipeline_view.py",
)
LONG_RANK = {name: rank for rank, name in enumerate(LONG_MODULES)}


def _turn(item: pytest.Item) -> int:
    names = getattr(item, "fixturenames", ())
    if DAMAGED_CLUSTER in names:
        return DAMAGE_TURN
    if SHARED_CLUSTER in names:
        return CLUSTER_TURN
    if item.get_closest_marker("cluster"):
        return OWN_CLUSTER_TURN
    if LOCAL_SPARK in names:
        return LOCAL_SPARK_TURN
    if item.get_closest_marker("spark"):
        return SPARK_TURN
    if item.get_closest_marker("e2e") or item.nodeid.startswith("tests/chaos/"):
        return PROCESSES_TURN
    return REST_TURN


def _module_turns(items: list[pytest.Item]) -> dict[Path, int]:
    """Each module's turn: that of a test damaging the cluster if it has one (the
    cluster is stopped after it), else the earliest of its tests'."""
    turns: dict[Path, set[int]] = {}
    for item in items:
        turns.setdefault(item.path, set()).add(_turn(item))
    return {
        path: DAMAGE_TURN if DAMAGE_TURN in found else min(found) for path, found in turns.items()
    }


def _module_name(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _check_groups(items: list[pytest.Item], turn: dict[Path, int]) -> None:
    """Every module of a Spark turn listed in :data:`SPARK_MODULES` (a listed module
    may be run in part, by tests that need no Spark), and every module of
    :data:`LONG_MODULES` there to be found (a renamed one would quietly go last again)."""
    root = Path(__file__).resolve().parent.parent
    gone = [name for name in LONG_MODULES if not (root / name).is_file()]
    if gone:
        raise pytest.UsageError(f"LONG_MODULES in tests/conftest.py names no module: {gone}")
    for item in items:
        name = _module_name(item)
        if turn[item.path] in SPARK_TURNS and name not in SPARK_MODULES:
            raise pytest.UsageError(
                f"{name} runs Spark: add it to SPARK_MODULES in tests/conftest.py"
            )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Whole modules in the order of their turn, the long ones of a turn first; a stable
    sort, so other modules of one turn, and each module's tests, keep their order."""
    turn = _module_turns(items)
    _check_groups(items, turn)
    items.sort(
        key=lambda item: (turn[item.path], LONG_RANK.get(_module_name(item), len(LONG_RANK)))
    )
    LOCAL_SPARK_MODULES.update(path for path, at in turn.items() if at == LOCAL_SPARK_TURN)


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


#: Modules far longer than the others whose tests make nothing once per module: each
#: test function (its parametrised cases together) is a unit of its own, spread over
#: the workers. As one unit, tests/runner/worker/tasks/test_feed.py alone kept a worker busy
#: for 14 minutes of a loaded run (-n 2, runner/worker with checkpoint, contract and
#: project: 850 s of 2,658 s).
SPREAD_MODULES = frozenset({"tests/runner/worker/tasks/test_feed.py"})


class ModuleGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """xdist's ``loadfile`` with the modules of :data:`SPARK_MODULES` joined into one
    unit (those of :data:`SPREAD_MODULES` split by test function): a module's fixtures
    (a demo run, a Spark session) are made once, on one worker, and all the Spark work
    runs one module at a time. The units go out in the order of the run
    (``--no-loadscope-reorder``), the Spark unit first."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        if module in SPARK_MODULES:
            return SPARK_GROUP
        if module in SPREAD_MODULES:
            return nodeid.split("[", 1)[0]
        return module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ModuleGroupScheduling:
    return ModuleGroupScheduling(config, log)


# --------------------------------------------------------------------------- local Spark

#: The fixture of the run's one local SparkSession (the migration sample's settings, which
#: tests/jobs/spark/test_spark.py's jobs share so that they find it and start no other).
LOCAL_SPARK = "local_spark"
LOCAL_SPARK_SETTINGS = SparkSettings.for_job(MigrateOrders, environ={})
#: The modules of tests asking for it (set at collection).
LOCAL_SPARK_MODULES: set[Path] = set()


@pytest.fixture
def local_spark() -> Any:
    """This process's local SparkSession: started by the first test asking for it, kept
    while the run stays in the modules that ask (they run one after the other), stopped
    after their last test (:func:`pytest_runtest_teardown`), so a later Spark Connect
    client in this process starts clean."""
    return spark_session(LOCAL_SPARK_SETTINGS)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if item.path in LOCAL_SPARK_MODULES and (
        nextitem is None or nextitem.path not in LOCAL_SPARK_MODULES
    ):
        stop_spark()
