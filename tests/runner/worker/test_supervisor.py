"""``runner start``'s worker process and its one optional seam: the fault injector of
chaos runs (``RUNNER_FAULTS``) is test machinery, loaded by name only when asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint.backends import open_storage
from runner.worker import supervisor
from tests.e2e.processes import ROOT
from tests.runner.cli.invoke import run_runner

#: The test machinery a worker must not load unless ``RUNNER_FAULTS`` asks for it.
FAULT_MODULES = {"checkpoint.testing", "checkpoint.testing.faults", supervisor.FAULT_INJECTOR}
SUMS = (
    "from jobs import ChunkedJob\n\n\nclass Sums(ChunkedJob):\n"
    "    queue = 'sums'\n\n"
    "    def split(self, params):\n        return [params]\n\n"
    "    def process(self, chunk):\n        return chunk.payload\n"
)
#: ``runner ARGS`` as the console script runs it, writing the modules it loaded, once it
#: exits, to the file named by its first argument.
PROBE = (
    "import atexit, sys\n"
    "out = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "from runner.cli.entry import main\n"
    "main()\n"
)


def _modules_of_a_burst_worker(folder: Path, faults: str | None) -> set[str]:
    """The modules ``runner start sums:Sums --burst`` loaded running one submitted job."""
    submitted = run_runner(folder, "submit", "sums:Sums", "--params", "3")
    assert submitted.returncode == 0, submitted
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("RUNNER_STORAGE", supervisor.FAULTS_ENV, supervisor.FAULTS_REPORT_ENV):
        env.pop(name, None)
    if faults is not None:
        env[supervisor.FAULTS_ENV] = faults
        env[supervisor.FAULTS_REPORT_ENV] = str(folder / "faults")
    loaded = folder / "modules.txt"
    started = subprocess.run(
        [sys.executable, "-c", PROBE, str(loaded), "start", "sums:Sums", "--burst"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started
    status = run_runner(folder, "status", submitted.stdout.strip(), "--json")
    assert json.loads(status.stdout)["state"] == "done", status
    return set(loaded.read_text().split())


def test_a_worker_without_runner_faults_never_loads_the_fault_injector(tmp_path):
    # Given a job to run, and no RUNNER_FAULTS
    (tmp_path / "sums.py").write_text(SUMS)
    # When a burst worker runs it to the end
    loaded = _modules_of_a_burst_worker(tmp_path, faults=None)
    # Then it loaded the worker's own modules, and none of the test machinery
    assert "runner.worker.supervisor" in loaded
    assert not loaded & FAULT_MODULES


def test_a_worker_with_runner_faults_loads_it_and_injects(tmp_path):
    # Given the same, with RUNNER_FAULTS set (no fault drawn: the job runs as before)
    (tmp_path / "sums.py").write_text(SUMS)
    # When a burst worker runs it
    loaded = _modules_of_a_burst_worker(tmp_path, faults="seed=1")
    # Then the injector was loaded by name, and wrapped the storage: its counts are kept
    assert FAULT_MODULES <= loaded
    [report] = tmp_path.glob("faults.*")
    assert json.loads(report.read_text())["calls"]


def test_no_spec_leaves_storage_alone_without_loading_the_injector(tmp_path, monkeypatch):
    # The injector cannot be imported here: a spec-less worker must not try to.
    for name in FAULT_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    with open_storage(str(tmp_path / "store")) as storage:
        with supervisor.storage_faults(storage, " ", str(tmp_path / "faults")) as used:
            assert used is storage
        with pytest.raises(ImportError, match=supervisor.FAULT_INJECTOR):
            supervisor.storage_faults(storage, "seed=1", "")


def test_a_spec_loads_the_injector_by_name_and_wraps(tmp_path):
    with open_storage(str(tmp_path / "store")) as storage:
        with supervisor.storage_faults(storage, "seed=1", "") as used:
            assert used is not storage
            assert "with injected faults" in used.description
