"""Writing benchmark figures: the machine they ran on, and one section per benchmark."""

from __future__ import annotations

import os
import platform
import re
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


def write_section(path: Path, title: str, lines: list[str]) -> None:
    """Replace (or append) the ``## title`` section of the Markdown file at ``path``."""
    text = path.read_text() if path.exists() else TITLE
    section = f"## {title}\n\n" + "\n".join(lines).rstrip() + "\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)
