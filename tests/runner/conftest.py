"""The fixtures of the runner's tests: ``world``, a worker on one backend and a FakeClock
(tests/runner/world.py), checked at teardown for an interference set up and never met;
``real_clock_storage``, each backend on the real clock, for worker loops run whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoint.backends import open_storage
from checkpoint.storage import Storage
from tests.backends import BACKENDS, Backend
from tests.runner.world import World, make_world


@pytest.fixture
def world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    yield from make_world(backend, monkeypatch)


@pytest.fixture(params=BACKENDS)
def real_clock_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """Each backend on the real clock: worker loops wait out real visibility times (the
    contract suite's embedded store runs on a fake clock, which nothing advances there)."""
    if request.param == "embedded":
        opened = open_storage(str(tmp_path / "store"))
    else:
        server = request.getfixturevalue("azurite")
        opened = open_storage(server.connection_string, azure_retry_total=1)
    yield opened
    opened.close()
