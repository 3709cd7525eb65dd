"""``runner start``: one or more worker processes, and what signals do to them.

Signal handlers only set flags. First SIGTERM/SIGINT: each worker stops receiving,
running chunks stop at their next checkpoint (flushed, message released with
visibility 0 so another worker resumes at once), bounded by ``stop_timeout_seconds``.
Second signal: exit at once (leases lapse on their own).

With ``--workers N > 1`` the parent spawns N worker processes in their own sessions
(so a terminal's Ctrl-C reaches only the parent, which forwards one SIGTERM) and exits
with the worst of their exit codes. It reports a worker that dies and starts another in
its place after a backoff; workers get SIGTERM when the parent dies, even by SIGKILL,
so none is left running as an orphan.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType

import setproctitle
from prometheus_client import CollectorRegistry

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.errors import RunnerError
from checkpoint.metering import metered
from checkpoint.storage import Storage
from jobs.backoff import Backoff, compute_backoff
from jobs.job import ChunkedJob
from jobs.registry import load_job_class
from runner.worker.loop import EXIT_ERROR, EXIT_FORCED, EXIT_OK, WorkerLoop, WorkerSettings
from runner.worker.observing import logs
from runner.worker.observing.logs import LogFormat
from runner.worker.observing.metrics import PrometheusRecorder
from runner.worker.observing.metrics_server import MetricsAddress, Serving, serving
from runner.worker.observing.recorder import SILENT
from runner.worker.signal_safe import off_signal

log = logging.getLogger(__name__)

#: Storage faults to inject in each worker (chaos runs; docs/cli.md): a spec such as
#: ``busy=0.05,ambiguous=0.03,delayed=0.05,seed=7``, and where to keep their counts.
FAULTS_ENV = "RUNNER_FAULTS"
FAULTS_REPORT_ENV = "RUNNER_FAULTS_REPORT"
#: The module that injects them, test machinery (:mod:`checkpoint.testing`): loaded by
#: name when ``RUNNER_FAULTS`` is set, never otherwise (:func:`storage_faults`).
FAULT_INJECTOR = "checkpoint.testing.injected"

#: Waits before a dead worker's place is filled again: 1, 2, 4 ... s, up to a minute.
RESTART_BACKOFF = Backoff(first_seconds=1.0, multiplier=2.0, max_seconds=60.0, jitter=0.5)
#: A worker that ran this long before dying starts the backoff afresh.
STABLE_SECONDS = 60.0
#: A worker's exit code saying it cannot run here at all (sysexits' EX_CONFIG): the
#: parent stops the others and exits 1 instead of restarting it.
_EXIT_UNUSABLE = 78
#: prctl(2) option: the signal this process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def configure_logging(level: str, log_format: LogFormat = "text") -> None:
    """Log at ``level`` to stderr in ``log_format`` (:mod:`runner.worker.observing.logs`); the Azure
    SDK's per-request HTTP logs only at DEBUG (at INFO they bury the runner's own lines under
    ~20 lines per storage call)."""
    logging.basicConfig(level=level, handlers=[logs.handler(log_format)], force=True)
    quiet_sdk_logs(level)


def quiet_sdk_logs(level: str) -> None:
    """Below DEBUG, the Azure SDK logs only its warnings, and azure-identity none: its
    WARNING is a dozen lines per failed token ("Attempted credentials: ..."), which our
    own error says in one. Every command sets this (without handlers, Python prints a
    WARNING on stderr as it is); ``--log-level debug`` shows it all."""
    debug = logging.getLevelNamesMapping().get(level) == logging.DEBUG
    logging.getLogger("azure").setLevel(logging.NOTSET if debug else logging.WARNING)
    logging.getLogger("azure.identity").setLevel(logging.NOTSET if debug else logging.ERROR)


@dataclass(frozen=True)
class StartOptions:
    """Everything a worker process needs to start (picklable for spawn)."""

    job_paths: tuple[str, ...]
    #: The ``--storage`` text as given: it may hold a secret, so no repr shows it.
    storage: str | None = field(repr=False)
    settings: WorkerSettings
    log_level: str = "INFO"
    log_format: LogFormat = "text"
    #: Where ``runner start`` serves Prometheus metrics; None: no metrics.
    metrics: MetricsAddress | None = None


def run_in_this_process(
    options: StartOptions, name: str | None = None, metrics: PrometheusRecorder | None = None
) -> int:
    """Run one worker here until it stops; install the signal handlers. A worker process
    of ``--workers N`` (``name``: ``worker-1`` ...) is titled for ``ps`` and ``top``:
    ``runner worker-1 QUEUE``. ``metrics``: what keeps this worker's metrics, its
    storage requests metered too."""
    # The handlers go in first: a SIGTERM while the worker starts (its store opening,
    # say) stops it cleanly once its loop exists, instead of killing it outright.
    signals = {"count": 0}
    loops: list[WorkerLoop] = []

    def on_signal(number: int, frame: FrameType | None) -> None:
        signals["count"] += 1
        if signals["count"] > 1:
            os._exit(EXIT_FORCED)
        for started in loops:
            # Off this thread: the loop's main thread may be inside an Event.wait.
            off_signal(started.request_stop, "stop-request")

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)
    classes = [load_job_class(path) for path in options.job_paths]
    if name is not None:
        setproctitle.setproctitle(" ".join(["runner", name, *(cls.queue for cls in classes)]))
    faults = os.environ.get(FAULTS_ENV, ""), os.environ.get(FAULTS_REPORT_ENV, "")
    with open_storage(options.storage) as opened, storage_faults(opened, *faults) as storage:
        if metrics is not None:
            storage = metered(storage, metrics)
        loop = WorkerLoop(storage, classes, options.settings, recorder=metrics or SILENT)
        loops.append(loop)
        if signals["count"]:
            loop.request_stop()
        with logs.worker_ids(loop.worker_id):
            log.info(
                "worker %s serving %s on %s",
                loop.worker_id,
                ", ".join(cls.queue for cls in classes),
                storage.description,
            )
            code = loop.run()
            log.info("worker %s stopped (exit %d)", loop.worker_id, code)
        return code


def storage_faults(
    storage: Storage, spec: str, report_prefix: str
) -> AbstractContextManager[Storage]:
    """``storage`` as is without a ``RUNNER_FAULTS`` spec, else wrapped to fail as it says.

    The optional loading seam of the test machinery: :data:`FAULT_INJECTOR` is resolved
    by name here, and only here, when a spec is given, so a worker that injects no
    faults never loads it (nor anything of :mod:`checkpoint.testing`). Not a cycle
    dodged: the injector imports nothing of ``runner``.
    """
    if not spec.strip():
        return contextlib.nullcontext(storage)
    injector = importlib.import_module(FAULT_INJECTOR)
    inject: Callable[[Storage, str, str], AbstractContextManager[Storage]]
    inject = injector.injected_faults
    return inject(storage, spec, report_prefix)


def _child(options: StartOptions, parent_pid: int) -> None:
    os.setsid()
    _die_with_parent(parent_pid)
    configure_logging(options.log_level, options.log_format)
    # Multiprocess values (the parent set PROMETHEUS_MULTIPROC_DIR before the spawn):
    # this registry only owns the names; the parent serves what the files hold.
    metrics = PrometheusRecorder(CollectorRegistry()) if options.metrics else None
    try:
        code = run_in_this_process(options, multiprocessing.current_process().name, metrics)
    except RunnerError as error:  # a setting, a credential, a job: restarting won't help
        log.debug("worker failed", exc_info=True)
        log.error("worker failed: %s", error)
        code = _EXIT_UNUSABLE
    except Exception as error:  # noqa: BLE001 - still one line; the traceback at DEBUG
        log.debug("worker failed", exc_info=True)
        log.error("worker failed: unexpected %s: %s", type(error).__name__, error)
        code = EXIT_ERROR
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGTERM this worker when its parent dies, however it dies.

    A SIGKILLed parent runs no handler and could tell nobody: without this its workers
    would run on as orphans, unseen by whoever restarts the parent. SIGTERM, not
    SIGKILL: the worker still saves its chunks' state and hands their messages back.
    """
    if not sys.platform.startswith("linux"):
        return  # elsewhere the parent's own signal handlers are all there is
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("cannot ask to be stopped with the parent: errno %d", ctypes.get_errno())
    if os.getppid() != parent_pid:  # the parent died before the request was made
        os._exit(EXIT_ERROR)


def _unnoted(pid: int) -> None:
    """A worker's exit, when nothing needs to know of it."""


@dataclass
class _Worker:
    """One of the N worker processes, and the restarts of its place."""

    name: str
    process: BaseProcess | None = None
    started_at: float = 0.0
    deaths: int = 0  # in a row, each within STABLE_SECONDS of its start
    restart_at: float | None = None
    exit_code: int | None = None  # set once this place is done for good


def run_workers(options: StartOptions, workers: int, restart: bool = True) -> int:
    """Run ``workers`` processes (this one if 1) until they stop; the worst exit code.

    A worker that dies (a non-zero exit, a signal nobody sent through this parent) is
    reported in one line and, with ``restart``, replaced after a backoff of
    :data:`RESTART_BACKOFF` (reset once a worker has run :data:`STABLE_SECONDS`).
    With ``options.metrics`` their metrics are served meanwhile, as one endpoint
    (:mod:`runner.worker.observing.metrics_server`).
    """
    # Fail here, once, before any process starts.
    classes = [load_job_class(path) for path in options.job_paths]
    if options.metrics is None:
        return _run(options, workers, restart, None)
    with serving(options.metrics, options.storage, _queues(classes), workers) as metrics:
        return _run(options, workers, restart, metrics)


def _queues(classes: list[type[ChunkedJob]]) -> list[str]:
    """The queues whose message counts the metrics show: each job type's queues, its
    resume queue and their poison queues, and its intake and rejected queues if it
    takes submissions."""
    names: list[str] = []
    for cls in classes:
        for queue in cls.chunk_queues():
            names += (queue, layout.poison_queue_of(queue))
        names.append(cls.resume_queue())
        if cls.intake:
            names += (cls.intake_queue(), cls.rejected_queue())
    return names


def _run(options: StartOptions, workers: int, restart: bool, metrics: Serving | None) -> int:
    if workers == 1:
        if metrics is not None:
            metrics.workers_alive(1)
        return run_in_this_process(options, metrics=metrics.recorder if metrics else None)
    context = multiprocessing.get_context("spawn")
    places = [_Worker(f"worker-{n + 1}") for n in range(workers)]
    signals = {"count": 0}

    def launch(place: _Worker) -> None:
        place.process = context.Process(target=_child, args=(options, os.getpid()), name=place.name)
        place.process.start()
        place.started_at, place.restart_at = time.monotonic(), None

    def on_signal(number: int, frame: FrameType | None) -> None:
        signals["count"] += 1
        for place in places:
            process = place.process
            if process is not None and process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGKILL if signals["count"] > 1 else signal.SIGTERM)

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)
    for place in places:
        launch(place)
    rng = random.Random()
    unusable = False
    exited = metrics.exited if metrics is not None else _unnoted
    while any(place.exit_code is None for place in places):
        running = [p.process.sentinel for p in places if p.process and p.process.exitcode is None]
        if metrics is not None:
            metrics.workers_alive(len(running))
        multiprocessing.connection.wait(running, timeout=0.5)
        for place in places:
            stopping = bool(signals["count"]) or unusable
            _look_after(place, stopping, restart, rng, launch, exited)
            if place.exit_code == _EXIT_UNUSABLE and not unusable:
                unusable = True
                log.error("%s cannot run here (see its error); stopping the others", place.name)
                on_signal(signal.SIGTERM, None)
    if unusable:
        return EXIT_ERROR
    if signals["count"] > 1:
        return EXIT_FORCED
    return max(place.exit_code or EXIT_OK for place in places)


def _look_after(
    place: _Worker,
    stopping: bool,
    restart: bool,
    rng: random.Random,
    launch: Callable[[_Worker], None],
    exited: Callable[[int], None] = _unnoted,
) -> None:
    """Note a worker's exit (``exited(pid)``, once), report a death, restart it when its
    backoff is over."""
    now = time.monotonic()
    if place.restart_at is not None:
        if stopping:
            place.exit_code = EXIT_OK  # died earlier; nothing left to stop
        elif now >= place.restart_at:
            log.info("restarting %s", place.name)
            launch(place)
        return
    process = place.process
    if place.exit_code is not None or process is None or process.exitcode is None:
        return
    if process.pid is not None:
        exited(process.pid)
    code = _exit_code(process.exitcode)
    if stopping and process.exitcode == -signal.SIGTERM:
        # The SIGTERM this parent passed on reached it before its handler was in place
        # (still starting: nothing of a chunk was running); a stop as asked.
        code = EXIT_OK
    if code in (EXIT_OK, _EXIT_UNUSABLE) or stopping:
        place.exit_code = code  # finished (burst), stopped as asked, or cannot run
        return
    log.error("%s (pid %s) died: %s", place.name, process.pid, _how(process.exitcode))
    if not restart:
        place.exit_code = code
        return
    place.deaths = 1 if now - place.started_at >= STABLE_SECONDS else place.deaths + 1
    wait = compute_backoff(RESTART_BACKOFF, place.deaths, rng)
    log.info("%s restarts in %d s", place.name, wait)
    place.restart_at = now + wait


def _how(exitcode: int) -> str:
    if exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _exit_code(code: int | None) -> int:
    if code is None:
        return EXIT_ERROR
    return code if code >= 0 else 128 - code  # killed by signal N -> 128 + N
