"""``runner status --watch``: read a snapshot every few seconds and draw it.

On a terminal the view is redrawn in place (rich's ``Live``); anywhere else (a pipe, a
file, CI) each refresh prints one plain line per job (:mod:`runner.cli.watch_lines`), so
``--watch`` also works as a progress log. The rate of each job (chunks per second,
counting the fractions running chunks said they are done) is measured over the last
:data:`RATE_WINDOW_SECONDS` of refreshes, and the ETA is what is left at that rate; until
the refreshes span :data:`RATE_SETTLED_SECONDS`, the rate is the one the store gives
(since the job's work began, :mod:`runner.cli.pace`), so the first view has one. A
refresh that fails (the store out of reach, the job deleted meanwhile) keeps the last
view, saying so, and the next one tries again.

Stopping is the caller's: ``stop`` is an event its SIGINT handler sets, so the view
ends between two refreshes, never half-drawn.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

from rich.console import Console
from rich.live import Live

from checkpoint.errors import RunnerError
from checkpoint.store import CheckpointStore
from runner.cli.selection import DEFAULT_LISTING, Listing
from runner.cli.snapshot import read_snapshot
from runner.cli.status_types import AnyJob, JobStatus, Rate, Snapshot, WatchFrame
from runner.cli.watch_lines import active_jobs, plain_lines
from runner.cli.watch_view import ENDED_STATES, MAX_ENDED_JOBS, render_watch
from runner.worker.signal_safe import off_signal

DEFAULT_INTERVAL_SECONDS = 2.0
MIN_INTERVAL_SECONDS = 0.2

#: Refreshes older than this do not count toward a job's rate.
RATE_WINDOW_SECONDS = 60.0
#: The least time between the first and last refresh of the window to give a rate.
RATE_MIN_SPAN_SECONDS = 1.0
#: Until the refreshes span this long, the rate the store gives is shown, if it gives
#: one (a few seconds of refreshes may see no chunk end at all).
RATE_SETTLED_SECONDS = 30.0


class Rates:
    """Each job's rate and ETA over the last :data:`RATE_WINDOW_SECONDS` of snapshots."""

    def __init__(self, window_seconds: float = RATE_WINDOW_SECONDS):
        self.window_seconds = window_seconds
        self._seen: dict[str, deque[tuple[float, float]]] = {}

    def observe(self, at: float, jobs: Sequence[AnyJob]) -> dict[str, Rate]:
        """Note the jobs of a snapshot taken at ``at`` (monotonic seconds); return each
        job's rate and ETA (None while unknown)."""
        rates: dict[str, Rate] = {}
        for job in jobs:
            if not isinstance(job, JobStatus):
                continue
            if job.paused and job.state not in ENDED_STATES:
                # No rate while paused, and the pause does not drag the rate down after
                # the resume: the window starts again then.
                self._seen.pop(job.job_id, None)
                rates[job.job_id] = Rate()
                continue
            seen = self._seen.setdefault(job.job_id, deque())
            seen.append((at, _chunks_done(job)))
            while len(seen) > 2 and at - seen[1][0] >= self.window_seconds:
                seen.popleft()  # keep one sample at or before the window's start
            rates[job.job_id] = self._rate(job, seen)
        for gone in set(self._seen) - {job.job_id for job in jobs}:
            del self._seen[gone]  # bounded by the jobs shown
        return rates

    def _rate(self, job: JobStatus, seen: deque[tuple[float, float]]) -> Rate:
        (first_at, first), (last_at, last) = seen[0], seen[-1]
        span = last_at - first_at
        stored = Rate(job.chunks_per_second, job.eta_seconds)
        if span < RATE_MIN_SPAN_SECONDS or (
            span < RATE_SETTLED_SECONDS and stored.chunks_per_second is not None
        ):
            # Too few refreshes to measure: the rate since its work began, as the
            # store says it (runner.cli.pace), so the first view has one too.
            return stored
        rate = max(0.0, (last - first) / span)
        left = max(0.0, job.chunks.total - last)
        ended = job.state in ENDED_STATES
        eta = left / rate if rate > 0 and job.planning_done and not ended else None
        return Rate(chunks_per_second=rate, eta_seconds=eta)


def _chunks_done(job: JobStatus) -> float:
    """Chunks done, counting the fractions the running ones said."""
    fraction, total = job.progress_fraction, job.chunks.total
    return float(fraction * total) if fraction is not None else float(job.chunks.done)


def watch(
    read: Callable[[], Snapshot],
    interval_seconds: float,
    stop: threading.Event,
    console: Console,
    storage: str = "",
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Show ``read()`` every ``interval_seconds`` until ``stop`` is set.

    The first read's errors are raised (a job that does not exist, a store that cannot
    be opened); later ones are shown over the last snapshot.
    """
    rates = Rates()
    frame = _annotated(read(), rates, monotonic(), storage, interval_seconds)
    if not console.is_terminal:
        console.out(f"chunkrunner  {storage}  every {interval_seconds:g} s", highlight=False)
        active: set[str] = set()
        first = True
        while True:
            for line in plain_lines(frame, active, first):
                console.out(line, highlight=False)  # never wrapped, whatever the width
            active, first = active_jobs(frame), False
            if stop.wait(interval_seconds):
                return
            frame = _refreshed(read, frame, rates, monotonic, storage, interval_seconds)
    with Live(render_watch(frame), console=console, auto_refresh=False) as live:
        while not stop.wait(interval_seconds):
            frame = _refreshed(read, frame, rates, monotonic, storage, interval_seconds)
            live.update(render_watch(frame), refresh=True)


def _refreshed(
    read: Callable[[], Snapshot],
    last: WatchFrame,
    rates: Rates,
    monotonic: Callable[[], float],
    storage: str,
    interval_seconds: float,
) -> WatchFrame:
    try:
        return _annotated(read(), rates, monotonic(), storage, interval_seconds)
    except RunnerError as error:  # the store out of reach, the job purged meanwhile, ...
        return replace(last, error=str(error))


def _annotated(
    snapshot: Snapshot, rates: Rates, at: float, storage: str, interval_seconds: float
) -> WatchFrame:
    return WatchFrame(
        snapshot=snapshot,
        rates=rates.observe(at, snapshot.jobs),
        storage=storage,
        interval_seconds=interval_seconds,
    )


def watch_status(
    store: CheckpointStore,
    job_id: str | None,
    interval_seconds: float,
    listing: Listing = DEFAULT_LISTING,
) -> None:
    """``runner status --watch``: the jobs ``listing`` chooses (by default the active
    ones and the last few ended), until the first SIGINT (Ctrl-C), which ends the view
    after the refresh in progress; a second one interrupts at once."""
    listing = replace(listing, recent_ended=MAX_ENDED_JOBS)
    stop = threading.Event()
    signals = {"count": 0}

    def on_signal(number: int, frame: object) -> None:
        signals["count"] += 1
        if signals["count"] > 1:
            raise KeyboardInterrupt
        off_signal(stop.set, "watch-stop")  # the main thread may be inside stop.wait

    previous = signal.signal(signal.SIGINT, on_signal)
    try:
        watch(
            lambda: read_snapshot(store, job_id, listing),
            interval_seconds,
            stop,
            Console(),
            store.storage.description,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
