"""The pipeline hand-off benchmark still runs: one short run on the embedded store with
a real worker process, and its row. Nothing here asserts a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench import handoff
from tests.bench.handoff import HandOff


def test_a_short_run_measures_the_hand_off_and_the_reference(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(handoff, "IDLE_SECONDS", 0.2)
    hand_offs, manual = handoff.run_backend(str(tmp_path / "store"), tmp_path, 1, 2, 10)

    [one] = hand_offs
    # The dependent was planned after the first step's last chunk, and ran after that
    assert 0 < one.to_planning <= one.to_first_chunk
    assert len(manual) == 1 and manual[0] > 0


def test_the_row_gives_medians_and_whether_the_target_is_met():
    quick = [HandOff(0.4, 0.6), HandOff(0.5, 0.9), HandOff(0.3, 0.5)]
    assert handoff.row("embedded", quick, [0.3, 0.3, 0.4]) == (
        "| embedded | 0.40 (0.30-0.50) | 0.60 (0.50-0.90) | 0.30 (0.30-0.40) | met |"
    )
    slow = [HandOff(2.0, handoff.TARGET_SECONDS + 0.5)]
    assert handoff.row("azurite", slow, [1.0]).endswith("| **not met** |")


@pytest.mark.parametrize("state", ["failed", "cancelled"])
def test_a_run_whose_step_ends_otherwise_says_so(state: str):
    class Store:
        def get_job(self, job_id: str):
            return type("Job", (), {"state": state})()

    with pytest.raises(RuntimeError, match=f"ended {state}"):
        handoff._wait_done(Store(), "j")  # type: ignore[arg-type]
