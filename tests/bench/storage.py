"""Storage operations per second on both backends -> a section of BENCHMARKS.md.

``python -m tests.bench.storage [--runs 3] [--output BENCHMARKS.md]``

Each operation runs ``n`` times on fresh resources, ``--runs`` times over; the table
shows the median ops/s and the spread. Queues stay shallow (at most ``n`` messages, 200 on
Azurite) because Azurite scans every message on each receive and slows with depth:
its figures are for a shallow queue only. One Python thread, synchronous calls.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from checkpoint.backends import open_storage
from checkpoint.storage import BatchOp, Storage, Where
from tests import azurite as azurite_process
from tests.bench.report import machine_line, write_section

#: Operations per timed run, per backend: Azurite is ~100x slower than SQLite.
OPS = {"embedded": 2_000, "azurite": 200}
BODY = b"x" * 256
BLOB = b"b" * 4096


@dataclass
class Case:
    """One measured operation: ``prepare`` makes its inputs, ``run`` is timed."""

    name: str
    unit_ops: Callable[[int], int]
    prepare: Callable[[Storage, int], object]
    run: Callable[[Storage, object], None]


def _queue(storage: Storage) -> str:
    name = f"bench-{uuid.uuid4().hex[:10]}"
    storage.queues.create_queue(name)
    return name


def _table(storage: Storage) -> str:
    name = f"bench{uuid.uuid4().hex[:10]}"
    storage.records.create_table(name)
    return name


def _filled_queue(storage: Storage, n: int) -> tuple[str, int]:
    queue = _queue(storage)
    for _ in range(n):
        storage.queues.send(queue, BODY, ttl_seconds=-1)
    return queue, n


def _received(storage: Storage, n: int) -> tuple[str, list]:
    queue, _ = _filled_queue(storage, n)
    held = []
    while len(held) < n:
        held += storage.queues.receive(queue, max_messages=32, visibility_seconds=300)
    return queue, held


def _table_with_rows(storage: Storage, n: int) -> tuple[str, dict[str, str]]:
    table = _table(storage)
    etags = {}
    for start in range(0, n, 100):
        keys = [f"r{i:06d}" for i in range(start, min(n, start + 100))]
        ops = [BatchOp("insert", key, {"state": "waiting", "n": i}) for i, key in enumerate(keys)]
        etags.update(zip(keys, storage.records.batch(table, "p", ops), strict=True))
    return table, etags


def _send(storage: Storage, queue_n: object) -> None:
    queue, n = queue_n  # type: ignore[misc]
    for _ in range(n):
        storage.queues.send(queue, BODY, ttl_seconds=-1)


def _receive_one(storage: Storage, queue_n: object) -> None:
    queue, n = queue_n  # type: ignore[misc]
    for _ in range(n):
        storage.queues.receive(queue, visibility_seconds=300)


def _receive_32(storage: Storage, queue_n: object) -> None:
    queue, n = queue_n  # type: ignore[misc]
    got = 0
    while got < n:
        got += len(storage.queues.receive(queue, max_messages=32, visibility_seconds=300))


def _update(storage: Storage, held: object) -> None:
    queue, messages = held  # type: ignore[misc]
    for message in messages:
        storage.queues.update(queue, message.id, message.pop_receipt, visibility_seconds=300)


def _delete(storage: Storage, held: object) -> None:
    queue, messages = held  # type: ignore[misc]
    for message in messages:
        storage.queues.delete(queue, message.id, message.pop_receipt)


def _peek(storage: Storage, queue_n: object) -> None:
    queue, n = queue_n  # type: ignore[misc]
    for _ in range(n):
        storage.queues.peek(queue)


def _insert(storage: Storage, table_n: object) -> None:
    table, n = table_n  # type: ignore[misc]
    for i in range(n):
        storage.records.insert(table, f"p{i % 16}", f"r{i:06d}", {"state": "waiting", "n": i})


def _get(storage: Storage, rows: object) -> None:
    table, etags = rows  # type: ignore[misc]
    for key in etags:
        storage.records.get(table, "p", key)


def _replace_if_match(storage: Storage, rows: object) -> None:
    table, etags = rows  # type: ignore[misc]
    for key, etag in etags.items():
        storage.records.replace(table, "p", key, {"state": "done", "n": 1}, etag=etag)


def _merge_if_match(storage: Storage, rows: object) -> None:
    table, etags = rows  # type: ignore[misc]
    for key, etag in etags.items():
        storage.records.merge(table, "p", key, {"state": "running"}, etag=etag)


def _upsert(storage: Storage, table_n: object) -> None:
    table, n = table_n  # type: ignore[misc]
    for i in range(n):
        storage.records.upsert(table, "p", f"r{i % 64:06d}", {"state": "done", "n": i})


def _delete_if_match(storage: Storage, rows: object) -> None:
    table, etags = rows  # type: ignore[misc]
    for key, etag in etags.items():
        storage.records.delete(table, "p", key, etag=etag)


def _query(storage: Storage, rows: object) -> None:
    table, etags = rows  # type: ignore[misc]
    for _ in range(20):
        list(storage.records.query(table, "p", [Where("state", "eq", "waiting")]))


def _batch_100(storage: Storage, table_n: object) -> None:
    table, n = table_n  # type: ignore[misc]
    for start in range(0, n, 100):
        ops = [BatchOp("upsert_replace", f"r{i:06d}", {"n": i}) for i in range(start, start + 100)]
        storage.records.batch(table, "p", ops)


def _blob_put(storage: Storage, container_n: object) -> None:
    container, n = container_n  # type: ignore[misc]
    for i in range(n):
        storage.blobs.put(container, f"state/{i:06d}", BLOB)


def _blob_get(storage: Storage, container_n: object) -> None:
    container, n = container_n  # type: ignore[misc]
    for i in range(n):
        storage.blobs.get(container, f"state/{i:06d}")


def _container_with_blobs(storage: Storage, n: int) -> tuple[str, int]:
    container = f"bench-{uuid.uuid4().hex[:10]}"
    storage.blobs.create_container(container)
    _blob_put(storage, (container, n))
    return container, n


def _empty_container(storage: Storage, n: int) -> tuple[str, int]:
    container = f"bench-{uuid.uuid4().hex[:10]}"
    storage.blobs.create_container(container)
    return container, n


def _same(n: int) -> int:
    return n


CASES = [
    Case("queue send (256 B)", _same, lambda s, n: (_queue(s), n), _send),
    Case("queue receive 1", _same, _filled_queue, _receive_one),
    Case("queue receive 32 (per message)", _same, _filled_queue, _receive_32),
    Case("queue update visibility", _same, _received, _update),
    Case("queue delete", _same, _received, _delete),
    Case("queue peek", _same, _filled_queue, _peek),
    Case("record insert", _same, lambda s, n: (_table(s), n), _insert),
    Case("record get", _same, _table_with_rows, _get),
    Case("record replace if-match", _same, _table_with_rows, _replace_if_match),
    Case("record merge if-match", _same, _table_with_rows, _merge_if_match),
    Case("record upsert", _same, lambda s, n: (_table(s), n), _upsert),
    Case("record delete if-match", _same, _table_with_rows, _delete_if_match),
    Case("record query (per row returned)", lambda n: 20 * n, _table_with_rows, _query),
    Case("record batch of 100 (per op)", _same, lambda s, n: (_table(s), n), _batch_100),
    Case("blob put 4 KiB", _same, _empty_container, _blob_put),
    Case("blob get 4 KiB", _same, _container_with_blobs, _blob_get),
]


def measure(storage: Storage, case: Case, n: int, runs: int) -> list[float]:
    """Ops/s of ``case`` over ``runs`` fresh runs of ``n`` operations."""
    rates = []
    for _ in range(runs):
        inputs = case.prepare(storage, n)
        started = time.perf_counter()
        case.run(storage, inputs)
        rates.append(case.unit_ops(n) / (time.perf_counter() - started))
    return rates


def opened(
    which: list[str], scratch: Path, server: azurite_process.Azurite | None
) -> Iterator[tuple[str, Storage]]:
    """Open each backend asked for in turn: embedded in ``scratch``, else the Azurite."""
    for name in which:
        if name == "embedded":
            location = str(scratch / "store")
        else:
            assert server is not None
            location = server.connection_string
        with open_storage(location) as storage:
            yield name, storage


def run(which: list[str], runs: int) -> list[str]:
    """Measure every case on every backend; return Markdown table rows."""
    results: dict[str, dict[str, list[float]]] = {}
    server = azurite_process.start() if "azurite" in which else None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
            for name, storage in opened(which, Path(scratch), server):
                for case in CASES:
                    rates = measure(storage, case, OPS[name], runs)
                    results.setdefault(case.name, {})[name] = rates
                    print(
                        f"{name:9} {case.name:34} {statistics.median(rates):>10,.0f} ops/s",
                        flush=True,
                    )
    finally:
        if server is not None:
            server.stop()
    header = "| operation | " + " | ".join(f"{b} ops/s (median, min-max)" for b in which) + " |"
    rows = [header, "|---" * (len(which) + 1) + "|"]
    for case in CASES:
        cells = []
        for name in which:
            rates = results[case.name][name]
            cells.append(f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})")
        rows.append(f"| {case.name} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", action="append", choices=sorted(OPS))
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    which = args.backend or ["embedded", "azurite"]
    rows = run(which, args.runs)
    body = [
        machine_line(),
        f"Command: `make bench` (`python -m tests.bench.storage --runs {args.runs}`). "
        f"{args.runs} runs of {', '.join(f'{OPS[b]:,} ops on {b}' for b in which)} per "
        "operation; one thread; embedded on the real clock in a temp directory; Azurite "
        f"{azurite_process.installed_version()} with disk persistence on loopback, queues "
        "at most 200 messages deep (Azurite slows sharply with depth).",
        "",
        *rows,
    ]
    print("\n".join(body))
    if args.output:
        write_section(args.output, "Storage operations", body)


if __name__ == "__main__":
    main()
