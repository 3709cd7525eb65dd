"""``RUNNER_FAULTS`` in a worker: storage wrapped, seeded per process, counts kept."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError
from checkpoint.testing import injected
from checkpoint.testing.injected import injected_faults, report_path


def test_no_spec_leaves_storage_alone(tmp_path):
    with open_storage(str(tmp_path / "store")) as storage:
        with injected_faults(storage, " ", str(tmp_path / "faults")) as used:
            assert used is storage
    assert not list(tmp_path.glob("faults*"))


def test_spec_wraps_storage_logs_once_and_writes_counts_at_exit(tmp_path, caplog):
    prefix = str(tmp_path / "faults")
    with open_storage(str(tmp_path / "store")) as storage, caplog.at_level(logging.WARNING):
        with injected_faults(storage, "busy=0,seed=7", prefix) as used:
            used.queues.create_queue("chaos-q")
            used.queues.send("chaos-q", b"x")
            assert used is not storage
            assert "with injected faults" in used.description

    counts = json.loads(report_path(prefix).read_text())
    assert counts == {"calls": {"queues.create_queue": 1, "queues.send": 1}, "faults": {}}
    assert report_path(prefix).name == f"faults.{os.getpid()}"
    [line] = [r.getMessage() for r in caplog.records if "injecting" in r.getMessage()]
    assert f"seed {7 + os.getpid()}" in line


def test_counts_are_rewritten_while_the_worker_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(injected, "REPORT_INTERVAL_SECONDS", 0.01)
    prefix = str(tmp_path / "faults")
    with open_storage(str(tmp_path / "store")) as storage:
        with injected_faults(storage, "busy=1", prefix) as used:
            with pytest.raises(Exception, match="injected"):
                used.queues.create_queue("chaos-q")
            for _ in range(500):
                if report_path(prefix).is_file():
                    break
                time.sleep(0.01)
            assert json.loads(report_path(prefix).read_text())["faults"] == {"busy": 1}


def test_a_malformed_spec_is_refused(tmp_path):
    with open_storage(str(tmp_path / "store")) as storage:
        with pytest.raises(ConfigurationError, match="RUNNER_FAULTS"):
            with injected_faults(storage, "busy=lots", ""):
                pass


def test_a_spec_with_an_outage_file_says_so_at_start(tmp_path, caplog):
    spec = f"seed=1,outage_file={tmp_path / 'outage'}"
    with open_storage(str(tmp_path / "store")) as storage, caplog.at_level(logging.WARNING):
        with injected_faults(storage, spec, "") as used:
            used.queues.create_queue("chaos-q")

    assert f"storage outages announced in {tmp_path / 'outage'} are injected too" in caplog.text
