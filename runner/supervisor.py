"""``runner start``: one or more worker processes, and what signals do to them.

Signal handlers only set flags. First SIGTERM/SIGINT: each worker stops receiving,
running chunks stop at their next checkpoint (flushed, message released with
visibility 0 so another worker resumes at once), bounded by ``stop_timeout_seconds``.
Second signal: exit at once (leases lapse on their own).

With ``--workers N > 1`` the parent spawns N worker processes in their own sessions
(so a terminal's Ctrl-C reaches only the parent, which forwards one SIGTERM) and exits
with the worst of their exit codes.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass
from types import FrameType

from checkpoint.backends import open_storage
from jobs.registry import load_job_class
from runner.faults import injected_faults
from runner.loop import EXIT_ERROR, EXIT_FORCED, WorkerLoop, WorkerSettings

log = logging.getLogger(__name__)

#: Storage faults to inject in each worker (chaos runs; docs/cli.md): a spec such as
#: ``busy=0.05,ambiguous=0.03,delayed=0.05,seed=7``, and where to keep their counts.
FAULTS_ENV = "RUNNER_FAULTS"
FAULTS_REPORT_ENV = "RUNNER_FAULTS_REPORT"

LOG_FORMAT = "%(asctime)s %(levelname)s [%(processName)s] %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """Log at ``level``; the Azure SDK's per-request HTTP logs only at DEBUG (at INFO
    they bury the runner's own lines under ~20 lines per storage call)."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    if logging.getLevelName(level) != logging.DEBUG:
        logging.getLogger("azure").setLevel(logging.WARNING)


@dataclass(frozen=True)
class StartOptions:
    """Everything a worker process needs to start (picklable for spawn)."""

    job_paths: tuple[str, ...]
    storage: str | None
    settings: WorkerSettings
    log_level: str = "INFO"


def run_in_this_process(options: StartOptions) -> int:
    """Run one worker here until it stops; install the signal handlers."""
    classes = [load_job_class(path) for path in options.job_paths]
    faults = os.environ.get(FAULTS_ENV, ""), os.environ.get(FAULTS_REPORT_ENV, "")
    with open_storage(options.storage) as opened, injected_faults(opened, *faults) as storage:
        loop = WorkerLoop(storage, classes, options.settings)
        signals = {"count": 0}

        def on_signal(number: int, frame: FrameType | None) -> None:
            signals["count"] += 1
            if signals["count"] > 1:
                os._exit(EXIT_FORCED)
            loop.request_stop()

        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, on_signal)
        log.info(
            "worker %s serving %s on %s",
            loop.worker_id,
            ", ".join(cls.queue for cls in classes),
            storage.description,
        )
        code = loop.run()
        log.info("worker %s stopped (exit %d)", loop.worker_id, code)
        return code


def _child(options: StartOptions) -> None:
    os.setsid()
    configure_logging(options.log_level)
    try:
        code = run_in_this_process(options)
    except Exception:
        log.exception("worker failed")
        code = EXIT_ERROR
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_workers(options: StartOptions, workers: int) -> int:
    """Run ``workers`` processes (this one if 1) until they stop; the worst exit code."""
    for path in options.job_paths:
        load_job_class(path)  # fail here, once, before any process starts
    if workers == 1:
        return run_in_this_process(options)
    context = multiprocessing.get_context("spawn")
    children = [
        context.Process(target=_child, args=(options,), name=f"worker-{n + 1}")
        for n in range(workers)
    ]
    for child in children:
        child.start()
    signals = {"count": 0}

    def on_signal(number: int, frame: FrameType | None) -> None:
        signals["count"] += 1
        for child in children:
            if child.pid is not None and child.exitcode is None:
                os.kill(child.pid, signal.SIGKILL if signals["count"] > 1 else signal.SIGTERM)

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)
    for child in children:
        while child.exitcode is None:
            child.join(timeout=0.5)
    if signals["count"] > 1:
        return EXIT_FORCED
    return max(_exit_code(child.exitcode) for child in children)


def _exit_code(code: int | None) -> int:
    if code is None:
        return EXIT_ERROR
    return code if code >= 0 else 128 - code  # killed by signal N -> 128 + N
