"""How far one message travels through the code: module changes per chunk in a real worker.

``python -m tests.bench.message_path [--runs 3] [--detail]``

A worker loop (burst mode, default settings, the embedded store) runs a trivial job of
1 chunk and one of 21 chunks with a profile hook on every thread; each call into a
product module (``jobs/``, ``checkpoint/``, ``runner/``) from a different product module
is a *change*. Per chunk is the difference of the two runs over 20, so what a job does
once (planning, finalize, start-up and exit) drops out. Two counts:

- *engine path*: changes into ``runner/worker`` modules (*stops*) on the threads a
  message's life crosses (the receive loop, the chunk slots ``chunk-N``, the
  ``finisher``), the modules they stop in, and the *returns*: stops into a module the
  chunk's life already entered (a module entered 3 times per chunk is returned to
  twice). This is the path a newcomer follows reading the engine.
- *every change*: changes into any product module on every thread (heartbeat, lease
  keeper and the rest included), and the modules entered.

A module counts for a chunk when it is entered at least once per two chunks.
``--detail`` adds a table of the engine path's modules (entries per chunk, last run), the
rows to cut first on top.

docs/architecture.md quotes the figures with this command.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from checkpoint.backends import open_storage
from jobs.submit import submit
from runner.worker.loop import WorkerLoop, WorkerSettings
from tests.bench.chunk_jobs import Trivial

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jobs", "checkpoint", "runner")
ENGINE = "runner.worker."
PATH_THREADS = ("MainThread", "chunk-", "finisher")
SIZES = (1, 21)


def module_of(filename: str) -> str | None:
    """The dotted product module of a code object's file, or None outside the product."""
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] not in PACKAGES or relative.suffix != ".py":
        return None
    return ".".join(relative.with_suffix("").parts).removesuffix(".__init__")


@dataclass
class Trace:
    """Module changes seen by the profile hook, per thread name."""

    changes: Counter[str] = field(default_factory=Counter)  # thread -> changes
    entered: dict[str, list[str]] = field(default_factory=dict)  # thread -> modules entered
    _last: dict[int, str] = field(default_factory=dict)
    _names: dict[str, str | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        filename = frame.f_code.co_filename
        module = self._names.get(filename, "")
        if module == "":
            module = self._names[filename] = module_of(filename)
        if module is None:
            return
        ident = threading.get_ident()
        if self._last.get(ident) == module:
            return
        self._last[ident] = module
        name = threading.current_thread().name
        with self._lock:
            self.changes[name] += 1
            self.entered.setdefault(name, []).append(module)

    def path(self) -> Counter[str]:
        """Entries into each engine module on the message's threads."""
        entries: Counter[str] = Counter()
        for thread, modules in self.entered.items():
            if not thread.startswith(PATH_THREADS):
                continue
            previous = None
            for module in modules:
                if module.startswith(ENGINE) and module != previous:
                    entries[module] += 1
                    previous = module
        return entries

    def every(self) -> Counter[str]:
        """Entries into each product module on every thread."""
        return Counter(m for entered in self.entered.values() for m in entered)


def traced(chunks: int) -> Trace:
    """One job of ``chunks`` trivial chunks run to its end by a burst worker, traced."""
    trace = Trace()
    with tempfile.TemporaryDirectory() as where, open_storage(where) as storage:
        loop = WorkerLoop(storage, [Trivial], WorkerSettings(burst=True))
        submit(Trivial, {"chunks": chunks}, storage=storage)
        threading.setprofile(trace.hook)
        sys.setprofile(trace.hook)
        try:
            loop.run()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    return trace


@dataclass(frozen=True)
class PerChunk:
    """A chunk's share of the module changes (the 21-chunk run less the 1-chunk one,
    over 20), by module."""

    path: dict[str, float]
    every: dict[str, float]

    @property
    def stops(self) -> float:
        return sum(self.path.values())

    @property
    def returns(self) -> float:
        """Stops into a module already entered in the chunk's life."""
        return sum(max(0.0, n - 1) for n in self.path.values())

    def most(self, entries: dict[str, float], count: int = 5) -> str:
        top = sorted(entries.items(), key=lambda item: -item[1])[:count]
        return ", ".join(f"{module.removeprefix('runner.worker.')} {n:.1f}" for module, n in top)


def _share(small: Counter[str], large: Counter[str], span: int) -> dict[str, float]:
    share = {m: (large[m] - small[m]) / span for m in large}
    return {m: n for m, n in share.items() if n >= 0.5}


def per_chunk() -> PerChunk:
    small, large = (traced(n) for n in SIZES)
    span = SIZES[1] - SIZES[0]
    return PerChunk(
        _share(small.path(), large.path(), span), _share(small.every(), large.every(), span)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--detail", action="store_true", help="entries per engine module")
    arguments = parser.parse_args()
    runs = [per_chunk() for _ in range(arguments.runs)]
    median = statistics.median
    last = runs[-1]
    print(
        f"engine path per chunk: {median(r.stops for r in runs):.1f} stops in "
        f"{median(len(r.path) for r in runs):.0f} modules, {median(r.returns for r in runs):.1f} "
        f"returns; most entered: {last.most(last.path)}"
    )
    print(
        f"every change per chunk: {median(sum(r.every.values()) for r in runs):.1f} into "
        f"{median(len(r.every) for r in runs):.0f} modules; most entered: {last.most(last.every)}"
    )
    if arguments.detail:
        print(detail(last.path))


def detail(path: dict[str, float]) -> str:
    """The engine path's modules as a table: entries per chunk, most first."""
    rows = sorted(path.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join(f"  {n:5.1f}  {module.removeprefix(ENGINE)}" for module, n in rows)


if __name__ == "__main__":
    main()
