"""A small chaos run on each backend: real workers, a SIGKILL, storage faults, and the
correctness targets of ``make chaos`` (not its timing).

10 chunks of 20 items on 2 workers, one worker SIGKILLed mid-run (and replaced), faults
at 5 % busy, 3 % ambiguous and 5 % delayed (0.1-0.5 s) per storage request: through
the workers' ``RUNNER_FAULTS`` wrapper on the embedded store, through a fault proxy on
Azurite. Then a short storage outage (every request of the workers refused, or
hanging, for 6 s mid-run) on each backend. The full runs are ``make chaos``
(RELIABILITY.md), the outage there 60 s long.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.backends import BACKENDS
from tests.chaos.chaos import ChaosPlan, run_once
from tests.chaos.run import details

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
    missed = [
        f"{what}: {value} (target {target})"
        for what, target, value, ok in result.targets()
        if not ok
    ]
    told = "\n".join([*missed, *details("run", result), f"faults: {dict(result.faults)}"])
    assert not missed, told
    assert result.kills == 1, told
    assert sum(result.faults.values()) > 0, told


OUTAGE = ChaosPlan(
    items=200,
    chunks=10,
    workers=2,
    kills=0,
    stops=0,
    busy=0.0,
    ambiguous=0.0,
    delayed=0.0,
    seed=3,
    item_seconds=0.02,
    deadline_seconds=60.0,
    outage_seconds=6.0,
    outage_after_seconds=0.5,
)


@pytest.mark.parametrize("mode", ["refused", "hanging"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_storage_outage_mid_run_loses_nothing_and_the_job_goes_on_after_it(
    backend: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
):
    # Given the store out of reach of the workers for 6 s (more than a lease) mid-run
    plan = dataclasses.replace(OUTAGE, backend=backend, outage_mode=mode)
    server = request.getfixturevalue("azurite") if backend == "azurite" else None

    # When the job runs through it
    result = run_once(plan, tmp_path / "run", server, log=lambda line: None)

    # Then the workers stayed up, nothing was lost, finalize ran once, and the job went
    # on within two leases of the store's return
    missed = [
        f"{what}: {value} (target {target})"
        for what, target, value, ok in result.targets()
        if not ok
    ]
    told = "\n".join([*missed, *details("run", result), f"faults: {dict(result.faults)}"])
    assert not missed, told
    assert result.faults[mode] > 0, told
