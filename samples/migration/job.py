"""``MigrateOrders``: legacy orders v1 -> typed v2 Parquet, chunk by chunk, resumable.

    runner submit samples.migration.job:MigrateOrders --params '{"output": "/data/orders-v2"}'
    runner start samples.migration.job:MigrateOrders --workers 2 --burst

- ``split`` lists the input blobs and packs them into chunks of ``chunk_bytes``
  (:func:`jobs.spark.split_files`; a file is never split).
- ``process`` runs a chunk's files in batches of ``files_per_batch``: stage the batch's
  blobs to local scratch (cut at line ends into pieces that deal evenly over the
  session's cores: :func:`~.layout.staged_inputs`), run the transform
  (:mod:`.transform`) in the chunk's Spark job group, write orders and rejects each to
  the attempt's own directory, published by a fenced write (rows, checksums, rows in
  and rejects by reason are all observed during the two writes: no other Spark
  action), then checkpoint
  ``{"batch": next batch, ...running totals}``. A chunk taken over after a crash starts
  at its checkpointed batch; the interrupted batch is rewritten, replacing whatever the
  dead attempt published, never added to it.
- ``finalize`` puts every batch's published output in place and sweeps what dead
  attempts left (:func:`jobs.spark.finalize_outputs`), then writes a manifest (every
  published output with its rows, checksum and attempt) and a summary (rows in / out /
  rejected).

Deduplication is per batch. That equals a global deduplication because the legacy export
is partitioned by key: every version of an order is in the same file (see
:mod:`.generate` and the README for what to do when your input is not).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from jobs import Chunk, JobSummary
from jobs.spark import (
    SparkChunkedJob,
    SparkSettings,
    default_parallelism,
    finalize_outputs,
    observed_metrics,
    split_files,
    write_chunk_output,
)
from samples.migration.layout import (
    KINDS,
    MigrationParams,
    StagingUnreachable,
    batch_path,
    check_staging,
    is_uri,
    put_json,
    staged_inputs,
)
from samples.migration.transform import REASONS, judge, latest_orders, read_orders_v1, rejected

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation

log = logging.getLogger(__name__)

#: The Spark settings of the workers and of the one-shot verification alike.
SPARK_CONF = {
    "spark.sql.session.timeZone": "UTC",  # how timestamps print; parsing never relies on it
    "spark.sql.shuffle.partitions": 4,  # a batch is ~100k rows: 200 tiny tasks cost more
    "spark.ui.enabled": False,  # workers side by side would fight over port 4040
}
#: The running totals a chunk checkpoints after each batch (besides ``batch`` and ``of``).
TOTALS = ("rows_in", "rows_out", "rows_rejected")
CHECKSUMS = ("checksum", "rejects_checksum")


class MigrateOrders(SparkChunkedJob):
    """Params: see :class:`~samples.migration.layout.MigrationParams` (``output`` required)."""

    # No lease_seconds: the workers size the lease (docs/semantics.md §25), from 10 s
    # while renewals land in time, so a crashed worker's chunk resumes within seconds.
    max_attempts = 5
    # A checkpoint per batch, seconds apart: write each one, so a crash redoes at most the
    # batch it interrupted.
    checkpoint_interval_seconds = 0
    spark_conf = SPARK_CONF
    # Staging the executors cannot read fails every attempt alike: poison at once, and
    # in planning fail the job before any chunk is queued.
    non_retryable = (StagingUnreachable,)

    def split(self, params: dict[str, Any]) -> Any:
        settings = MigrationParams.of(params)
        check_staging(settings, SparkSettings.for_job(type(self)))
        with settings.open_storage() as storage:
            blobs = storage.blobs.list(settings.input_container, settings.input_prefix)
            sizes = {blob.name: blob.size for blob in blobs}
        yield from split_files(sizes, target_bytes=settings.chunk_bytes)

    def process(self, chunk: Chunk) -> dict[str, Any]:
        settings = MigrationParams.of(chunk.params)
        spark_settings = SparkSettings.for_job(type(self))
        check_staging(settings, spark_settings)  # this worker's Spark may not be the planner's
        files = chunk.payload["files"]
        batches = [
            files[i : i + settings.files_per_batch]
            for i in range(0, len(files), settings.files_per_batch)
        ]
        state = chunk.state or new_state(len(batches))
        first = state["batch"]
        if first:
            log.info(
                "chunk %d attempt %d resumes from its checkpoint at batch %d of %d "
                "(%d rows in so far)",
                chunk.index,
                chunk.attempt,
                first,
                len(batches),
                state["rows_in"],
            )
        parallelism = default_parallelism(self.spark)
        as_uris = not spark_settings.runs_locally
        with settings.open_storage() as storage:
            for number in range(first, len(batches)):
                started = time.monotonic()
                with staged_inputs(
                    storage,
                    settings,
                    batches[number],
                    parallelism=parallelism,
                    as_uris=as_uris,
                ) as paths:
                    counts = self._migrate_batch(chunk, settings, paths, number)
                state = add_batch(state, counts)
                chunk.checkpoint(state)
                log.info(
                    "chunk %d batch %d of %d: %d rows in, %d out, %d rejected (%.1f s)",
                    chunk.index,
                    number + 1,
                    len(batches),
                    counts["rows_in"],
                    counts["rows_out"],
                    counts["rows_rejected"],
                    time.monotonic() - started,
                )
        return {**state, "attempt": chunk.attempt, "resumed_at_batch": first, "files": files}

    def _migrate_batch(
        self, chunk: Chunk, settings: MigrationParams, paths: list[str], number: int
    ) -> dict[str, Any]:
        """Migrate one batch's staged files; its outputs published when this returns."""
        out = {
            kind: batch_path(settings, chunk.job_id, chunk.index, number, kind) for kind in KINDS
        }
        with self.job_group(chunk, f"chunk {chunk.index} batch {number}"):
            # Kept while both outputs are written, so each value is parsed once; the
            # orders write fills the cache, the rejects write reads it. Not a
            # localCheckpoint (measured 2026-11-26, BENCHMARKS.md): through Spark
            # Connect 4.3 its blocks stay on the executors until the session closes,
            # and in a classic session the bench's batches ran slower with it.
            judged = judge(read_orders_v1(self.spark, paths)).persist()
            try:
                # The batch's only Spark actions are its two writes, and neither reads
                # its output back. The orders write also counts the rows in (every
                # judged row, by the groups they fall in); the rejects write counts its
                # few rows by reason, after the filter that the cache scan applies.
                rows_in, by_reason = new_tally(), new_tally()
                orders = write_chunk_output(
                    latest_orders(judged, rows_in), out["orders"], chunk=chunk
                )
                rejects = write_chunk_output(
                    tallied(rejected(judged), by_reason), out["rejects"], chunk=chunk
                )
                counted = {**observed_metrics(rows_in), **observed_metrics(by_reason)}
            finally:
                judged.unpersist()
        reasons = {reason: counted[reason] for reason in REASONS if counted[reason]}
        if sum(reasons.values()) != rejects.rows:  # the rejects are these rows, as written
            raise RuntimeError(f"batch {number}: {rejects.rows} rejects written, {reasons} counted")
        return {
            "rows_in": counted["rows_in"],
            "rows_out": orders.rows,
            "rows_rejected": rejects.rows,
            "checksum": orders.checksum,
            "rejects_checksum": rejects.checksum,
            "reasons": dict(sorted(reasons.items())),
        }

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        # Idempotent: recomputed from the chunks' results and publications, and written
        # whole (manifest first: a summary is only there with its manifest).
        settings = MigrationParams.of(params)
        published = self._published(settings, summary)
        manifest: list[dict[str, Any]] = []
        chunks: list[dict[str, Any]] = []
        reasons: Counter[str] = Counter()
        inputs: list[dict[str, Any]] = []
        for index, result in summary.results():
            manifest.extend(outputs_of(settings, summary.job_id, index, result["of"], published))
            inputs.extend(inputs_of(settings, index, result))
            chunks.append(chunk_line(index, result))
            reasons.update(result["reasons"])
        report = totals(summary.job_id, chunks, manifest)
        report["rejected_by_reason"] = dict(sorted(reasons.items()))
        with settings.open_storage() as storage:
            container = settings.results_container
            put_json(
                storage,
                container,
                f"{summary.job_id}/manifest.json",
                {
                    "job_id": summary.job_id,
                    "format": "parquet",
                    "inputs": inputs,
                    "outputs": manifest,
                },
            )
            put_json(storage, container, f"{summary.job_id}/summary.json", report)
        log.info("job %s: %s", summary.job_id, {key: report[key] for key in TOTALS})

    def _published(self, settings: MigrationParams, summary: JobSummary) -> dict[str, Any]:
        """Every published output by path, each put in place and its dead attempts
        swept (:func:`jobs.spark.finalize_outputs`)."""
        spark = self.spark if is_uri(settings.output) else None
        return {path: commit for _, path, commit in finalize_outputs(summary, spark=spark)}


def outputs_of(
    settings: MigrationParams, job_id: str, index: int, batches: int, published: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every output of chunk ``index``, as its publication describes it."""
    found = []
    for number in range(batches):
        for kind in KINDS:
            path = batch_path(settings, job_id, index, number, kind)
            commit = published.get(path)
            if commit is None:
                raise RuntimeError(f"chunk {index} batch {number}: {path} was never published")
            found.append(
                {
                    "chunk": index,
                    "batch": number,
                    "kind": kind,
                    "path": commit.path,
                    "rows": commit.rows,
                    "checksum": commit.checksum,
                    "attempt": commit.attempt,
                }
            )
    return found


def inputs_of(
    settings: MigrationParams, index: int, result: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every batch of chunk ``index`` with the blobs it read and the rows Spark read from
    them (what the verify step checks against the source)."""
    files = result["files"]
    step = settings.files_per_batch
    return [
        {"chunk": index, "batch": number, "files": files[start : start + step], "rows_in": rows}
        for number, (start, rows) in enumerate(
            zip(range(0, len(files), step), result["rows_in_by_batch"], strict=True)
        )
    ]


# --------------------------------------------------------------------------- counting


def new_tally() -> Observation:
    """An observation for :func:`tallied` or ``latest_orders`` (one per batch: Spark
    fills it once)."""
    from pyspark.sql import Observation

    return Observation()


def tallied(rejects: DataFrame, tally: Observation) -> DataFrame:
    """``rejects`` (:func:`~.transform.rejected`), counting into ``tally`` the rows the
    next action reads by ``reason``: one count per reason of :data:`~.transform.REASONS`,
    each possibly 0."""
    from pyspark.sql import functions as F

    reason = F.col("reason")
    return rejects.observe(tally, *(F.count_if(reason == name).alias(name) for name in REASONS))


# --------------------------------------------------------------------------- state


def new_state(batches: int) -> dict[str, Any]:
    """A chunk's checkpoint before its first batch (``batch`` first: status shows it)."""
    return {
        "batch": 0,
        "of": batches,
        **dict.fromkeys(TOTALS, 0),
        **dict.fromkeys(CHECKSUMS, "0"),
        "reasons": {},
        "rows_in_by_batch": [],
    }


def add_batch(state: dict[str, Any], counts: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint after one more batch: next batch, totals with its counts added."""
    added = dict(state, batch=state["batch"] + 1)
    for key in TOTALS:
        added[key] = state[key] + counts[key]
    for key in CHECKSUMS:
        # Decimal strings: the checksums are sums of 64-bit hashes and outgrow msgpack ints.
        added[key] = str(int(state[key]) + int(counts[key]))
    added["reasons"] = dict(Counter(state["reasons"]) + Counter(counts["reasons"]))
    added["rows_in_by_batch"] = [*state["rows_in_by_batch"], counts["rows_in"]]
    return added


def chunk_line(index: int, result: dict[str, Any]) -> dict[str, Any]:
    """One chunk's line in the summary."""
    keys = ("attempt", "resumed_at_batch", "of", *TOTALS)
    return {"index": index, **{key: result[key] for key in keys}}


def totals(job_id: str, chunks: list[dict[str, Any]], manifest: list[dict[str, Any]]) -> dict:
    """The job's summary: rows in from the chunks, rows out / rejected from the markers."""
    by_kind = {kind: [entry for entry in manifest if entry["kind"] == kind] for kind in KINDS}
    rows_in = sum(chunk["rows_in"] for chunk in chunks)
    rows_out = sum(entry["rows"] for entry in by_kind["orders"])
    rows_rejected = sum(entry["rows"] for entry in by_kind["rejects"])
    return {
        "job_id": job_id,
        "chunks": len(chunks),
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_rejected": rows_rejected,
        "duplicates_dropped": rows_in - rows_out - rows_rejected,
        "checksum": str(sum(int(entry["checksum"]) for entry in by_kind["orders"])),
        "rejects_checksum": str(sum(int(entry["checksum"]) for entry in by_kind["rejects"])),
        "per_chunk": chunks,
    }
