"""Writing benchmark figures: the machine they ran on, and one section per benchmark."""

from __future__ import annotations

import os
import platform
import re
import statistics
import threading
from datetime import UTC, datetime
from pathlib import Path

TITLE = "# Benchmarks\n\nFigures from `make bench`; each section says its machine and command.\n"


def machine_line() -> str:
    """Cores, memory, CPU model, OS and Python of this machine, and the date."""
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    return (
        f"Machine: {os.cpu_count()} cores ({model}), {memory_gib:.0f} GiB, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        f"measured {when}."
    )


def spread(values: list[float], digits: int = 0) -> str:
    """``median (min-max)``."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"


def write_section(path: Path, title: str, lines: list[str], heading: str = TITLE) -> None:
    """Replace (or append) the ``## title`` section of the Markdown file at ``path``
    (a new file starts with ``heading``)."""
    text = path.read_text() if path.exists() else heading
    section = f"## {title}\n\n" + "\n".join(lines).rstrip() + "\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)


class LoadSampler(threading.Thread):
    """The 1-minute load average every few seconds while a benchmark runs: on a shared
    machine the figures mean little without it.

    Args:
        own_load: what of the load the benchmark itself makes, for the report line.
        interval_seconds: between two samples.
    """

    def __init__(self, own_load: str, interval_seconds: float = 5.0):
        super().__init__(name="load-sampler", daemon=True)
        self.own_load = own_load
        self._interval = interval_seconds
        self._stop_event = threading.Event()
        self.samples = [os.getloadavg()[0]]

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> str:
        """Stop sampling; the report's load line."""
        self._stop_event.set()
        if self.is_alive():
            self.join()
        self.samples.append(os.getloadavg()[0])
        return load_line(self.samples, self.own_load)


def load_line(samples: list[float], own_load: str) -> str:
    """The report's line for 1-minute load averages sampled from start to end."""
    return (
        f"Load: 1-minute load average {samples[0]:.2f} at the start, {samples[-1]:.2f} at "
        f"the end; during the run mean {statistics.fmean(samples):.2f}, max "
        f"{max(samples):.2f} (the benchmark itself accounts for about 1-2: {own_load})."
    )
