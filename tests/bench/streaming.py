"""Structured Streaming runs of the migration for the benchmark: timed, checked, crashed.

The driver is :mod:`tests.bench.streaming_child` in a fresh process (with its own Spark
JVM: a classic driver, local or on a cluster's master), reading the input staged once,
whole files, into one folder (a file stream source reads a folder; the one-shot run
reads whole files too). Its micro-batches print one JSON line each, read back here.

A crash (:func:`run_streaming_crash` with a :class:`~tests.bench.crash.KillPoint`)
SIGKILLs the driver's process group once that many micro-batches are in the checkpoint's
commit log, and restarts the same command at once on the same checkpoint: the micro-batch
that was planned (offsets log) but not committed is run again, same id and files, and its
``foreachBatch`` output overwritten.

A restart does not keep the micro-batches to ``maxFilesPerTrigger`` files each, so a run
is checked by files, not by counting batches (:func:`check_micro_batches`). Planning
micro-batch N, Spark's file source first appends the files it picks to its own log
(``sources/0/<entry>``, in ``FileStreamSource.fetchMaxOffset``) and only then does the
query write ``offsets/N`` (``MicroBatchExecution.markMicroBatchStart``). A kill between
the two leaves a source-log entry that no micro-batch names; the restarted source
resumes its log after it and the restarted query's micro-batch N reads both entries
(``getBatch`` reads every entry after the previous batch's end offset): 6 files where
``maxFilesPerTrigger`` is 3, one micro-batch fewer in all, every file still read once.
Found in a fast-test run ("the restarted driver ran batches 2-6", 7 of 8) and
reproduced by a kill in that window.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from checkpoint.backends import open_storage
from samples.migration.layout import KINDS, copy_blob
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
from tests.bench.streaming_child import BATCH_DIR

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


#: The file source's own log in the checkpoint: the files each of its entries took.
SOURCE_LOG = "sources/0"


@dataclass(frozen=True)
class MicroBatch:
    """A committed micro-batch as its checkpoint records it.

    Attributes:
        batch: its id (offsets and commit logs; the ``batch-<id>`` output folders).
        entries: the file source's log entries it read (one each, but after a restart
            that followed a kill between the source's log and the offsets log, two).
        files: the names of the files those entries hold.
    """

    batch: int
    entries: tuple[int, ...]
    files: tuple[str, ...]


def _batch_ids(folder: Path) -> list[int]:
    try:
        return sorted(int(entry.name) for entry in folder.iterdir() if entry.name.isdigit())
    except OSError:
        return []


def _source_entries(checkpoint: Path) -> dict[int, list[str]]:
    """Each file source log entry's file names. A log file is a version line and one JSON
    ``FileEntry`` (``path`` URI, ``timestamp``, ``batchId``: the entry) per file; a
    ``<n>.compact`` file (every 10th entry) holds the entries up to ``n``."""
    found: dict[int, list[str]] = defaultdict(list)
    folder = checkpoint / SOURCE_LOG
    logs = (
        [entry for entry in folder.iterdir() if entry.name.removesuffix(".compact").isdigit()]
        if folder.is_dir()
        else []
    )
    for log in logs:
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            found[int(entry["batchId"])].append(unquote(urlparse(entry["path"]).path))
    # A compact file repeats what the entry files it replaced held (before they go).
    return {entry: sorted({Path(path).name for path in paths}) for entry, paths in found.items()}


def _end_entry(offsets_file: Path) -> int:
    """The file source's log entry a micro-batch reads up to: ``offsets/<id>`` is a
    version line, the batch's metadata, then each source's offset (ours: one file source,
    ``{"logOffset": n}``)."""
    lines = offsets_file.read_text().splitlines()
    if len(lines) != 3:
        raise ValueError(f"{offsets_file}: one source's offset expected, got {lines[2:]}")
    return int(json.loads(lines[2])["logOffset"])


def micro_batches(checkpoint: Path) -> list[MicroBatch]:
    """The committed micro-batches and the files each read, from the query's checkpoint:
    micro-batch N reads the file source's log entries after micro-batch N-1's end offset,
    up to its own (``FileStreamSource.getBatch``)."""
    entries = _source_entries(checkpoint)
    found, previous = [], -1
    for batch in _batch_ids(checkpoint / "commits"):
        end = _end_entry(checkpoint / "offsets" / str(batch))
        read = tuple(range(previous + 1, end + 1))
        files = tuple(name for entry in read for name in entries.get(entry, []))
        found.append(MicroBatch(batch, read, files))
        previous = end
    return found


def check_micro_batches(checkpoint: Path, input_dir: Path, output: Path) -> list[MicroBatch]:
    """What a finished run must show, whatever its micro-batches' sizes: every staged file
    read by exactly one committed micro-batch, the commit log without gaps, and one
    ``batch-<id>`` output folder per committed micro-batch for each output. Raise if not;
    the micro-batches."""
    batches = micro_batches(checkpoint)
    problems = []
    ids = [batch.batch for batch in batches]
    if ids != list(range(len(ids))):
        problems.append(f"committed micro-batches {ids}: not 0..{len(ids) - 1}")
    staged = {entry.name for entry in input_dir.iterdir() if not entry.name.startswith(".")}
    reads = Counter(name for batch in batches for name in batch.files)
    if missing := sorted(staged - set(reads)):
        problems.append(f"staged files no micro-batch read: {missing}")
    if twice := sorted(name for name, count in reads.items() if count > 1):
        problems.append(f"files read by more than one micro-batch: {twice}")
    if stray := sorted(set(reads) - staged):
        problems.append(f"files read that were not staged: {stray}")
    folders = {BATCH_DIR.format(batch) for batch in ids}
    for kind in KINDS:
        written = {entry.name for entry in (output / kind).glob("batch-*")}
        if written != folders:
            problems.append(f"{kind}: folders {sorted(written)}, committed {sorted(folders)}")
    if problems:
        raise RuntimeError(
            f"the streaming run in {checkpoint.parent} is not whole:\n" + "\n".join(problems)
        )
    return batches


def merged(batches: list[MicroBatch]) -> str:
    """The micro-batches that read more than one source log entry, said for the notes."""
    return "; ".join(
        f"micro-batch {batch.batch} read {len(batch.files)} files, the file source's log "
        f"entries {batch.entries[0]}-{batch.entries[-1]} (the kill fell after the source "
        f"logged entry {batch.entries[0]}, before the offsets log named micro-batch "
        f"{batch.batch})"
        for batch in batches
        if len(batch.entries) > 1
    )


def printed_batches(log_path: Path) -> list[dict[str, Any]]:
    """The micro-batch lines the driver printed."""
    found = []
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith('{"batch"'):
            found.append(json.loads(line))
    return found


def _command(input_dir: Path, rundir: Path) -> list[str]:
    return [
        "run",
        "--input",
        str(input_dir),
        "--output",
        str(rundir / "stream"),
        "--checkpoint",
        str(rundir / "stream-checkpoint"),
    ]


def run_streaming(data: Input, input_dir: Path, rundir: Path, env: Mapping[str, str]) -> Streamed:
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
    wait_child(
        first,
        started,
        first_log,
        "the first driver",
        watch=lambda: at_kill.append(
            kill_when(lambda: logged(checkpoint), point, lambda: kill_group(first.pid))
        ),
    )
    killed_at = time.monotonic() - started
    # Planned before the kill but not committed: what the restart runs again.
    planned = logged(checkpoint, "offsets")
    # Files the source had picked by then (one entry ahead of the offsets log while it
    # plans a micro-batch).
    picked = logged(checkpoint, SOURCE_LOG)
    second = start_child(CHILD, _command(input_dir, rundir), second_log, dict(env))
    total = wait_child(second, started, second_log, "the restarted driver")
    rerun = printed_batches(second_log)
    redone = [line for line in rerun if line["batch"] < planned]
    batches = micro_batches(checkpoint)
    notes = (
        f"{at_kill[0]} committed, {planned} planned and {picked} source log entries "
        f"at the kill; the restarted driver ran batches "
        f"{[line['batch'] for line in rerun]}, {len(batches)} micro-batches in all"
    )
    if merges := merged(batches):
        notes += f"; {merges}"
    return Crashed(
        total, killed_at, at_kill[0], len(redone), sum(line["seconds"] for line in redone), notes
    )


def check_streaming(data: Input, rundir: Path, one_shot: Path, input_dir: Path) -> dict[str, Any]:
    """Check a finished streaming run (untimed): its checkpoint and folders
    (:func:`check_micro_batches`), and its output against the one-shot's. Raise if either
    is wrong; the child's findings and ``micro_batches``, how many there were."""
    batches = check_micro_batches(rundir / "stream-checkpoint", input_dir, rundir / "stream")
    found = json_child(
        CHILD,
        ["check", "--output", str(rundir / "stream"), "--one-shot", str(one_shot)],
        child_env(data),
    )
    if not found["ok"]:
        raise RuntimeError(
            "the streamed and the one-shot output differ:\n" + "\n".join(found["lines"])
        )
    return {**found, "micro_batches": len(batches)}
