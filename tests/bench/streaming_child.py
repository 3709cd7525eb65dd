"""The migration as a Spark user would write it without chunkrunner: Structured Streaming.

    python -m tests.bench.streaming_child run --input DIR --output DIR --checkpoint DIR \\
        [--files-per-trigger 3]
    python -m tests.bench.streaming_child check --output DIR --one-shot DIR

``run`` is the streaming driver the benchmark times (and SIGKILLs): ``spark.readStream``
over the staged v1 files (whole files, the v1 schema of
:func:`samples.migration.transform.read_orders_v1`), ``maxFilesPerTrigger`` files per
micro-batch, ``trigger(availableNow=True)`` (every file there at the start, then stop)
and a checkpoint location. Each micro-batch is written by ``foreachBatch`` as our batches
are: ``judge`` once (persisted), then ``latest_orders`` and ``rejected`` as Parquet with
overwrite into ``<output>/<kind>/batch-<batch id>``.

That makes the output idempotent: Structured Streaming writes a micro-batch's offsets
(which files) to its log *before* running it and its commit *after*; a driver killed in
between re-runs the same batch id with the same files on restart, and the overwrite
replaces whatever the killed attempt left. (A driver killed while it plans a micro-batch,
after the file source logged its files but before the offsets log, comes back with that
micro-batch holding those files and the next ones: fewer, larger micro-batches, each
file still once. :func:`tests.bench.streaming.check_micro_batches` checks by files.)
The master comes from ``RUNNER_SPARK_MASTER`` and the conf from
``MigrateOrders.spark_conf``, as the one-shot run's.

Each micro-batch prints one JSON line (``{"batch": id, "started": epoch s, "seconds":
s}``) for the benchmark. ``check`` compares what the query wrote with the one-shot run's
output (rows and content checksums) and prints one JSON object (``ok``, ``lines``,
``batches``: output directories per kind); exit 1 if they differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.spark import SparkSettings, spark_session
from samples.migration.job import MigrateOrders
from samples.migration.layout import KINDS
from samples.migration.transform import CORRUPT, V1_FIELDS, judge, latest_orders, rejected
from samples.migration.verify import Counts, Verdict, written

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

FILES_PER_TRIGGER = 3
#: The output directory of micro-batch ``n`` (what makes a re-run overwrite its own).
BATCH_DIR = "batch-{:05d}"


def v1_stream(spark: SparkSession, input_dir: str, files_per_trigger: int) -> DataFrame:
    """The staged v1 files as a stream: the batch reader's schema and options."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(name, StringType()) for name in (*V1_FIELDS, CORRUPT)])
    return (
        spark.readStream.schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("maxFilesPerTrigger", files_per_trigger)
        .json(input_dir)
    )


class BatchWriter:
    """``foreachBatch``'s function: one micro-batch's two outputs, overwritten by id."""

    def __init__(self, output: str):
        self.output = output

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        started = time.time()
        judged = judge(frame).persist()  # both outputs parse each value once, as ours
        try:
            for kind, result in (("orders", latest_orders(judged)), ("rejects", rejected(judged))):
                path = f"{self.output}/{kind}/{BATCH_DIR.format(batch_id)}"
                result.write.mode("overwrite").parquet(path)
        finally:
            judged.unpersist()
        line = {"batch": batch_id, "started": started, "seconds": time.time() - started}
        print(json.dumps(line), flush=True)


def start(
    spark: SparkSession,
    input_dir: str,
    checkpoint: str,
    files_per_trigger: int,
    write: Callable[[DataFrame, int], None],
) -> StreamingQuery:
    """The query as ``run`` starts it, each micro-batch handed to ``write``."""
    return (
        v1_stream(spark, input_dir, files_per_trigger)
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def run(input_dir: str, output: str, checkpoint: str, files_per_trigger: int) -> None:
    spark = spark_session(SparkSettings.for_job(MigrateOrders))
    start(spark, input_dir, checkpoint, files_per_trigger, BatchWriter(output)).awaitTermination()


def check(output: Path, one_shot: Path) -> dict[str, Any]:
    spark = spark_session(SparkSettings.for_job(MigrateOrders))
    streamed = {
        kind: Counts.of(spark.read.parquet(str(output / kind / "batch-*"))) for kind in KINDS
    }
    reference = written(spark, one_shot)
    # The streaming query keeps no sums of its own: its output stands in for them.
    verdict = Verdict(chunked=streamed, one_shot=reference, summary=streamed)
    batches = {kind: len(list((output / kind).glob("batch-*"))) for kind in KINDS}
    return {"ok": verdict.ok, "lines": verdict.lines(), "batches": batches}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    running = commands.add_parser("run", help="the streaming query (timed by the caller)")
    running.add_argument("--input", required=True)
    running.add_argument("--output", required=True)
    running.add_argument("--checkpoint", required=True)
    running.add_argument("--files-per-trigger", type=int, default=FILES_PER_TRIGGER)
    checking = commands.add_parser("check", help="compare with the one-shot output (untimed)")
    checking.add_argument("--output", type=Path, required=True)
    checking.add_argument("--one-shot", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.input, args.output, args.checkpoint, args.files_per_trigger)
        return 0
    found = check(args.output, args.one_shot)
    print(json.dumps(found))
    return 0 if found["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
