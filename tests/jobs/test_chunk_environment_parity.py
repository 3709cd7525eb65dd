"""``jobs.testing.ChunkEnvironment`` behaves exactly as the runner's TaskControl: the same
steps played on both raise the same thing at the same step and write the same states."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import LeaseLost
from checkpoint.store import CheckpointStore
from jobs.errors import ChunkStopped
from jobs.testing import ChunkEnvironment
from runner.worker.leases.lease import Lease
from runner.worker.tasks.control import TaskControl
from tests.jobs.harness_jobs import CountRows


class RecordingStore(CheckpointStore):
    """The real store, noting each progress value written."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.progress: list[Any] = []

    def write_task(self, task: Any, changes: Any, values: Any = None, **kwargs: Any) -> Any:
        values = values or {}
        written = super().write_task(task, changes, values, **kwargs)
        if "progress" in values:
            self.progress.append(values["progress"])
        return written


SCRIPTS = {
    "steady": [
        ("offer", 1),
        ("advance", 2),
        ("check",),
        ("offer", 2),
        ("advance", 3),
        ("offer", 3),
        ("check",),
        ("offer", 4),
        ("advance", 5),
        ("offer", 5),
        ("offer", 6),
        ("check",),
    ],
    "stop": [
        ("offer", 1),
        ("advance", 1),
        ("offer", 2),
        ("check",),
        ("stop",),
        ("offer", 3),
        ("check",),
    ],
    "lose-then-due": [("offer", 1), ("lose",), ("advance", 6), ("offer", 2), ("check",)],
    "lose-then-check": [
        ("offer", 1),
        ("advance", 6),
        ("offer", 2),
        ("offer", 3),
        ("lose",),
        ("check",),
        ("stop",),
        ("check",),
    ],
    "stop-and-lose": [("offer", 1), ("stop",), ("lose",), ("check",)],
    "stop-nothing-new": [("advance", 5), ("offer", 1), ("stop",), ("check",)],
}


def _play(
    script: list[tuple[Any, ...]], clock: FakeClock, control: Any, lose: Any, stop: Any
) -> list[str | None]:
    outcomes: list[str | None] = []
    for step, *args in script:
        try:
            if step == "offer":
                control.offer(args[0])
            elif step == "check":
                control.raise_if_stopped()
            elif step == "advance":
                clock.advance(args[0])
            elif step == "lose":
                lose()
            else:
                stop()
            outcomes.append(None)
        except (LeaseLost, ChunkStopped) as error:
            outcomes.append(type(error).__name__)
    return outcomes


@pytest.fixture
def runner_control(tmp_path: Path) -> Iterator[Any]:
    """A TaskControl over a claimed chunk on the embedded store, and its levers."""
    clock = FakeClock()
    storage = open_storage(str(tmp_path / "store"), clock=clock)
    store = RecordingStore(storage, clock)
    store.create_job("parity", "tests:Job", "jobs-q", {})
    store.add_chunks("parity", 0, [{}])
    task = store.write_task(store.get_task("parity", "chunk", 0), {"state": "running"})
    now = clock.monotonic()
    lease = Lease("jobs-q", "m", "r", 60, acquired_at=now, visible_at=now + 60)
    stopping = threading.Event()
    control = TaskControl(store, task, lease, clock, 5.0, stopping)
    yield clock, control, store, lambda: lease.lose("lost"), stopping.set
    storage.close()


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_behaves_exactly_like_the_runners_task_control(script, runner_control):
    # Given the same steps played on the runner's TaskControl and on the harness
    clock, control, store, lose, stop = runner_control
    runner_outcomes = _play(script, clock, control, lose, stop)
    env_clock = FakeClock()
    env = ChunkEnvironment(CountRows, clock=env_clock, checkpoint_interval_seconds=5.0)
    env_outcomes = _play(script, env_clock, env, env.lose_lease, env.stop)

    # Then both raise the same thing at the same step and write the same states
    assert env_outcomes == runner_outcomes
    assert env.durable == store.progress
    assert env.stopping == control.stopping
