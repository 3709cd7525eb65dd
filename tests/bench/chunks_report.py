"""The chunk-engine benchmark's figures, and their Markdown tables (medians, min-max)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from runner.worker.loop import DEFAULT_POLL_MAX_SECONDS
from tests.bench.chunk_jobs import Checkpointing
from tests.bench.planning_memory import PlanningRun, bounded_line
from tests.bench.raw_loop import RawTimes
from tests.bench.report import spread
from tests.bench.resume import ResumeTimes
from tests.bench.throughput import Measured

#: The engine's settings compared with the raw loop: what ``runner start --concurrency 8``
#: gives (prefetch adapting to the chunks, as by default).
RATIO_LABEL = "concurrency 8"
#: The label of the settings ``runner start`` uses when given no options.
DEFAULTS_LABEL = "concurrency 1 (defaults)"
#: Operations in the order the calls table lists them.
OPERATIONS = (
    "queues.receive",
    "queues.send",
    "queues.update",
    "queues.delete",
    "queues.send_many",
    "queues.send_many messages",
    "queues.delete_many",
    "queues.delete_many messages",
    "records.get",
    "records.insert",
    "records.merge",
    "records.batch",
    "records.query",
)
RESUME_BOUND_SECONDS = Checkpointing.lease_seconds + DEFAULT_POLL_MAX_SECONDS
EMBEDDED_TARGET_PER_SECOND = 3_000


@dataclass
class Results:
    """Every run's figures; throughput keyed by (backend, setting label)."""

    end_to_end: dict[tuple[str, str], list[Measured]] = field(default_factory=dict)
    planning: dict[tuple[str, str], list[Measured]] = field(default_factory=dict)
    processing: dict[tuple[str, str], list[Measured]] = field(default_factory=dict)
    raw: list[RawTimes] = field(default_factory=list)
    resume: dict[str, list[ResumeTimes]] = field(default_factory=dict)
    planning_memory: dict[int, list[PlanningRun]] = field(default_factory=dict)


def _rates(runs: list[Measured]) -> str:
    return spread([m.rate for m in runs], 0 if min(m.rate for m in runs) >= 100 else 1)


def _median_rate(runs: list[Measured] | list[RawTimes]) -> float:
    return statistics.median(m.rate for m in runs)


def throughput_rows(results: Results) -> list[str]:
    rows = [
        "| backend | worker processes x settings | end to end chunks/s | planning alone "
        "chunks/s | processing alone chunks/s |",
        "|---|---|---|---|---|",
    ]
    for key, whole in results.end_to_end.items():
        cells = [_rates(whole), _rates(results.planning[key]), _rates(results.processing[key])]
        rows.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return rows


def _per_chunk(runs: list[Measured], operation: str) -> float:
    return statistics.median(m.per_chunk().get(operation, 0.0) for m in runs)


def calls_rows(results: Results, columns: list[tuple[str, str]]) -> list[str]:
    """Calls per chunk by operation, end to end and processing alone, for each
    (backend, setting label) in ``columns`` that was measured."""
    header, chosen = ["operation"], []
    for key in columns:
        for kind, table in (("end to end", results.end_to_end), ("processing", results.processing)):
            if key in table:
                header.append(f"{key[0]} {kind}<br>({key[1]})")
                chosen.append(table[key])
    seen = {operation for runs in chosen for m in runs for operation in m.calls}
    ordered = [op for op in OPERATIONS if op in seen] + sorted(seen - set(OPERATIONS))
    rows = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for operation in ordered:
        values = [_per_chunk(runs, operation) for runs in chosen]
        rows.append(f"| {operation} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
    totals = [statistics.median(_calls(m.per_chunk()) for m in runs) for runs in chosen]
    rows.append("| **all calls** | " + " | ".join(f"**{t:.3f}**" for t in totals) + " |")
    requests = [statistics.median(_azure_requests(m.per_chunk()) for m in runs) for runs in chosen]
    rows.append(
        "| **requests on Azure** (one per message of a `*_many`) | "
        + " | ".join(f"**{t:.3f}**" for t in requests)
        + " |"
    )
    return rows


def _calls(per_chunk: dict[str, float]) -> float:
    """Calls, not counting the ``... messages`` lines (messages carried by a call)."""
    return sum(v for op, v in per_chunk.items() if not op.endswith(" messages"))


def _azure_requests(per_chunk: dict[str, float]) -> float:
    """What the calls cost on Azure, which has no batch for queues: each message of a
    ``send_many`` / ``delete_many`` is one request (sent concurrently)."""
    many = sum(v for op, v in per_chunk.items() if op.endswith("_many"))
    carried = sum(v for op, v in per_chunk.items() if op.endswith(" messages"))
    return _calls(per_chunk) - many + carried


def ratio_rows(results: Results) -> list[str]:
    key = ("azurite", RATIO_LABEL)
    if not results.raw or key not in results.end_to_end:
        return []
    raw = results.raw
    engine, alone = results.end_to_end[key], results.processing[key]
    work_ratio = _median_rate(alone) / statistics.median(r.work_rate for r in raw)
    return [
        "| loop on the same Azurite | whole run msg/s | send / planning phase msg/s "
        "| receive-and-work / processing phase msg/s |",
        "|---|---|---|---|",
        f"| raw SDK loop, 1 thread | {spread([r.rate for r in raw], 1)} "
        f"| {spread([r.messages / r.send_seconds for r in raw], 1)} "
        f"| {spread([r.work_rate for r in raw], 1)} |",
        f"| engine, 1 process, {RATIO_LABEL} | {_rates(engine)} "
        f"| {_rates(results.planning[key])} | {_rates(alone)} |",
        f"| **engine / raw** | **{_median_rate(engine) / _median_rate(raw):.2f}x** | "
        f"| {work_ratio:.2f}x |",
    ]


def resume_rows(results: Results) -> list[str]:
    rows = [
        "| backend | SIGKILL to resume, s | lease left at the kill, s | lease run out to "
        "resume, s | lease + poll max, s |",
        "|---|---|---|---|---|",
    ]
    for backend, times in results.resume.items():
        cells = [
            spread([t.kill_to_resume for t in times], 2),
            spread([t.lease_left_at_kill for t in times], 2),
            spread([t.after_lease for t in times], 2),
            f"{RESUME_BOUND_SECONDS:g}",
        ]
        rows.append(f"| {backend} | " + " | ".join(cells) + " |")
    return rows


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _with_defaults(results: Results, backend: str, figure: Callable[[list], str]) -> str:
    """The end of a target line: the same figure for the default settings, if measured."""
    runs = results.end_to_end.get((backend, DEFAULTS_LABEL))
    return f" (with the defaults, {DEFAULTS_LABEL}: {figure(runs)})." if runs else "."


def target_lines(results: Results) -> list[str]:
    """Each target of the issue next to the figure that answers it (reported, not
    enforced)."""
    lines = []
    embedded = [
        (_median_rate(runs), key[1])
        for key, runs in results.end_to_end.items()
        if key[0] == "embedded"
    ]
    if embedded:
        rate, label = max(embedded)
        lines.append(
            f"- >= {EMBEDDED_TARGET_PER_SECOND:,} trivial chunks/s on embedded (end to end): "
            f"best median {rate:,.0f}/s, with {label}: {_met(rate >= EMBEDDED_TARGET_PER_SECOND)}"
            + _with_defaults(results, "embedded", lambda runs: f"{_median_rate(runs):,.0f}/s")
        )
    key = ("azurite", RATIO_LABEL)
    if results.raw and key in results.end_to_end:
        raw = _median_rate(results.raw)
        ratio = _median_rate(results.end_to_end[key]) / raw
        lines.append(
            f"- >= 1.0x the raw loop on Azurite (one worker process, {RATIO_LABEL}, end to "
            f"end): {ratio:.2f}x: {_met(ratio >= 1.0)}"
            + _with_defaults(results, "azurite", lambda runs: f"{_median_rate(runs) / raw:.2f}x")
        )
    for backend, times in results.resume.items():
        slowest = max(t.kill_to_resume for t in times)
        lines.append(
            f"- resume after SIGKILL within lease + one poll interval "
            f"({RESUME_BOUND_SECONDS:g} s) on {backend}: slowest of {len(times)} "
            f"{slowest:.2f} s: {_met(slowest <= RESUME_BOUND_SECONDS)}."
        )
    memory = bounded_line(results.planning_memory)
    if memory:
        lines.append(memory)
    return lines
