"""The migration benchmark's child processes: the plain one-shot run, and the check.

    RUNNER_STORAGE=STORE python -m tests.bench.migration_child one-shot --params JSON --output DIR
    RUNNER_STORAGE=STORE python -m tests.bench.migration_child check --params JSON \\
        --job-id JOB_ID --one-shot DIR

``one-shot`` is the plain Spark job the benchmark times, in a fresh process as a worker
is: :func:`samples.migration.verify.write_one_shot` (the demo's one-shot run) over every
input blob the job's ``--params`` name, with the job's Spark settings (``local[*]``
and ``MigrateOrders.spark_conf``), Parquet to ``--output``.

``check`` runs after both, untimed: :func:`samples.migration.verify.compare` of the job's
committed outputs with the one-shot's (rows and content checksums), and the job summary's
own sums. It prints one JSON object (``ok``, the verdict's ``lines``, the ``summary``'s
totals) and exits 1 if they differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from checkpoint.storage import Storage
from jobs.spark import SparkSettings, spark_session
from samples.migration.job import MigrateOrders
from samples.migration.layout import MigrationParams, get_json
from samples.migration.verify import compare, write_one_shot

#: The summary's totals the check reports (the benchmark compares them with the generator's).
TOTALS = ("chunks", "rows_in", "rows_out", "rows_rejected")


def input_names(storage: Storage, params: MigrationParams) -> list[str]:
    """The input blobs, listed as the job's ``split`` lists them."""
    blobs = storage.blobs.list(params.input_container, params.input_prefix)
    return sorted(blob.name for blob in blobs)


def one_shot(params: MigrationParams, output: Path) -> None:
    spark = spark_session(SparkSettings.for_job(MigrateOrders))
    with params.open_storage() as storage:
        write_one_shot(spark, storage, params, input_names(storage, params), output)


def check(params: MigrationParams, job_id: str, one_shot_dir: Path) -> dict[str, Any]:
    with params.open_storage() as storage:
        manifest = get_json(storage, params.results_container, f"{job_id}/manifest.json")
        summary = get_json(storage, params.results_container, f"{job_id}/summary.json")
    spark = spark_session(SparkSettings.for_job(MigrateOrders))
    verdict = compare(spark, (manifest, summary), one_shot_dir)
    return {
        "ok": verdict.ok,
        "lines": verdict.lines(),
        "summary": {key: summary[key] for key in TOTALS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    plain = commands.add_parser("one-shot", help="the plain Spark job (timed by the caller)")
    plain.add_argument("--params", required=True, help="the job's params (JSON)")
    plain.add_argument("--output", type=Path, required=True)
    checking = commands.add_parser("check", help="compare the two outputs (untimed)")
    checking.add_argument("--params", required=True, help="the job's params (JSON)")
    checking.add_argument("--job-id", required=True)
    checking.add_argument("--one-shot", type=Path, required=True)
    args = parser.parse_args(argv)
    params = MigrationParams.of(json.loads(args.params))
    if args.command == "one-shot":
        one_shot(params, args.output)
        return 0
    found = check(params, args.job_id, args.one_shot)
    print(json.dumps(found))
    return 0 if found["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
