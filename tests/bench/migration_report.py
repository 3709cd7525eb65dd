"""The migration benchmark's figures and their Markdown: wall times, ratio, peak memory."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from tests.bench.report import spread
from tests.bench.rss import TreePeaks

#: The issue's target: the chunked job at most this much slower than one plain Spark job.
TARGET_RATIO = 1.15
MIB = 1024  # KiB per MiB


@dataclass(frozen=True)
class Timed:
    """One timed process (tree): its wall time and its memory peaks."""

    seconds: float
    peaks: TreePeaks
    #: Blocks of a persisted frame that did not fit Spark's memory store (spilled to disk).
    cache_spills: int = 0


@dataclass(frozen=True)
class Pair:
    """Run ``number``: the chunked job, then the plain one on the same input."""

    number: int
    chunked: Timed
    plain: Timed

    @property
    def ratio(self) -> float:
        return self.chunked.seconds / self.plain.seconds


def ratio_of_medians(pairs: list[Pair]) -> float:
    """Median chunked wall time / median plain wall time (the figure the target is about)."""
    chunked = statistics.median(pair.chunked.seconds for pair in pairs)
    plain = statistics.median(pair.plain.seconds for pair in pairs)
    return chunked / plain


def target_line(pairs: list[Pair]) -> str:
    ratio = ratio_of_medians(pairs)
    verdict = "met" if ratio <= TARGET_RATIO else "**not met**"
    return (
        f"- chunked + resumable <= {TARGET_RATIO:.2f}x one plain Spark job (median wall "
        f"times, {len(pairs)} run(s) each): {ratio:.2f}x: {verdict}."
    )


def cpu_ratio_of_medians(pairs: list[Pair]) -> float:
    """Median chunked CPU seconds / median plain CPU seconds (of the process trees)."""
    chunked = statistics.median(pair.chunked.peaks.cpu_seconds for pair in pairs)
    plain = statistics.median(pair.plain.peaks.cpu_seconds for pair in pairs)
    return chunked / plain


def wall_rows(pairs: list[Pair]) -> list[str]:
    """Per run and median: each side's wall time and CPU time, and their ratios."""
    rows = [
        "| run | chunked, s | plain, s | chunked / plain | chunked CPU, s | plain CPU, s "
        "| CPU chunked / plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for pair in pairs:
        chunked_cpu, plain_cpu = pair.chunked.peaks.cpu_seconds, pair.plain.peaks.cpu_seconds
        rows.append(
            f"| {pair.number} | {pair.chunked.seconds:.1f} | {pair.plain.seconds:.1f} "
            f"| {pair.ratio:.2f}x | {chunked_cpu:.1f} | {plain_cpu:.1f} "
            f"| {chunked_cpu / plain_cpu:.2f}x |"
        )
    medians = [
        statistics.median(seconds)
        for seconds in (
            [pair.chunked.seconds for pair in pairs],
            [pair.plain.seconds for pair in pairs],
            [pair.chunked.peaks.cpu_seconds for pair in pairs],
            [pair.plain.peaks.cpu_seconds for pair in pairs],
        )
    ]
    rows.append(
        f"| **median** | **{medians[0]:.1f}** | **{medians[1]:.1f}** "
        f"| **{ratio_of_medians(pairs):.2f}x** | {medians[2]:.1f} | {medians[3]:.1f} "
        f"| {cpu_ratio_of_medians(pairs):.2f}x |"
    )
    return rows


def _mib(values: list[int]) -> str:
    return spread([value / MIB for value in values])


def memory_rows(pairs: list[Pair]) -> list[str]:
    """Peak resident MiB of each side's Python process, its Spark JVM and both."""
    return memory_table(
        "process tree",
        [
            ("chunked: the worker (`runner start`)", [pair.chunked.peaks for pair in pairs]),
            ("plain: the one-shot process", [pair.plain.peaks for pair in pairs]),
        ],
    )


def memory_table(first_column: str, sides: list[tuple[str, list[TreePeaks]]]) -> list[str]:
    """A row of peak MiB (:func:`memory_cells`) per labelled side that has any peaks."""
    rows = [
        f"| {first_column} | Python process, MiB | its Spark JVM, MiB | sum of the two peaks, "
        "MiB | whole tree at one read, MiB |",
        "|---|---|---|---|---|",
    ]
    for label, peaks in sides:
        if peaks:
            rows.append(f"| {label} | " + " | ".join(memory_cells(peaks)) + " |")
    return rows


def memory_cells(peaks: list[TreePeaks]) -> list[str]:
    return [
        _mib([p.root_kib for p in peaks]),
        _mib([p.jvm_kib for p in peaks]),
        _mib([p.sum_kib for p in peaks]),
        _mib([p.max_total_kib for p in peaks]),
    ]


def worker_memory_summary(pairs: list[Pair]) -> str:
    """One line: the worker's median peaks (what the issue asks for)."""
    peaks = [pair.chunked.peaks for pair in pairs]
    python = statistics.median(p.root_kib for p in peaks) / MIB
    jvm = statistics.median(p.jvm_kib for p in peaks) / MIB
    both = statistics.median(p.sum_kib for p in peaks) / MIB
    return (
        f"- peak RSS of a worker (median of {len(peaks)}): Python {python:,.0f} MiB + Spark "
        f"JVM {jvm:,.0f} MiB = {both:,.0f} MiB."
    )


#: What Spark's MemoryStore logs (WARN) for each block it cannot keep in memory; a frame
#: persisted MEMORY_AND_DISK (the DataFrame default) then writes the block to local disk.
CACHE_SPILL_WARNING = "Not enough space to cache"


def cache_spills(log: str) -> int:
    """How many blocks Spark could not cache in memory, from a process's log."""
    return sum(CACHE_SPILL_WARNING in line for line in log.splitlines())


def cache_line(pairs: list[Pair]) -> str:
    """Whether each side's persisted frames fit Spark's memory store: a side that spills
    writes (and reads back) blocks through local disk, which slows it."""
    sides = {
        "chunked": [p.chunked.cache_spills for p in pairs],
        "plain": [p.plain.cache_spills for p in pairs],
    }
    if not any(any(spills) for spills in sides.values()):
        return "- the persisted frames fit Spark's memory store on both sides in every run."
    said = [
        f"{side} in {sum(1 for n in spills if n)} of {len(spills)} run(s) "
        f"({sum(spills):,} blocks in all)"
        for side, spills in sides.items()
        if any(spills)
    ]
    return (
        "- **a persisted frame did not fit Spark's memory store** (`"
        + CACHE_SPILL_WARNING
        + "`: blocks spilled to local disk): "
        + "; ".join(said)
        + ". That side pays "
        "disk writes and reads the other does not; more driver memory "
        '(`--spark-conf \'{"spark.driver.memory": "4g"}\'`) gives the store more room.'
    )
