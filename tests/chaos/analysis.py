"""What a chaos run did, judged from its own records, not from the runner's opinion.

Items come from the sink and the event log of :mod:`tests.chaos.chaos_job`; fences from
the workers' logs, judged against the ``start`` events: a chunk attempt stopped because
its lease was lost, or finished but fenced, is **fenced by its own write** (a
*self-fence*) when no other claim of that chunk (a ``start`` with a higher attempt) began
before the fence was logged: it can only come from the worker's own earlier write having
been applied while it was told otherwise (an ambiguous failure). A stop because the
worker's own lease ran out with nobody taking over (the store did not answer its
renewals within the lease) is a **lapse**, counted apart: the lease doing its job, not a
write mistaken for another's. A fence of the chunk a worker held while the harness had
it SIGSTOPped is the pause's doing and is not counted.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.chaos.chaos_job import SINK_DIR, item_name

#: A claim logged this soon after a fence still counts as before it: a worker's start
#: event follows its claim by milliseconds, and log times are truncated to 1 ms.
START_TOLERANCE_SECONDS = 0.1

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ \[[^\]]*\] [\w.]+: (.*)$")
_FENCES = (
    ("lease lost", re.compile(r"^chunk (\d+) of (\S+) stopped: lease lost \((.*)\)$")),
    ("finished but fenced", re.compile(r"^chunk (\d+) of (\S+): finished but fenced \((.*)\)$")),
    ("finished but fenced", re.compile(r"^chunk (\d+) of (\S+) finished but fenced: (.*)$")),
)
_CAUSES = (
    ("record changed", ("record changed", "took over", "changed: fenced")),
    ("renewal refused", ("renewal refused",)),
    ("renewals failed", ("renewals failed",)),
    ("lease ran out", ("ran out before it was renewed",)),
    ("max_chunk_seconds", ("max_chunk_seconds",)),
)

#: Causes of a stop that mean the worker's own lease ran out (see the module's doc).
_LAPSES = ("lease ran out", "renewals failed")


@dataclass(frozen=True)
class Fence:
    """One fenced stop of a chunk attempt, as a worker logged it."""

    chunk: int
    pid: int
    at: float
    how: str
    cause: str
    reason: str


@dataclass
class Fences:
    """Every fence of a run, judged."""

    all: list[Fence] = field(default_factory=list)
    own: list[Fence] = field(default_factory=list)
    taken_over: list[Fence] = field(default_factory=list)
    paused: list[Fence] = field(default_factory=list)
    #: Self-fences after which some attempt of the chunk was claimed but never started
    #: (possibly another worker's ambiguous claim, of unknown time).
    own_with_gap: list[Fence] = field(default_factory=list)
    #: Stops because the worker's own lease ran out, nobody taking over.
    lapsed: list[Fence] = field(default_factory=list)

    def causes(self, which: list[Fence]) -> Counter[str]:
        return Counter(f"{fence.how}: {fence.cause}" for fence in which)


@dataclass
class Items:
    """The sink against the job's items."""

    expected: int
    lost: int
    applied_more_than_once: int
    extra_applications: int
    applications: int


def log_time(stamp: str) -> float:
    """A log line's ``asctime`` (local time) as seconds since the epoch."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _cause(reason: str) -> str:
    for cause, phrases in _CAUSES:
        if any(phrase in reason for phrase in phrases):
            return cause
    return "other"


def parse_fences(log: str, job_id: str, pid: int) -> list[Fence]:
    """The fenced stops of ``job_id``'s chunks in one worker's log."""
    found = []
    for line in log.splitlines():
        matched = _LINE.match(line)
        if not matched:
            continue
        for how, pattern in _FENCES:
            fence = pattern.match(matched.group(2))
            if fence and fence.group(2) == job_id:
                reason = fence.group(3)
                found.append(
                    Fence(
                        int(fence.group(1)),
                        pid,
                        log_time(matched.group(1)),
                        how,
                        _cause(reason),
                        reason,
                    )
                )
                break
    return found


def judge(
    fences: list[Fence],
    starts: list[dict[str, Any]],
    pauses: list[tuple[int, float, float]],
) -> Fences:
    """Sort fences into own, taken over and paused.

    Args:
        fences: from every worker's log.
        starts: the ``start`` events (chunk, attempt, pid, at).
        pauses: (pid, stopped at, continued at) of each SIGSTOP.
    """
    judged = Fences(all=sorted(fences, key=lambda fence: fence.at))
    for fence in judged.all:
        of_chunk = [s for s in starts if s["chunk"] == fence.chunk]
        mine = [s for s in of_chunk if s["pid"] == fence.pid and s["at"] <= fence.at + 1e-3]
        began = max(mine, key=lambda s: s["at"]) if mine else None
        attempt = began["attempt"] if began else 0
        since = began["at"] if began else 0.0
        if any(pid == fence.pid and stop < fence.at and cont > since for pid, stop, cont in pauses):
            judged.paused.append(fence)
            continue
        later = [s for s in of_chunk if s["attempt"] > attempt]
        if any(s["at"] < fence.at + START_TOLERANCE_SECONDS for s in later):
            judged.taken_over.append(fence)
            continue
        if fence.cause in _LAPSES:
            judged.lapsed.append(fence)
            continue
        judged.own.append(fence)
        if later and min(s["attempt"] for s in later) > attempt + 1:
            judged.own_with_gap.append(fence)
    return judged


def count_items(workdir: Path, chunks: int, items: int, applies: list[dict[str, Any]]) -> Items:
    """Lost items (no sink file), and items applied more than once (an ``O_EXCL`` create
    that found its file: every re-application, whatever the log says before it)."""
    sink = workdir / SINK_DIR
    present = {path.name for path in sink.iterdir()} if sink.is_dir() else set()
    expected = {item_name(c, i) for c in range(chunks) for i in range(items)}
    again = Counter((a["chunk"], a["item"]) for a in applies if not a["new"])
    return Items(
        expected=len(expected),
        lost=len(expected - present),
        applied_more_than_once=len(again),
        extra_applications=sum(again.values()),
        applications=len(applies),
    )
