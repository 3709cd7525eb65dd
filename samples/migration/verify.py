"""Check a chunked migration against one plain Spark run of the same transform.

The one-shot run reads *all* input files at once and runs :func:`.transform.migrate`
(judge, then the two outputs) as one Spark job, writing Parquet like any batch job
would. The chunked output is read back from the paths of the job's manifest. Both
sides are counted and checksummed with :func:`jobs.spark.content_checksum` (order-
independent, changed by any duplicated, missing or altered row), orders and rejects
alike; the job's own summary (sums of its commit markers) must agree too.

:func:`write_one_shot` is the plain run alone (timed by ``tests/bench/migration.py``);
:func:`compare` then reads both sides back; :func:`verify` does the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoint.storage import Storage
from jobs.spark import content_checksum
from samples.migration.layout import KINDS, MigrationParams, staged_inputs
from samples.migration.transform import judge, outputs, read_orders_v1

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Counts:
    """Rows and content checksum of one output."""

    rows: int
    checksum: str

    @classmethod
    def of(cls, frame: DataFrame) -> Counts:
        return cls(frame.count(), content_checksum(frame))


@dataclass(frozen=True)
class Verdict:
    """Both runs' counts per output kind, and the job summary's own sums."""

    chunked: dict[str, Counts]
    one_shot: dict[str, Counts]
    summary: dict[str, Counts]

    @property
    def ok(self) -> bool:
        """True if chunked, one-shot and summary agree on every output."""
        return self.chunked == self.one_shot == self.summary

    def lines(self) -> list[str]:
        """A small table for people."""
        rows = [f"{'':10}{'chunked job':>36}{'one-shot Spark':>36}"]
        for kind in KINDS:
            for label, pick in (("rows", _rows), ("checksum", _checksum)):
                chunked, single = pick(self.chunked[kind]), pick(self.one_shot[kind])
                mark = "==" if chunked == single else "!="
                rows.append(f"{kind + ' ' + label:18}{chunked:>28} {mark} {single:>32}")
        return rows


def _rows(counts: Counts) -> str:
    return f"{counts.rows:,}"


def _checksum(counts: Counts) -> str:
    return counts.checksum


def write_one_shot(
    spark: SparkSession,
    storage: Storage,
    params: MigrationParams,
    names: list[str],
    workdir: Path,
) -> None:
    """Migrate every input blob in one plain Spark run: Parquet in ``workdir/<kind>``.

    What a plain batch job would do, and nothing more (no counting, no checksums), so
    it can be timed on its own: stage the blobs under ``workdir``, judge once
    (persisted: both outputs parse each value once), write orders and rejects.
    """
    with staged_inputs(storage, params, names, scratch=str(workdir)) as paths:
        judged = judge(read_orders_v1(spark, paths)).persist()
        try:
            migrated = outputs(judged)
            frames = {"orders": migrated.orders, "rejects": migrated.rejects}
            for kind, frame in frames.items():
                frame.write.mode("overwrite").parquet(str(workdir / kind))
        finally:
            judged.unpersist()


def written(spark: SparkSession, workdir: Path) -> dict[str, Counts]:
    """Counts of what :func:`write_one_shot` wrote under ``workdir``."""
    return {kind: Counts.of(spark.read.parquet(str(workdir / kind))) for kind in KINDS}


def chunked(spark: SparkSession, manifest: dict[str, Any]) -> dict[str, Counts]:
    """Counts of the chunked job's published outputs, read back from the manifest's paths."""
    found = {}
    for kind in KINDS:
        paths = [entry["path"] for entry in manifest["outputs"] if entry["kind"] == kind]
        found[kind] = Counts.of(spark.read.parquet(*paths))
    return found


def from_summary(summary: dict[str, Any]) -> dict[str, Counts]:
    """What the job's summary says it published."""
    return {
        "orders": Counts(summary["rows_out"], summary["checksum"]),
        "rejects": Counts(summary["rows_rejected"], summary["rejects_checksum"]),
    }


def verify(
    spark: SparkSession,
    storage: Storage,
    params: MigrationParams,
    names: list[str],
    results: tuple[dict[str, Any], dict[str, Any]],
    workdir: Path,
) -> Verdict:
    """Compare the job's outputs (``results`` = its manifest and summary) with a one-shot run."""
    write_one_shot(spark, storage, params, names, workdir)
    return compare(spark, results, workdir)


def compare(
    spark: SparkSession, results: tuple[dict[str, Any], dict[str, Any]], workdir: Path
) -> Verdict:
    """The job's outputs (its manifest and summary) next to a one-shot run's in ``workdir``."""
    manifest, summary = results
    return Verdict(
        chunked=chunked(spark, manifest),
        one_shot=written(spark, workdir),
        summary=from_summary(summary),
    )
