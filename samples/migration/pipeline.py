"""The migration as a pipeline of four steps: stage -> transform -> verify -> publish.

    python -m samples.migration.pipeline --pipeline orders-2026-11 --output /data/orders-v2
    runner start samples.migration.stage:StageExport samples.migration.job:MigrateOrders \\
        samples.migration.reconcile:VerifyAgainstSource \\
        samples.migration.publish:PublishManifest --prefetch 0 --burst
    runner status --pipeline orders-2026-11

- ``stage`` (:class:`~.stage.StageExport`): copies the legacy export to
  ``orders-v1-staged/<pipeline>/``;
- ``transform`` (:class:`~.job.MigrateOrders`): migrates the staged copy with Spark;
- ``verify`` (:class:`~.reconcile.VerifyAgainstSource`): checks every batch against the
  source;
- ``publish`` (:class:`~.publish.PublishManifest`): writes
  ``orders-v2/<pipeline>/manifest.json`` once.

Each step is the job ``<pipeline>-<step>`` (:class:`jobs.Pipeline`), started by the
worker that finishes the step before it; running the declaration again submits
nothing new. A failed step blocks the steps after it.
"""

from __future__ import annotations

import argparse
from typing import Any

from checkpoint.backends import open_storage
from jobs import Pipeline
from samples.migration.generate import BLOB_PREFIX, DEFAULT_CONTAINER
from samples.migration.job import MigrateOrders
from samples.migration.publish import PublishManifest
from samples.migration.reconcile import VerifyAgainstSource
from samples.migration.stage import STAGING_CONTAINER, StageExport

#: The steps' job classes, in the order they run: what ``runner start`` must serve.
STEP_JOBS = (StageExport, MigrateOrders, VerifyAgainstSource, PublishManifest)
STEPS = ("stage", "transform", "verify", "publish")


def migration_pipeline(
    pipeline_id: str,
    transform: dict[str, Any],
    *,
    source_container: str = DEFAULT_CONTAINER,
    source_prefix: str = BLOB_PREFIX,
    stage_chunk_bytes: int = 64 << 20,
    batches_per_chunk: int = 2,
) -> Pipeline:
    """The four steps of one migration run, declared (``.submit(storage)`` submits them).

    Args:
        pipeline_id: the run's id; its steps are the jobs ``<pipeline_id>-<step>``.
        transform: :class:`~.layout.MigrationParams` of the transform step (``output``
            at least). Its input is the staged copy: ``input_container`` and
            ``input_prefix`` are set here; ``storage`` and ``results_container``, if
            given, are the other steps' too.
        source_container / source_prefix: the legacy export.
        stage_chunk_bytes: source bytes per chunk of the stage step.
        batches_per_chunk: the transform's batches per chunk of the verify step.
    """
    staging_prefix = f"{pipeline_id}/"
    shared = {key: transform[key] for key in ("storage", "results_container") if key in transform}
    run = Pipeline(pipeline_id)
    stage = run.step(
        "stage",
        StageExport,
        {
            "staging_prefix": staging_prefix,
            "source_container": source_container,
            "source_prefix": source_prefix,
            "chunk_bytes": stage_chunk_bytes,
            **shared,
        },
    )
    transformed = run.step(
        "transform",
        MigrateOrders,
        {
            **transform,
            "input_container": STAGING_CONTAINER,
            "input_prefix": staging_prefix + source_prefix,
        },
        after=[stage],
    )
    verify = run.step(
        "verify",
        VerifyAgainstSource,
        {
            "stage_job": stage,
            "transform_job": transformed,
            "batches_per_chunk": batches_per_chunk,
            **shared,
        },
        after=[transformed],
    )
    run.step(
        "publish",
        PublishManifest,
        {"pipeline": pipeline_id, "transform_job": transformed, "verify_job": verify, **shared},
        after=[verify],
    )
    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", required=True, help="the run's id")
    parser.add_argument("--output", required=True, help="where Spark writes the v2 Parquet")
    parser.add_argument("--storage", default=None, help="as runner --storage")
    args = parser.parse_args(argv)
    run = migration_pipeline(args.pipeline, {"output": args.output})
    with open_storage(args.storage) as storage:
        for job_id in run.submit(storage):
            print(job_id)


if __name__ == "__main__":
    main()
