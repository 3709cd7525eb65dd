"""The ``world`` fixture of the runner's tests: a worker on one backend and a FakeClock
(tests/runner/world.py), checked at teardown for an interference set up and never met."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.backends import Backend
from tests.runner.world import World, make_world


@pytest.fixture
def world(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    yield from make_world(backend, monkeypatch)
