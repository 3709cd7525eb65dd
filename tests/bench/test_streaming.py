"""The streaming bench's checks of a crashed Structured Streaming run, and the Spark
behaviour behind them.

Planning micro-batch N, Spark's file source logs the files it picks
(``sources/0/<entry>``) before the query logs ``offsets/N``. A driver killed between
the two comes back with micro-batch N reading that orphaned entry and the next one:
6 files where ``maxFilesPerTrigger`` is 3, one micro-batch fewer in all (a fast-test run
once saw 7 of 8 and was thought short). The bench checks such a run by files
(:func:`tests.bench.streaming.check_micro_batches`), not by counting micro-batches.

The checks are tested on checkpoints laid out as Spark writes them; the Spark test puts
a real query in the window deterministically, without a kill or a timer: its
``foreachBatch`` of micro-batch 0 creates ``offsets/1`` ahead of Spark, so Spark's own
guard (a metadata log never overwrites an entry) fails the query right after the source
logged entry 1: the checkpoint a SIGKILL in the window leaves, once that file is removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from samples.migration.layout import KINDS
from tests.bench import migration, streaming
from tests.bench.streaming import MicroBatch, check_micro_batches, merged, micro_batches


def _staged(folder: Path, count: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"{number:05d}.json" for number in range(count)]
    for name in names:
        (folder / name).write_text("{}\n")
    return names


def _checkpoint(root: Path, input_dir: Path, entries: list[list[str]], ends: list[int]) -> Path:
    """A checkpoint as Spark writes one: the file source's log entries (``entries``: file
    names), and one committed micro-batch per end offset in ``ends``; with the output
    folders the query's ``foreachBatch`` writes."""
    checkpoint = root / "stream-checkpoint"
    for folder in ("sources/0", "offsets", "commits"):
        (checkpoint / folder).mkdir(parents=True)
    for entry, names in enumerate(entries):
        lines = [
            json.dumps(
                {"path": (input_dir / name).as_uri(), "timestamp": 1_700_000_000, "batchId": entry}
            )
            for name in names
        ]
        (checkpoint / "sources" / "0" / str(entry)).write_text("\n".join(["v1", *lines]))
    metadata = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000})
    for batch, end in enumerate(ends):
        offsets = ["v1", metadata, json.dumps({"logOffset": end})]
        (checkpoint / "offsets" / str(batch)).write_text("\n".join(offsets))
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        for kind in KINDS:
            (root / "stream" / kind / f"batch-{batch:05d}").mkdir(parents=True)
    return checkpoint


def _in_threes(names: list[str]) -> list[list[str]]:
    return [names[first : first + 3] for first in range(0, len(names), 3)]


def test_a_micro_batch_that_read_two_source_entries_is_whole(tmp_path: Path):
    # Given 24 staged files, the source's 8 entries of 3, and the offsets a restart after
    # a kill between entry 2 and offsets/2 writes (as in the run seen: batches 2-6 after it)
    input_dir = tmp_path / "input"
    names = _staged(input_dir, 24)
    checkpoint = _checkpoint(tmp_path, input_dir, _in_threes(names), [0, 1, 3, 4, 5, 6, 7])

    # When the harness checks the run
    batches = check_micro_batches(checkpoint, input_dir, tmp_path / "stream")

    # Then it is whole: 7 micro-batches, the third read entries 2 and 3, every file once
    assert [batch.entries for batch in batches] == [(0,), (1,), (2, 3), (4,), (5,), (6,), (7,)]
    assert batches[2] == MicroBatch(2, (2, 3), tuple(names[6:12]))
    assert merged(batches).startswith(
        "micro-batch 2 read 6 files, the file source's log "
        "entries 2-3 (the kill fell after the source logged "
        "entry 2, before the offsets log named micro-batch 2)"
    )


def test_an_uninterrupted_run_reads_one_entry_a_micro_batch(tmp_path: Path):
    input_dir = tmp_path / "input"
    names = _staged(input_dir, 24)
    checkpoint = _checkpoint(tmp_path, input_dir, _in_threes(names), list(range(8)))
    assert [
        len(b.files) for b in check_micro_batches(checkpoint, input_dir, tmp_path / "stream")
    ] == [3] * 8
    assert merged(micro_batches(checkpoint)) == ""


def test_a_compacted_source_log_is_read_too(tmp_path: Path):
    # Every 10th entry Spark compacts the source log into <n>.compact (entries 0..n)
    input_dir = tmp_path / "input"
    names = _staged(input_dir, 36)
    checkpoint = _checkpoint(tmp_path, input_dir, _in_threes(names), list(range(12)))
    log = checkpoint / "sources" / "0"
    compact = ["v1"] + [
        line for entry in range(10) for line in (log / str(entry)).read_text().splitlines()[1:]
    ]
    (log / "9.compact").write_text("\n".join(compact))
    for entry in range(10):
        (log / str(entry)).unlink()
    assert len(check_micro_batches(checkpoint, input_dir, tmp_path / "stream")) == 12


@pytest.mark.parametrize(
    ("ends", "folders", "says"),
    [
        # The last entry never read: a micro-batch missing at the end
        ([0, 1, 2, 3, 4, 5, 6], None, "staged files no micro-batch read: ['00021.json'"),
        # An output folder no committed micro-batch wrote
        ([0, 1, 2, 3, 4, 5, 6, 7], ["batch-00008"], "orders: folders"),
    ],
)
def test_a_run_that_is_not_whole_raises(
    tmp_path: Path, ends: list[int], folders: list[str] | None, says: str
):
    input_dir = tmp_path / "input"
    names = _staged(input_dir, 24)
    checkpoint = _checkpoint(tmp_path, input_dir, _in_threes(names), ends)
    for folder in folders or []:
        (tmp_path / "stream" / "orders" / folder).mkdir()
    with pytest.raises(RuntimeError, match="is not whole") as raised:
        check_micro_batches(checkpoint, input_dir, tmp_path / "stream")
    assert says in str(raised.value)


def test_a_gap_in_the_commit_log_raises(tmp_path: Path):
    input_dir = tmp_path / "input"
    names = _staged(input_dir, 9)
    checkpoint = _checkpoint(tmp_path, input_dir, _in_threes(names), [0, 1, 2])
    (checkpoint / "commits" / "1").unlink()
    with pytest.raises(RuntimeError, match=r"committed micro-batches \[0, 2\]"):
        check_micro_batches(checkpoint, input_dir, tmp_path / "stream")


def test_a_file_read_twice_is_named(tmp_path: Path):
    input_dir = tmp_path / "input"
    names = _staged(input_dir, 6)
    checkpoint = _checkpoint(tmp_path, input_dir, [names[:3], [names[2], *names[3:]]], [0, 1])
    with pytest.raises(RuntimeError, match=r"more than one micro-batch: \['00002.json'\]"):
        check_micro_batches(checkpoint, input_dir, tmp_path / "stream")


# --------------------------------------------------------------------------- real Spark

#: 9 files, 3 a micro-batch: 3 micro-batches uninterrupted.
FILES = 9


@pytest.fixture
def spark(local_spark: Any) -> Any:
    """The run's one local session (tests/conftest.py), the job's settings: started once
    for every module that asks, not once more for this one."""
    return local_spark


class FailNextPlan:
    """``foreachBatch``: the bench's writer, then, after micro-batch ``at``, the offsets
    log's next entry created ahead of Spark (its add then refuses, failing the query)."""

    def __init__(self, output: Path, checkpoint: Path, at: int):
        from tests.bench.streaming_child import BatchWriter

        self.write, self.checkpoint, self.at = BatchWriter(str(output)), checkpoint, at

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.write(frame, batch_id)
        if batch_id == self.at:
            (self.checkpoint / "offsets" / str(batch_id + 1)).touch()


def _outputs(spark: Any, output: Path) -> dict[str, Any]:
    from samples.migration.verify import Counts

    return {kind: Counts.of(spark.read.parquet(str(output / kind / "batch-*"))) for kind in KINDS}


@pytest.mark.spark
@pytest.mark.timeout(240)  # one local session, 3 micro-batches and one batch; ~1 min at load 5
def test_a_restart_after_the_source_logged_its_files_merges_two_micro_batches(
    tmp_path: Path, spark: Any
):
    from pyspark.errors import StreamingQueryException

    from samples.migration.transform import read_orders_v1
    from tests.bench.streaming_child import FILES_PER_TRIGGER, BatchWriter, start

    # Given 9 staged v1 files of the bench's input, and the bench's writer over all 9 at
    # once (the one-shot run's output for them: an order's versions share a file)
    data = migration.prepare(tmp_path, 2_400, 3)
    input_dir = tmp_path / "stream-input"
    streaming.stage_whole(data, input_dir)
    for extra in sorted(input_dir.iterdir())[FILES:]:
        extra.unlink()
    whole = read_orders_v1(spark, [str(path) for path in sorted(input_dir.iterdir())])
    BatchWriter(str(tmp_path / "one-shot"))(whole, 0)

    # When the query stops after its source logged micro-batch 1's files, before the
    # offsets log (Spark's guard refuses the entry made ahead of it: no kill, no timer)
    crashed = tmp_path / "crashed"
    checkpoint, output = crashed / "stream-checkpoint", crashed / "stream"
    query = start(
        spark,
        str(input_dir),
        str(checkpoint),
        FILES_PER_TRIGGER,
        FailNextPlan(output, checkpoint, at=0),
    )
    with pytest.raises(StreamingQueryException):
        query.awaitTermination()
    (checkpoint / "offsets" / "1").unlink()
    assert [streaming.logged(checkpoint, log) for log in ("commits", "offsets", "sources/0")] == [
        1,
        1,
        2,
    ]

    # And it is started again on its checkpoint
    start(
        spark, str(input_dir), str(checkpoint), FILES_PER_TRIGGER, BatchWriter(str(output))
    ).awaitTermination()

    # Then micro-batch 1 read the orphaned entry and the next: 2 micro-batches, not 3
    batches = check_micro_batches(checkpoint, input_dir, output)
    assert [(batch.entries, len(batch.files)) for batch in batches] == [((0,), 3), ((1, 2), 6)]
    # And the output is the one-shot's
    assert _outputs(spark, output) == _outputs(spark, tmp_path / "one-shot")
