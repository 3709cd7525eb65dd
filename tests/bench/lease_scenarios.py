"""The three runs of the adaptive-lease benchmark, each on one :class:`~tests.bench.lease_rig.Rig`.

- :func:`crash_once`: two workers; once the job has run ``warmup_seconds``, the worker
  holding a chunk ``offset_seconds`` into it (the other one idle, so a free slot waits)
  is SIGKILLed; the figure is from the kill to the chunk's next attempt's
  ``started_on``. The renewals both workers made up to the kill (their
  ``chunkrunner_lease_renewals_total``, read just before it) over the chunk-minutes
  their records show up to then give the renewals per chunk-minute.
- :func:`slowing`: workers whose store is slowed (``RUNNER_FAULTS`` in their
  environment) run a job to its end; the leases lost by each worker and the attempts
  of each chunk, from the records.
- :func:`stalled`: two workers; the one holding most chunks is SIGSTOPped ``stalls``
  times; after each, the type's learned-lease row, and the attempts each stall cost.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runner.worker.leases.lease import end_margin_seconds
from tests.bench.lease_rig import Attempt, Attempts, Rig, Worker

#: Slack on top of a run's own length before it is abandoned as stuck (seconds).
SLACK_SECONDS = 300.0
#: How long after a SIGCONT the learned-lease row is read (the stalled worker reports
#: a lesson at once, one second apart at most).
SETTLE_SECONDS = 6.0


class RunFailed(RuntimeError):
    """A run that never reached what it was to measure."""


def _now() -> datetime:
    return datetime.now(UTC)


def _wait(what: str, deadline: float, found: Any) -> Any:
    while time.monotonic() < deadline:
        value = found()
        if value is not None:
            return value
        time.sleep(0.1)
    raise RunFailed(f"gave up waiting for {what}")


def _running(attempts: Attempts) -> list[Attempt]:
    return [
        seen[-1]
        for seen in attempts.history().values()
        if seen[-1].state == "running" and seen[-1].started_on is not None
    ]


def _first_start(attempts: Attempts) -> datetime | None:
    starts = [a.started_on for seen in attempts.history().values() for a in seen if a.started_on]
    return min(starts, default=None)


def chunk_seconds_until(attempts: Attempts, until: datetime) -> float:
    """Seconds of chunk time the records show up to ``until`` (every attempt, from its
    start to its end or ``until``)."""
    total = 0.0
    for seen in attempts.history().values():
        for attempt in seen:
            if attempt.started_on is None or attempt.started_on >= until:
                continue
            end = min(attempt.ended_on or until, until)
            total += max(0.0, (end - attempt.started_on).total_seconds())
    return total


@dataclass(frozen=True)
class Recovery:
    """One crash: seconds from the kill to the chunk's next attempt; the lease the
    killed chunk had (the row's, or the fixed one); UpdateMessage calls and chunk
    seconds of both workers up to the kill."""

    seconds: float
    lease_seconds: int | None
    renewals: float
    chunk_seconds: float

    @property
    def renewals_per_chunk_minute(self) -> float:
        return 60 * self.renewals / self.chunk_seconds if self.chunk_seconds else 0.0


def _lease_now(rig: Rig) -> int:
    """The lease the rig's type gets now: fixed, or the row's (its floor with none)."""
    if rig.job.lease_seconds is not None:
        return rig.job.lease_seconds
    learned = rig.learned()
    return learned.in_force if learned is not None else rig.job.lease_bounds[0]


def _victim(rig: Rig, attempts: Attempts, warmup: float, offset: float) -> Attempt | None:
    """The running chunk to kill once the job has run ``warmup`` seconds: ``offset``
    seconds into it, its worker the only busy one."""
    first = _first_start(attempts)
    now = _now()
    if first is None or (now - first).total_seconds() < warmup:
        return None
    running = _running(attempts)
    if len({a.pid for a in running}) != 1:
        return None
    chosen = running[0]
    assert chosen.started_on is not None
    late_enough = (now - chosen.started_on).total_seconds() >= offset
    return chosen if late_enough and rig.worker_of(chosen.pid) is not None else None


def crash_once(
    rig: Rig, chunks: int, seconds: int, warmup_seconds: float, offset_seconds: float
) -> Recovery:
    """Start two workers, submit, SIGKILL one mid-chunk; the recovery it took."""
    stop_file = rig.scratch / f"{rig.name}-stop-{time.monotonic_ns()}"
    rig.start(2)
    attempts = rig.submit({"chunks": chunks, "seconds": seconds, "stop_file": str(stop_file)})
    job_type = rig.job.job_type()
    try:
        deadline = time.monotonic() + warmup_seconds + seconds + SLACK_SECONDS
        victim = _wait(
            "a chunk to kill",
            deadline,
            lambda: _victim(rig, attempts, warmup_seconds, offset_seconds),
        )
        worker = rig.worker_of(victim.pid)
        assert worker is not None
        renewals = sum(w.counter("lease_renewals", job_type) or 0.0 for w in rig.workers)
        lease = _lease_now(rig)
        rig.signal(worker, signal.SIGKILL)
        killed_at = _now()
        worker.process.wait()

        def again() -> Attempt | None:
            last = attempts.history()[victim.chunk][-1]
            return last if last.number > victim.number and last.started_on else None

        resumed = _wait(f"chunk {victim.chunk} to start again", deadline, again)
        took = (resumed.started_on - killed_at).total_seconds()
        return Recovery(took, lease, renewals, chunk_seconds_until(attempts, killed_at))
    finally:
        stop_file.touch()
        rig.wait_done(attempts.job_id, 60)
        attempts.stop()
        rig.close()


@dataclass(frozen=True)
class Slowed:
    """A job run to its end on a slowed store."""

    state: str
    seconds: float
    #: Leases lost by each worker, from the records (attempts superseded), in start order.
    lost_per_worker: list[int]
    #: The same from each worker's ``chunkrunner_leases_lost_total`` (None: no answer).
    counted_per_worker: list[float | None]
    attempts_per_chunk: list[int]
    #: Losses past each worker's first (chunks that ran again after the first lessons).
    after_lessons: int
    lease_seconds: int | None

    @property
    def met(self) -> bool:
        return self.state == "done" and max(self.lost_per_worker, default=0) <= 1


def slowing(rig: Rig, workers: int, chunks: int, seconds: int) -> Slowed:
    """Run a job of ``chunks`` chunks of ``seconds`` on ``workers`` workers whose store
    is slowed by ``rig.env``."""
    stop_file = rig.scratch / f"{rig.name}-stop"
    if rig.job.lease_seconds is None:
        rig.forget()
    rig.start(workers)
    began = time.monotonic()
    attempts = rig.submit({"chunks": chunks, "seconds": seconds, "stop_file": str(stop_file)})
    job_type = rig.job.job_type()
    try:
        budget = chunks * seconds / workers * 4 + SLACK_SECONDS
        state = rig.wait_done(attempts.job_id, budget)
        took = time.monotonic() - began
        counted = [w.counter("leases_lost", job_type) for w in rig.workers]
    finally:
        stop_file.touch()
        attempts.stop()
        rig.close()
    lost = attempts.lost_by()
    per_worker = [len(lost.get(w.pid, [])) for w in rig.workers]
    after = sum(max(0, n - 1) for n in per_worker) + len(lost.get(None, []))
    lease = _lease_now(rig)
    return Slowed(state, took, per_worker, counted, attempts.attempts_per_chunk(), after, lease)


@dataclass(frozen=True)
class Stalls:
    """A run with one worker stopped ``len(lost)`` times."""

    stall_seconds: float
    #: The learned lease before the first stall and after each.
    leases: list[int | None]
    #: Attempts lost (superseded) to each stall.
    lost: list[int]
    attempts_per_chunk: list[int]

    @property
    def covered(self) -> bool:
        """After the first stall, a lease whose end margin covers a stall."""
        after = self.leases[1] if len(self.leases) > 1 else None
        return after is not None and end_margin_seconds(after) >= self.stall_seconds

    @property
    def met(self) -> bool:
        after = self.leases[1] if len(self.leases) > 1 else None
        if after is None or after <= max(self.stall_seconds, self.leases[0] or 0):
            return False  # no lesson in the row, or none that grew the lease
        return sum(self.lost[1:]) == 0


def _most_busy(rig: Rig, attempts: Attempts, chunks: int) -> Worker | None:
    running = _running(attempts)
    if len(running) < chunks:
        return None
    pids = [a.pid for a in running]
    return rig.worker_of(max(set(pids), key=pids.count))


def stalled(
    rig: Rig, chunks: int, stalls: int, stall_seconds: float, every_seconds: float
) -> Stalls:
    """Two workers, ``chunks`` chunks; the busiest worker stopped ``stalls`` times for
    ``stall_seconds``, the first ``every_seconds`` after every chunk runs, then every
    ``every_seconds``."""
    seconds = int(every_seconds * (stalls + 1) + stall_seconds + 10)
    stop_file = rig.scratch / f"{rig.name}-stop"
    rig.forget()
    rig.start(2)
    attempts = rig.submit({"chunks": chunks, "seconds": seconds, "stop_file": str(stop_file)})
    windows: list[tuple[datetime, datetime]] = []
    leases: list[int | None] = []
    try:
        deadline = time.monotonic() + seconds + SLACK_SECONDS
        victim = _wait("every chunk running", deadline, lambda: _most_busy(rig, attempts, chunks))
        began = time.monotonic()
        learned = rig.learned()
        leases.append(learned.in_force if learned else None)
        for n in range(stalls):
            time.sleep(max(0.0, began + every_seconds * (n + 1) - time.monotonic()))
            stopped_at = _now()
            rig.signal(victim, signal.SIGSTOP)
            time.sleep(stall_seconds)
            rig.signal(victim, signal.SIGCONT)
            windows.append((stopped_at, _now()))
            time.sleep(SETTLE_SECONDS)
            learned = rig.learned()
            leases.append(learned.in_force if learned else None)
    finally:
        stop_file.touch()
        rig.wait_done(attempts.job_id, 60)
        attempts.stop()
        rig.close()
    return Stalls(stall_seconds, leases, _lost_to(attempts, windows), attempts.attempts_per_chunk())


def _lost_to(attempts: Attempts, windows: list[tuple[datetime, datetime]]) -> list[int]:
    """Attempts superseded after each stall began and before the next one did."""
    starts = [start for start, _ in windows] + [datetime.max.replace(tzinfo=UTC)]
    lost = [0] * len(windows)
    for retried in (a for seen in attempts.lost_by().values() for a in seen):
        when = retried.started_on
        for n in range(len(windows)):
            if when is not None and starts[n] <= when < starts[n + 1]:
                lost[n] += 1
    return lost
