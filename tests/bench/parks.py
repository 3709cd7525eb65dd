"""How long a resume takes to bring back N parked messages -> a section of BENCHMARKS.md.

``python -m tests.bench.parks [--parked 1000] [--runs 3] [--output BENCHMARKS.md]``

Each run parks ``--parked`` messages as workers do (a copy sent out of sight for 5
minutes, its note written: not timed), then times :func:`checkpoint.parks.release`, the
work ``runner resume`` does after writing the job's record (read the notes a page at a
time, make each copy visible, drop each page of notes in one batch). Beside it, as the
reference, a raw loop of the same visibility updates, one after another, on as many
fresh parked copies. The release makes ``RELEASE_THREADS`` (8) updates at a time. A
resume then waits until 2 s have passed since it began and reads the notes again
(``LATE_PARK_SECONDS``): that is a fixed 2 s plus one empty query, not measured here.
Synchronous calls, on the real clock.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from checkpoint import messages, parks
from checkpoint.backends import open_storage
from checkpoint.storage import QueueMessage, Storage
from checkpoint.store import CheckpointStore
from tests import azurite as azurite_process
from tests.bench.report import machine_line, spread, write_section

BACKENDS = ("embedded", "azurite")
#: How long the benchmark's copies are parked: longer than any run.
PARKED_SECONDS = 300


def _parked(storage: Storage, queue: str, job_id: str, n: int, noted: bool) -> list[QueueMessage]:
    store = CheckpointStore(storage)
    copies = []
    for index in range(n):
        body = messages.encode(messages.TaskMessage("chunk", "bench", job_id, index))
        copy = storage.queues.send(queue, body, delay_seconds=PARKED_SECONDS)
        if noted:
            parks.note(storage.records, job_id, "chunk", index, queue, copy, store.budget())
        copies.append(copy)
    return copies


def _fresh_queue(storage: Storage) -> str:
    queue = f"bench-parks-{uuid.uuid4().hex[:8]}"
    storage.queues.create_queue(queue)
    return queue


def release_seconds(storage: Storage, n: int) -> float:
    """Seconds :func:`parks.release` takes over ``n`` noted parked copies."""
    queue, job_id = _fresh_queue(storage), f"bench-{uuid.uuid4().hex[:8]}"
    _parked(storage, queue, job_id, n, noted=True)
    budget = CheckpointStore(storage).budget()
    try:
        started = time.perf_counter()
        released = parks.release(storage.records, storage.queues, job_id, budget)
        seconds = time.perf_counter() - started
        assert released == parks.Released(visible=n), released
        return seconds
    finally:
        storage.queues.delete_queue(queue)


def raw_seconds(storage: Storage, n: int) -> float:
    """Seconds a bare loop of ``n`` visibility updates (no notes) takes."""
    queue = _fresh_queue(storage)
    copies = _parked(storage, queue, "bench-raw", n, noted=False)
    try:
        started = time.perf_counter()
        for copy in copies:
            storage.queues.update(queue, copy.id, copy.pop_receipt or "", visibility_seconds=0)
        return time.perf_counter() - started
    finally:
        storage.queues.delete_queue(queue)


def opened(which: list[str], scratch: Path) -> Iterator[tuple[str, Storage]]:
    server = azurite_process.start() if "azurite" in which else None
    try:
        for name in which:
            location = str(scratch / "store") if name == "embedded" else None
            if location is None:
                assert server is not None
                location = server.connection_string
            with open_storage(location) as storage:
                CheckpointStore(storage).ensure()
                yield name, storage
    finally:
        if server is not None:
            server.stop()


def run(which: list[str], n: int, runs: int) -> list[str]:
    rows = [
        "| backend | resume's release of the notes, s (median, min-max) | per parked chunk, ms "
        "| raw loop of the same updates, s | release / raw |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-parks-") as scratch:
        for name, storage in opened(which, Path(scratch)):
            released = [release_seconds(storage, n) for _ in range(runs)]
            raw = [raw_seconds(storage, n) for _ in range(runs)]
            ratio = statistics.median(released) / statistics.median(raw)
            per_chunk_ms = 1000 * statistics.median(released) / n
            print(f"{name:9} release {spread(released, 2)} s, raw {spread(raw, 2)} s", flush=True)
            rows.append(
                f"| {name} | {spread(released, 2)} | {per_chunk_ms:.2f} | {spread(raw, 2)} "
                f"| {ratio:.2f} |"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    which = args.backend or list(BACKENDS)
    rows = run(which, args.parked, args.runs)
    body = [
        machine_line(),
        f"Command: `make bench` (`python -m tests.bench.parks --parked {args.parked} --runs "
        f"{args.runs}`). {args.runs} runs per backend of {args.parked:,} parked chunks, each "
        "a copy out of sight for 5 minutes with its note, in a fresh queue; the release "
        f"makes {parks.RELEASE_THREADS} updates at a time; embedded on the real clock in a "
        f"temp directory; Azurite {azurite_process.installed_version()} with disk "
        "persistence on loopback. The raw loop makes as many fresh parked copies visible, "
        "one update after another, with no notes. "
        "`runner resume` takes this plus a fixed 2 s: it reads the notes again 2 s after it "
        "began, for parks of workers that had not yet seen the resume.",
        "",
        *rows,
    ]
    print("\n".join(body))
    if args.output:
        write_section(args.output, "Resuming a paused job: parked chunks brought back", body)


if __name__ == "__main__":
    main()
