"""Injected storage faults in a worker process (``RUNNER_FAULTS``), for chaos runs.

:func:`injected_faults` wraps a worker's storage in
:class:`~checkpoint.testing.faults.FaultyStorage` when a fault spec is given, seeded per
process (the spec's seed plus the pid, so workers sharing one spec fail differently),
and keeps the counts of calls and faults in a JSON file while the worker runs: every few
seconds and once more at a clean exit, so the counts of a SIGKILLed worker are mostly
kept. The environment itself is read by :mod:`runner.worker.supervisor`, in one place,
which loads this module by name only when ``RUNNER_FAULTS`` is set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from checkpoint.storage import Storage
from checkpoint.testing.faults import FaultyStorage, parse_fault_spec

log = logging.getLogger(__name__)

#: How often a worker rewrites its fault counts file.
REPORT_INTERVAL_SECONDS = 2.0


def report_path(prefix: str, pid: int | None = None) -> Path:
    """The counts file of process ``pid`` (this one by default): ``<prefix>.<pid>``."""
    return Path(f"{prefix}.{os.getpid() if pid is None else pid}")


@contextlib.contextmanager
def injected_faults(storage: Storage, spec: str, report_prefix: str) -> Iterator[Storage]:
    """``storage`` as is if ``spec`` is empty, else wrapped to fail as ``spec`` says.

    Args:
        storage: the opened storage of this worker.
        spec: ``RUNNER_FAULTS`` text (see :func:`checkpoint.testing.faults.parse_fault_spec`).
        report_prefix: ``RUNNER_FAULTS_REPORT``; empty for no counts file.
    """
    if not spec.strip():
        yield storage
        return
    plan = parse_fault_spec(spec)
    plan = dataclasses.replace(plan, seed=plan.seed + os.getpid())
    faulty = FaultyStorage(storage, plan)
    low, high = plan.delay_seconds
    log.warning(
        "injecting storage faults (RUNNER_FAULTS): busy %g%%, ambiguous %g%%, delayed %g%% "
        "(%g-%g s), seed %d",
        plan.busy * 100,
        plan.ambiguous * 100,
        plan.delayed * 100,
        low,
        high,
        plan.seed,
    )
    if plan.outage is not None:
        log.warning("storage outages announced in %s are injected too", plan.outage.path)
    writer = _CountsWriter(faulty, report_path(report_prefix)) if report_prefix else None
    if writer is not None:
        writer.start()
    try:
        yield faulty.storage
    finally:
        if writer is not None:
            writer.stop()


class _CountsWriter(threading.Thread):
    """Rewrites the counts file every :data:`REPORT_INTERVAL_SECONDS` until stopped."""

    def __init__(self, faulty: FaultyStorage, path: Path):
        super().__init__(name="fault-counts", daemon=True)
        self._faulty, self._path = faulty, path
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(REPORT_INTERVAL_SECONDS):
            self.write()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)
        self.write()

    def write(self) -> None:
        # Written aside and renamed: a reader (or a SIGKILL) never sees half a file.
        scratch = self._path.with_name(f".{self._path.name}.tmp")
        try:
            scratch.write_text(json.dumps(self._faulty.counts.snapshot()))
            os.replace(scratch, self._path)
        except OSError as error:
            log.warning("cannot write fault counts to %s: %s", self._path, error)
