"""The races fenced chunk output must survive, staged step by step on any Spark session.

Each scenario runs two attempts of one chunk (ChunkEnvironments: the second is the
first's ``next_attempt``, holding what the first published) against one output path,
stops the first at a chosen point, lets the second run to the end, then lets the first
go on, and returns what a reader then finds. Used by tests/jobs/spark/test_spark.py (a
classic local session) and tests/jobs/spark/test_spark_connect.py (a Connect client of the
loopback cluster): the same steps on both kinds of session.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoint.errors import LeaseLost
from jobs import Chunk, ChunkedJob
from jobs.spark.chunk_output import (
    ATTEMPTS_DIR,
    ChunkCommit,
    content_checksum,
    finalize_outputs,
    read_commit,
    write_chunk_output,
)
from jobs.summary import JobSummary
from jobs.testing import ChunkEnvironment
from tests.jobs.spark_jobs import orders_frame

#: Longest a staged step waits for the test to let it go on (never reached when green).
STEP_WAIT_SECONDS = 120.0


class OutputJob(ChunkedJob):
    """A job whose chunks the scenarios drive by hand."""

    def split(self, params: Any) -> Any:
        yield from ()

    def process(self, chunk: Chunk) -> None:
        raise NotImplementedError("the scenarios write for the chunk themselves")


class StallingEnvironment(ChunkEnvironment):
    """An attempt that stops before (or just after) its publication until let go."""

    def __init__(self, *, after: bool = False, **kwargs: Any):
        super().__init__(OutputJob, job_id="fenced", index=3, **kwargs)
        self.after = after
        self.reached = threading.Event()
        self.go_on = threading.Event()

    def publish(self, name: str, record: Any) -> None:
        if not self.after:
            self._stall()
        super().publish(name, record)
        if self.after:
            self._stall()

    def _stall(self) -> None:
        if not self.reached.is_set():
            self.reached.set()
            assert self.go_on.wait(STEP_WAIT_SECONDS), "the test never let the attempt go on"


def chunk_of(env: ChunkEnvironment) -> Chunk:
    """The chunk ``env``'s attempt would hand to ``process``."""
    return Chunk(
        job_id=env.job_id,
        index=env.index,
        payload=None,
        params=None,
        state=None,
        attempt=env.attempt,
        control=env,
    )


@dataclass
class Outcome:
    first_error: BaseException | None
    second: ChunkCommit
    found: ChunkCommit | None
    rows_read: int
    checksum_read: str
    expected_checksum: str
    leftovers_before_finalize: list[str]
    leftovers_after_finalize: list[str]
    manifest: list[tuple[int, str, ChunkCommit]]


def _in_thread(action: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def slow_frame(spark: Any, flag: Path, first: int, last: int) -> Any:
    """``orders_frame`` whose rows wait for ``flag`` to exist before they are written."""
    from pyspark.sql import functions as F

    flag_path = str(flag)

    def wait_for_flag(key: int) -> int:
        import os
        import time as clock

        deadline = clock.monotonic() + STEP_WAIT_SECONDS
        while not os.path.exists(flag_path) and clock.monotonic() < deadline:
            clock.sleep(0.05)
        return key

    held = F.udf(wait_for_flag, "long", useArrow=False)
    # One task: the other core stays free for the attempt that overtakes this one.
    frame = orders_frame(spark, first, last).coalesce(1)
    return frame.withColumn("order_id", held("order_id"))


def race(spark: Any, path: str, attempts_dir: Path, stage: str, scratch: Path) -> Outcome:
    """Run the scenario ``stage`` against output ``path`` (``attempts_dir``: where its
    attempt directories are on this machine).

    - ``late-write``: the first attempt's write completes only after the second
      attempt has published;
    - ``before-publish``: the first attempt wakes between its write and its publish;
    - ``after-publish``: the first attempt published, then stalls before moving its
      output into place, and wakes after the second published and moved its own.
    """
    first = StallingEnvironment(after=stage == "after-publish")
    wanted = orders_frame(spark, 0, 30)
    if stage == "late-write":
        flag = scratch / "let-the-first-write-finish"
        frame = slow_frame(spark, flag, 0, 30)
        first.go_on.set()  # its publication is not held: its write is
    else:
        frame = wanted
    thread, errors = _in_thread(lambda: write_chunk_output(frame, path, chunk=chunk_of(first)))
    if stage != "late-write":
        assert first.reached.wait(STEP_WAIT_SECONDS), "the first attempt never got there"
    else:
        _wait_for_rows_being_written(attempts_dir)
    # The first attempt is now dead to us: its lease ran out and the chunk is re-run.
    first.lose_lease("lease ran out while the attempt stalled (staged by the test)")
    second_env = first.next_attempt()
    second = write_chunk_output(orders_frame(spark, 0, 30), path, chunk=chunk_of(second_env))
    if stage == "late-write":
        flag.touch()
    else:
        first.go_on.set()
    thread.join(STEP_WAIT_SECONDS)
    assert not thread.is_alive(), "the first attempt never ended"
    found = read_commit(path, spark=spark)
    back = spark.read.parquet(found.path if found else path)
    before = _leftovers(attempts_dir)
    summary = JobSummary(
        "fenced", 4, 4, lambda: iter(()), _outputs=lambda: iter([(3, second_env.published())])
    )
    manifest = list(finalize_outputs(summary, spark=spark))
    return Outcome(
        first_error=errors[0] if errors else None,
        second=second,
        found=found,
        rows_read=back.count(),
        checksum_read=content_checksum(back),
        expected_checksum=content_checksum(wanted),
        leftovers_before_finalize=before,
        leftovers_after_finalize=_leftovers(attempts_dir),
        manifest=manifest,
    )


def _wait_for_rows_being_written(attempts_dir: Path) -> None:
    """Until the first attempt's write has created its directory (its tasks run)."""
    deadline = time.monotonic() + STEP_WAIT_SECONDS
    while not _leftovers(attempts_dir):
        assert time.monotonic() < deadline, "the first attempt's write never started"
        time.sleep(0.05)


def _leftovers(attempts_dir: Path) -> list[str]:
    return sorted(entry.name for entry in attempts_dir.glob("*")) if attempts_dir.is_dir() else []


def attempts_of(output_dir: Path) -> Path:
    """Where the attempts of the output at ``output_dir`` write."""
    return output_dir.parent / ATTEMPTS_DIR


def check(outcome: Outcome, path: str, stage: str, renamed: bool = True) -> None:
    """What every scenario must end in: the second attempt's output, whole, and only it."""
    if stage == "late-write":
        # The second attempt removed the dead one's directory as it published: that
        # write fails, or ends and is refused at its publication. Either way: stopped.
        assert outcome.first_error is not None
    else:
        assert isinstance(outcome.first_error, LeaseLost), outcome.first_error
    assert outcome.found == outcome.second, (outcome.found, outcome.second)
    assert outcome.second.attempt and outcome.found is not None
    if renamed:
        assert outcome.found.path == path
    assert outcome.rows_read == outcome.second.rows == 30
    assert outcome.checksum_read == outcome.second.checksum == outcome.expected_checksum
    assert outcome.manifest == [(3, path, outcome.second)]
    if renamed:
        assert outcome.leftovers_after_finalize == []
