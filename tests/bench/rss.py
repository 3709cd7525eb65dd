"""Peak resident memory of a process and its descendants (a worker and its Spark JVM).

A thread reads ``/proc`` every :data:`INTERVAL_SECONDS` while the process runs: the
process tree (from the parent ids in ``/proc/<pid>/stat``; ``/proc/<pid>/task/*/children``
is not compiled into every kernel) and each member's ``VmHWM``, the kernel's own
high-water mark of its resident set. The high-water mark is exact up to the last read,
so a short spike between two reads is not missed; only growth in the last interval
before a process exits could be. The simultaneous total (``VmRSS`` of every member at
one read, summed) is kept too, and each member's CPU time (user + system) as last read.
A child forked but not yet exec'd is left out of a read: it shares its parent's memory
(the JVM starts helpers through vfork), which would be counted twice.

Linux only, as the benchmarks are.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

INTERVAL_SECONDS = 0.2
PROC = Path("/proc")
#: How the Spark JVM's command line is recognised (PySpark starts it through
#: ``spark-submit``; the launcher JVM that builds its command line is short-lived).
SPARK_JVM_CLASS = "org.apache.spark.deploy.SparkSubmit"


@dataclass
class ProcessPeak:
    """One process seen in the tree: its name, command line and peak resident KiB."""

    pid: int
    name: str
    command: str
    peak_kib: int = 0
    cpu_seconds: float = 0.0  # user + system, as of the last read

    @property
    def is_spark_jvm(self) -> bool:
        return SPARK_JVM_CLASS in self.command


@dataclass
class TreePeaks:
    """Peaks of a process tree: the root, every descendant seen, the simultaneous total."""

    root: ProcessPeak
    descendants: dict[int, ProcessPeak] = field(default_factory=dict)
    max_total_kib: int = 0

    @property
    def jvm(self) -> ProcessPeak | None:
        """The Spark JVM (by its main class; else the largest ``java``), if one ran."""
        jvms = [peak for peak in self.descendants.values() if peak.is_spark_jvm]
        jvms = jvms or [peak for peak in self.descendants.values() if peak.name == "java"]
        return max(jvms, key=lambda peak: peak.peak_kib, default=None)

    @property
    def root_kib(self) -> int:
        return self.root.peak_kib

    @property
    def jvm_kib(self) -> int:
        jvm = self.jvm
        return jvm.peak_kib if jvm else 0

    @property
    def sum_kib(self) -> int:
        """Root peak + JVM peak: an upper bound of the two together (peaks may not meet)."""
        return self.root_kib + self.jvm_kib

    @property
    def cpu_seconds(self) -> float:
        """User + system CPU of every process of the tree, as of the last read of each."""
        return self.root.cpu_seconds + sum(p.cpu_seconds for p in self.descendants.values())


def memory_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of ``pid`` in KiB; None if it is gone (or a zombie: no memory)."""
    try:
        text = (PROC / str(pid) / "status").read_text()
    except OSError:
        return None
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    if "VmRSS" not in found:
        return None
    return found["VmRSS"], found.get("VmHWM", found["VmRSS"])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` has used so far; None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # fields[0] is field 3 of proc(5), the state
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parent_ids() -> dict[int, int]:
    """Every live process id -> its parent's id."""
    parents = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # exited while listed
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = text.rpartition(")")[2].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(root: int, parents: dict[int, int] | None = None) -> list[int]:
    """The live descendants of ``root``, nearest first."""
    parents = parent_ids() if parents is None else parents
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        frontier = [child for pid in frontier for child in sorted(children.get(pid, []))]
        found.extend(frontier)
    return found


def _describe(pid: int) -> ProcessPeak:
    try:
        name = (PROC / str(pid) / "comm").read_text().strip()
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        name, raw = "?", b""
    return ProcessPeak(pid, name, raw.replace(b"\0", b" ").decode(errors="replace").strip())


class TreeSampler(threading.Thread):
    """Samples the memory of ``root_pid`` and its descendants until :meth:`stop`.

    Use as a context manager around the wait for the process::

        with TreeSampler(process.pid) as sampler:
            process.wait()
        peaks = sampler.peaks
    """

    def __init__(self, root_pid: int, interval_seconds: float = INTERVAL_SECONDS):
        super().__init__(name=f"rss-{root_pid}", daemon=True)
        self._interval = interval_seconds
        self._stop_event = threading.Event()
        self.peaks = TreePeaks(_describe(root_pid))

    def __enter__(self) -> TreeSampler:
        self.sample()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            self.sample()

    def stop(self) -> TreePeaks:
        """Stop sampling (after one last read); the peaks."""
        self._stop_event.set()
        if self.is_alive():
            self.join()
        return self.peaks

    def sample(self) -> None:
        """One read of the tree."""
        total = self._read(self.peaks.root)
        parents = parent_ids()
        commands = {self.peaks.root.pid: self.peaks.root.command}
        for pid in descendants(self.peaks.root.pid, parents):
            # Described again at every read: spark-submit's shell becomes the JVM by exec.
            now = _describe(pid)
            commands[pid] = now.command
            if now.command == commands.get(parents.get(pid, -1)):
                # Forked, not yet exec'd (the JVM spawns chmod and the like through
                # vfork): it shares its parent's memory, which would be counted twice.
                continue
            peak = self.peaks.descendants.setdefault(pid, now)
            if now.command:
                peak.name, peak.command = now.name, now.command
            total += self._read(peak)
        self.peaks.max_total_kib = max(self.peaks.max_total_kib, total)

    @staticmethod
    def _read(peak: ProcessPeak) -> int:
        memory, cpu = memory_kib(peak.pid), cpu_seconds(peak.pid)
        if memory is None or cpu is None:
            return 0
        rss, hwm = memory
        peak.peak_kib = max(peak.peak_kib, hwm, rss)
        peak.cpu_seconds = max(peak.cpu_seconds, cpu)
        return rss

    def live_pids(self) -> list[int]:
        """Processes of the tree seen so far that still run (a JVM outlives its parent
        by a moment): same id and same command line as when last read."""
        seen = [self.peaks.root, *self.peaks.descendants.values()]
        return [peak.pid for peak in seen if is_same_process(peak)]


def is_same_process(peak: ProcessPeak) -> bool:
    """True while ``peak``'s process runs (not a later process given its id)."""
    return memory_kib(peak.pid) is not None and _describe(peak.pid).command == peak.command


def wait_gone(pids: list[int], timeout_seconds: float) -> list[int]:
    """Wait until none of ``pids`` has memory left (exited); those still there after
    ``timeout_seconds``."""
    deadline = time.monotonic() + timeout_seconds
    left = [pid for pid in pids if memory_kib(pid) is not None]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if memory_kib(pid) is not None]
    return left
