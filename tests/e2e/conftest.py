"""The ``cluster`` fixture: every end-to-end test runs once per backend.

Embedded: a fresh store directory per test, on the real clock. Azurite: the session's
Azurite (see ``tests/conftest.py``), with queue names unique to the test. Whatever
happens in the test, every process it started is killed at teardown.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends import BACKENDS
from tests.e2e.harness import Cluster


@pytest.fixture(params=BACKENDS)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "embedded":
        storage = str(tmp_path / "store")
    else:
        storage = request.getfixturevalue("azurite").connection_string
    workdir = tmp_path / "work"
    workdir.mkdir()
    subject = Cluster(request.param, storage, workdir, uuid.uuid4().hex[:8])
    try:
        yield subject
    finally:
        subject.close()
