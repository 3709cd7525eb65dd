"""The demo's ``--bad-rows`` path: broken rows written into the source, found, fixed.

The story: the legacy system is live, and once the stage step has copied the export, a
faulty legacy job appends broken lines to two of its blobs. The transform reads the
staged copy, so its output is right for the data as staged, but it no longer accounts
for the source, and the verify step will not sign it off: the chunks holding those two
blobs fail (not retried: reading the same source again gives the same answer), verify
fails, and publish stays blocked. Someone removes the broken lines (here: the blobs
are put back as they were staged) and runs ``runner poison redrive <verify step>``:
only the two failed chunks of verify run again, verify finalizes, and publish starts by
itself. :func:`chunks_run_since` counts what ran after the redrive, to compare with
what a rerun from scratch would run: every chunk of every step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from samples.migration.demo_watch import PipelineWatch, start_workers, wait_for_exit
from samples.migration.generate import Generated

#: What the faulty legacy job appends to each blob: a truncated line, an amount that is
#: no amount, a line that is not JSON at all.
PLANTED = (
    b'{"order_id": "ORD-99", "order_date": "2024-01-0\n',
    b'{"order_id": 991, "order_date": "2024-01-05", "updated_at": "x", "amount": "$-"}\n',
    b"#### export interrupted ####\n",
)


@dataclass(frozen=True)
class Planted:
    """The blobs the bad rows went into, with their bytes from before."""

    container: str
    before: dict[str, bytes]

    @property
    def lines(self) -> int:
        return len(PLANTED) * len(self.before)


def targets(names: Sequence[str]) -> list[str]:
    """The blobs to spoil: the second and the second-to-last (with the demo's 8 blobs and
    verify chunks of 2, in the first and the last of its 4 chunks)."""
    count = len(names)
    return sorted({names[min(1, count - 1)], names[max(0, count - 2)]})


def plant(storage: Storage, container: str, names: Sequence[str]) -> Planted:
    """Append :data:`PLANTED` to each of ``names``; what they held before."""
    before = {}
    for name in names:
        before[name] = storage.blobs.get(container, name)
        storage.blobs.put(container, name, before[name] + b"".join(PLANTED))
    return Planted(container, before)


def fix(storage: Storage, planted: Planted) -> None:
    """Remove the planted lines: each blob as it was before."""
    for name, data in planted.before.items():
        storage.blobs.put(planted.container, name, data)


@dataclass(frozen=True)
class RunAgain:
    """Chunks that started at or after a moment (the redrive), by step, and every chunk
    of each step (what a rerun from scratch would run)."""

    started: dict[str, list[int]] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(len(indexes) for indexes in self.started.values())

    @property
    def from_scratch(self) -> int:
        return sum(self.total.values())

    def line(self) -> str:
        """``2 (verify #0, #3) of the 12 ... (stage 2, transform 2, ...)``."""
        ran = ", ".join(
            f"{step} " + ", ".join(f"#{index}" for index in indexes)
            for step, indexes in self.started.items()
            if indexes
        )
        per_step = ", ".join(f"{step} {total}" for step, total in self.total.items())
        return (
            f"{self.count} ({ran or 'none'}) of the {self.from_scratch} a rerun from "
            f"scratch would run ({per_step})"
        )


def chunks_run_since(store: CheckpointStore, steps: dict[str, str], since: datetime) -> RunAgain:
    """Of each step (name -> job id), the chunks whose last attempt started at or after
    ``since``, and how many chunks it has."""
    found = RunAgain()
    for name, job_id in steps.items():
        chunks = list(store.chunks(job_id))
        found.total[name] = len(chunks)
        found.started[name] = [
            chunk.index
            for chunk in chunks
            if isinstance(started := chunk.properties.get("started_on"), datetime)
            and started >= since
        ]
    return found


# --------------------------------------------------------------------------- the demo's path


@dataclass
class BadRows:
    """What ``--bad-rows`` did: the blobs spoiled, what verify and publish said then
    (``differences``: each failed verify chunk's error, by index), and what ran again
    after the redrive."""

    planted: Planted | None = None
    verify_error: str | None = None
    publish_state: str | None = None
    publish_blocked: str | None = None
    differences: dict[int, str] | None = None
    run_again: RunAgain | None = None
    #: From the workers' start to the pipeline failed at verify (the kill included),
    #: and from the redrive to the pipeline done.
    failed_after_seconds: float = 0.0
    redrive_seconds: float = 0.0

    @property
    def only_what_differed_ran(self) -> bool:
        """The chunks run again after the redrive were exactly verify's failed ones."""
        if self.run_again is None or self.differences is None:
            return False
        ran = self.run_again.started
        return ran.get("verify") == sorted(self.differences) and self.run_again.count == len(
            self.differences
        )


def plant_when_staged(
    watch: PipelineWatch, opened: Storage, generated: Generated, bad: BadRows
) -> None:
    """Spoil two source blobs, now that the stage step copied them (the verify step must
    not have started: it would have read them unspoiled)."""
    if watch.store.get_job(watch.steps.verify).state != "waiting":
        raise RuntimeError(f"{watch.steps.verify} started before the source could be spoiled")
    names = targets(generated.names)
    bad.planted = plant(opened, generated.container, names)
    watch.say(
        f"   --bad-rows: stage is done; a faulty legacy job now appends {len(PLANTED)} broken "
        f"lines to each of {', '.join(names)} in the source (the transform reads the staged copy)"
    )


def fix_and_redrive(watch: PipelineWatch, opened: Storage, bad: BadRows) -> str:
    """Show verify failed and publish blocked; fix the source, redrive verify's failed
    chunks, start two workers and watch the pipeline to its end; its state."""
    steps, say, runner = watch.steps, watch.say, watch.runner
    bad.failed_after_seconds = time.monotonic() - watch.started
    _, by_name = watch.status()
    verify, publish = by_name["verify"], by_name["publish"]
    bad.verify_error, bad.publish_state = verify["error"], publish["state"]
    bad.publish_blocked = publish["blocked"]
    bad.differences = {entry["index"]: entry["error_message"] for entry in verify["poisoned"]}
    say(f"   verify failed: {verify['error']}")
    for index, message in sorted(bad.differences.items()):
        say(f"   verify chunk #{index}: {message}")
    say(f"   publish: {publish['blocked']}")
    wait_for_exit(runner, say)
    if bad.planted is None:
        raise RuntimeError("verify failed, but no bad rows were planted")
    fix(opened, bad.planted)
    say(
        f"   fixed the source: the {bad.planted.lines} broken lines removed from "
        f"{', '.join(bad.planted.before)}"
    )
    since, redriven = watch.store.clock.now(), time.monotonic()
    redrove = runner.run("poison", "redrive", steps.verify).strip()
    say(f"   runner poison redrive {steps.verify}: {redrove}")
    start_workers(runner, watch.worker_args, say)
    watch.expect_verify_failure = False
    state, _ = watch.run(kill=False)
    bad.redrive_seconds = time.monotonic() - redriven
    bad.run_again = chunks_run_since(watch.store, steps.by_name(), since)
    say(
        f"   chunks run again after the redrive: {bad.run_again.line()}; "
        f"{bad.redrive_seconds:.0f} s from the redrive to the pipeline done"
    )
    return state
