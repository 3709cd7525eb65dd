"""A SIGKILL mid-run and the restart after it, for the chunked job and a streaming query.

Both sides are killed by one rule (:class:`KillPoint`): once ``after_batches`` batches
are committed (our checkpoints after a batch; Structured Streaming's commit log), wait
``delay_seconds`` (about half a batch, so the kill lands inside the next one), then
SIGKILL the process group (the Python process and, in local or classic mode, its JVM)
and start the replacement at once. The figures: total time from the start to the
replacement's exit, and what was redone.

Ours, :func:`run_chunked_crash`: one ``runner start --burst`` worker killed, a second one
started. The killed chunk's message comes back when its lease runs out
(``MigrateOrders.lease_seconds``); meanwhile the new worker takes the chunks nobody has
started, so the wait is hidden while there are any.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoint.backends import open_storage
from samples.migration.layout import MigrationParams, get_json
from samples.migration.processes import Runner, Worker
from tests.bench.migration import Input, Timed, wait_child

#: What the migration job logs after each batch's checkpoint ("chunk 3 batch 1 of 1: ...").
BATCH_DONE = " rows in, "
POLL_SECONDS = 0.1
#: Longest wait for the kill point: a run that never gets there is a broken run.
KILL_WAIT_SECONDS = 900.0


@dataclass(frozen=True)
class KillPoint:
    """Kill once ``after_batches`` batches are committed, ``delay_seconds`` later."""

    after_batches: int
    delay_seconds: float


@dataclass(frozen=True)
class Crashed:
    """A run with one SIGKILL and a restart.

    Attributes:
        total: from the first start to the replacement's exit (its peaks: the replacement's).
        killed_at_seconds: from the first start to the kill.
        committed: batches committed when the kill came.
        redone: batches run again after the restart (started before the kill, not committed).
        redone_seconds: how long the redone batches took the second time.
        notes: what else the run showed (attempts, resume points).
    """

    total: Timed
    killed_at_seconds: float
    committed: int
    redone: int
    redone_seconds: float
    notes: str = ""


def kill_when(progress: Callable[[], int], point: KillPoint, kill: Callable[[], None]) -> int:
    """Wait until ``progress()`` reaches the point's batches, then its delay; ``kill()``.
    The batches committed at the kill."""
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while progress() < point.after_batches:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {point.after_batches} batches in {KILL_WAIT_SECONDS:.0f} s")
        time.sleep(POLL_SECONDS)
    time.sleep(point.delay_seconds)
    committed = progress()
    kill()
    return committed


def batches_done(worker: Worker) -> int:
    """Batches the worker has logged as checkpointed."""
    return len(worker.log_lines(BATCH_DONE))


def batch_seconds(log_path: Path) -> list[float]:
    """Each checkpointed batch's own time in a worker's log, as the job logs it
    ("chunk 3 batch 1 of 1: ... (4.2 s)"), in the order they were done."""
    lines = [
        line for line in log_path.read_text(errors="replace").splitlines() if BATCH_DONE in line
    ]
    return [float(line.rsplit("(", 1)[1].split()[0]) for line in lines]


def run_chunked_crash(data: Input, rundir: Path, point: KillPoint) -> tuple[Crashed, str]:
    """Submit, run one worker, SIGKILL it at ``point``, start another at once; the run
    and the job id."""
    runner = Runner(data.store, rundir)
    params = {**data.params, "output": str(rundir / "output"), "scratch": str(rundir / "scratch")}
    started = time.monotonic()
    job_id = runner.submit(params)
    first = runner.start_worker()
    committed: list[int] = []
    try:
        wait_child(
            first.process,
            started,
            first.log_path,
            "the first worker",
            watch=lambda: committed.append(
                kill_when(lambda: batches_done(first), point, first.kill)
            ),
        )
        killed_at = time.monotonic() - started
        second = runner.start_worker()
        total = wait_child(second.process, started, second.log_path, "the second worker")
    finally:
        runner.kill_all()
    chunks = _per_chunk(data.store, params, job_id)
    again = [chunk for chunk in chunks if chunk["attempt"] > 1]
    redone = sum(chunk["of"] - chunk["resumed_at_batch"] for chunk in again)
    # The second worker's batches are logged in order; a redone chunk's are among them.
    again_seconds = _redone_seconds(second, {chunk["index"] for chunk in again})
    notes = ", ".join(
        f"chunk {chunk['index']} attempt {chunk['attempt']} resumed at batch "
        f"{chunk['resumed_at_batch']} of {chunk['of']}"
        for chunk in again
    )
    return Crashed(total, killed_at, committed[0], redone, again_seconds, notes), job_id


def _per_chunk(store: str, params: dict[str, Any], job_id: str) -> list[dict[str, Any]]:
    settings = MigrationParams.of(params)
    with open_storage(store) as storage:
        summary = get_json(storage, settings.results_container, f"{job_id}/summary.json")
    return list(summary["per_chunk"])


def _redone_seconds(worker: Worker, indexes: set[int]) -> float:
    """Seconds the worker logged for the batches of the chunks ``indexes``."""
    total = 0.0
    lines, times = worker.log_lines(BATCH_DONE), batch_seconds(worker.log_path)
    for line, seconds in zip(lines, times, strict=True):
        index = int(line.split("chunk ", 1)[1].split()[0])
        total += seconds if index in indexes else 0.0
    return total
