"""A small chaos run on each backend: real workers, a SIGKILL, storage faults, and the
correctness targets of ``make chaos`` (not its timing).

10 chunks of 20 items on 2 workers, one worker SIGKILLed mid-run (and replaced), faults
at 5 % busy, 3 % ambiguous and 5 % delayed (0.1-0.5 s) per storage request: through
the workers' ``RUNNER_FAULTS`` wrapper on the embedded store, through a fault proxy on
Azurite. The full runs are ``make chaos`` (RELIABILITY.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.chaos import ChaosPlan, run_once
from tests.chaos.run import details
from tests.conftest import BACKENDS

SMALL = ChaosPlan(
    items=200,
    chunks=10,
    workers=2,
    kills=1,
    stops=0,
    busy=0.05,
    ambiguous=0.03,
    delayed=0.05,
    delay_seconds=(0.1, 0.5),
    seed=3,
    item_seconds=0.02,
    deadline_seconds=50.0,
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_chaos_run_meets_the_correctness_targets(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
):
    # Given the small plan on this backend (the session's Azurite behind fault proxies)
    plan = ChaosPlan(**{**SMALL.__dict__, "backend": backend})
    server = request.getfixturevalue("azurite") if backend == "azurite" else None

    # When it runs, one worker killed on the way
    result = run_once(plan, tmp_path / "run", server, log=lambda line: None)

    # Then every correctness target is met, and faults really were injected
    missed = [f"{what}: {value} (target {target})"
              for what, target, value, ok in result.targets() if not ok]
    told = "\n".join([*missed, *details("run", result), f"faults: {dict(result.faults)}"])
    assert not missed, told
    assert result.kills == 1, told
    assert sum(result.faults.values()) > 0, told
