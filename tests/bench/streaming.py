"""Structured Streaming runs of the migration for the benchmark: timed, checked, crashed.

The driver is :mod:`tests.bench.streaming_child` in a fresh process (with its own Spark
JVM: a classic driver, local or on a cluster's master), reading the input staged once,
whole files, into one folder (a file stream source reads a folder; the one-shot run
reads whole files too). Its micro-batches print one JSON line each, read back here.

A crash (:func:`run_streaming` with a :class:`~tests.bench.crash.KillPoint`) SIGKILLs
the driver's process group once that many micro-batches are in the checkpoint's commit
log, and restarts the same command at once on the same checkpoint: the micro-batch that
was planned (offsets log) but not committed is run again, same id and files, and its
``foreachBatch`` output overwritten.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoint.backends import open_storage
from samples.migration.layout import copy_blob
from tests.bench.crash import Crashed, KillPoint, kill_when
from tests.bench.migration import (
    Input,
    Timed,
    child_env,
    json_child,
    kill_group,
    start_child,
    wait_child,
)

CHILD = "tests.bench.streaming_child"


@dataclass(frozen=True)
class Streamed:
    """One streaming run: its time and peaks, its micro-batches as they printed them."""

    timed: Timed
    batches: list[dict[str, Any]] = field(default_factory=list)


def stage_whole(data: Input, folder: Path) -> float:
    """Copy every input blob, whole, into ``folder`` (once, untimed); the seconds it took."""
    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    with open_storage(data.store) as storage:
        for number, name in enumerate(data.generated.names):
            copy_blob(storage, data.generated.container, name, folder / f"{number:05d}.json")
    return time.monotonic() - started


def logged(checkpoint: Path, log: str = "commits") -> int:
    """Micro-batches in the query's commit (or ``offsets``: planned) log: files named by
    batch id."""
    try:
        return sum(entry.name.isdigit() for entry in (checkpoint / log).iterdir())
    except OSError:
        return 0


def printed_batches(log_path: Path) -> list[dict[str, Any]]:
    """The micro-batch lines the driver printed."""
    found = []
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith('{"batch"'):
            found.append(json.loads(line))
    return found


def _command(input_dir: Path, rundir: Path) -> list[str]:
    return ["run", "--input", str(input_dir), "--output", str(rundir / "stream"),
            "--checkpoint", str(rundir / "stream-checkpoint")]


def run_streaming(
    data: Input, input_dir: Path, rundir: Path, env: Mapping[str, str]
) -> Streamed:
    """One uninterrupted run of the streaming driver; its time and micro-batches."""
    log_path = rundir / "stream.log"
    started = time.monotonic()
    process = start_child(CHILD, _command(input_dir, rundir), log_path, dict(env))
    timed = wait_child(process, started, log_path, "the streaming driver")
    return Streamed(timed, printed_batches(log_path))


def run_streaming_crash(
    data: Input, input_dir: Path, rundir: Path, env: Mapping[str, str], point: KillPoint
) -> Crashed:
    """The driver SIGKILLed at ``point`` and restarted at once on its checkpoint."""
    checkpoint = rundir / "stream-checkpoint"
    first_log, second_log = rundir / "stream-1.log", rundir / "stream-2.log"
    started = time.monotonic()
    first = start_child(CHILD, _command(input_dir, rundir), first_log, dict(env))
    at_kill: list[int] = []
    wait_child(first, started, first_log, "the first driver", watch=lambda: at_kill.append(
        kill_when(lambda: logged(checkpoint), point, lambda: kill_group(first.pid))))
    killed_at = time.monotonic() - started
    # Planned before the kill but not committed: what the restart runs again.
    planned = logged(checkpoint, "offsets")
    second = start_child(CHILD, _command(input_dir, rundir), second_log, dict(env))
    total = wait_child(second, started, second_log, "the restarted driver")
    rerun = printed_batches(second_log)
    redone = [line for line in rerun if line["batch"] < planned]
    notes = (f"{at_kill[0]} committed and {planned} planned at the kill; the restarted "
             f"driver ran batches {[line['batch'] for line in rerun]}")
    return Crashed(total, killed_at, at_kill[0], len(redone),
                   sum(line["seconds"] for line in redone), notes)


def check_streaming(data: Input, rundir: Path, one_shot: Path) -> dict[str, Any]:
    """Compare the streamed output with the one-shot's (untimed); raise if they differ."""
    found = json_child(
        CHILD,
        ["check", "--output", str(rundir / "stream"), "--one-shot", str(one_shot)],
        child_env(data),
    )
    if not found["ok"]:
        raise RuntimeError("the streamed and the one-shot output differ:\n"
                           + "\n".join(found["lines"]))
    return found
