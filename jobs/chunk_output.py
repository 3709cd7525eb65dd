"""Idempotent chunk output: one deterministic directory per chunk, overwritten, then marked.

A chunk may run more than once (a crash, a lost lease, a stop), so its output goes to a
place derived from the chunk alone and is written with overwrite: a re-run replaces the
earlier attempt's files instead of adding to them. Only after the write has succeeded is
a ``_COMMITTED`` marker written next to the data, holding the row count and a content
checksum; the marker is removed before each write. A consumer (``finalize``, the next
pipeline stage) trusts a chunk's directory only while :func:`is_committed` says so.

Spark readers skip files whose names start with ``_`` or ``.``, so the marker (like
Spark's own ``_SUCCESS``) never shows up as data when the directory is read.

Plain paths are handled with the standard library; URIs (``abfss://``, ``hdfs://``,
``file://``) through the Hadoop file system of the Spark session, so the helpers work on
a cluster's storage as they do on a local disk. PySpark is imported only when used.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jobs.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "COMMIT_MARKER",
    "ChunkCommit",
    "chunk_output_path",
    "content_checksum",
    "is_committed",
    "read_commit",
    "write_chunk_output",
]

#: The marker file written into a chunk's output directory once it is complete.
COMMIT_MARKER = "_COMMITTED"
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # as checkpoint.layout allows


@dataclass(frozen=True)
class ChunkCommit:
    """What a ``_COMMITTED`` marker records about a chunk's output.

    Attributes:
        rows: rows in the output, as read back after writing.
        checksum: :func:`content_checksum` of the output as read back, or None when not
            computed. A decimal string: the checksums of disjoint outputs add up to the
            checksum of their union.
        format: the data source format (``parquet``, ``json``, ...).
    """

    rows: int
    checksum: str | None
    format: str


def chunk_output_path(base: str, job_id: str, index: int) -> str:
    """The output directory of chunk ``index`` of ``job_id`` under ``base``.

    Deterministic, so every attempt of a chunk writes to the same place:
    ``<base>/<job_id>/chunk-<index, 6 digits>`` (``out/orders-1/chunk-000017``). The
    zero padding keeps directory listings in chunk order. ``base`` may be a local path
    or a URI (``abfss://container@account.dfs.core.windows.net/out``).

    Raises:
        ConfigurationError: an empty base, a job id that is not a valid one (letters,
            digits, '.', '_' and '-', starting with a letter or digit: never a hidden
            or ``..`` path), or an index that is not a whole number >= 0.
    """
    if not isinstance(base, str) or not base.strip("/"):
        raise ConfigurationError(f"output base must be a non-empty path, not {base!r}")
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise ConfigurationError(f"invalid job id {job_id!r} for an output path")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ConfigurationError(f"chunk index must be a whole number >= 0, not {index!r}")
    return f"{base.rstrip('/')}/{job_id}/chunk-{index:06d}"


def write_chunk_output(
    df: DataFrame,
    path: str,
    format: str = "parquet",
    *,
    options: dict[str, str] | None = None,
    checksum: bool = True,
) -> ChunkCommit:
    """Write ``df`` to ``path`` with overwrite, then mark it committed.

    In order: remove the marker (a crash from here on leaves the directory
    uncommitted), write with ``mode("overwrite")`` (replacing any earlier attempt's
    files), read the output back to count it (and checksum it) — so the marker
    describes what is on disk, and ``df`` is not computed twice — then write the
    marker. Running it again for the same chunk replaces the output, never duplicates
    it.

    Two attempts writing the same chunk at once (an old owner that has not yet
    noticed its lost lease) could interleave files; run the write inside the chunk's
    job group (:class:`jobs.spark.ChunkJobGroup`), which cancels the old owner's work.

    Args:
        df: the chunk's output.
        path: the chunk's directory, from :func:`chunk_output_path`.
        format: a Spark data source format.
        options: data source options, used for writing and reading back (e.g.
            ``{"header": "true"}`` for csv).
        checksum: also compute :func:`content_checksum` (a scan of the output; the row
            count alone comes from Parquet metadata).

    Returns:
        What the marker records.
    """
    options = dict(options or {})
    files = _files(path, df.sparkSession)
    files.delete(COMMIT_MARKER)
    df.write.mode("overwrite").format(format).options(**options).save(path)
    written = df.sparkSession.read.format(format).options(**options).schema(df.schema).load(path)
    if checksum:
        rows, digest = _count_and_checksum(written)
    else:
        rows, digest = written.count(), None
    commit = ChunkCommit(rows=rows, checksum=digest, format=format)
    files.write(COMMIT_MARKER, json.dumps(asdict(commit), sort_keys=True))
    return commit


def read_commit(path: str, *, spark: SparkSession | None = None) -> ChunkCommit | None:
    """The commit marker of the chunk output at ``path``, or None if it is not committed.

    Args:
        path: the chunk's directory.
        spark: for URIs, the session whose Hadoop file system reads them; this
            process's session (:func:`jobs.spark.spark_session`) if None. Plain paths
            need no Spark.
    """
    text = _files(path, spark).read(COMMIT_MARKER)
    if text is None:
        return None
    try:
        fields = json.loads(text)
        return ChunkCommit(int(fields["rows"]), fields["checksum"], str(fields["format"]))
    except (ValueError, KeyError, TypeError):
        return None  # a marker we cannot read vouches for nothing


def is_committed(path: str, *, spark: SparkSession | None = None) -> bool:
    """True if the chunk output at ``path`` was completely written (its marker is there)."""
    return read_commit(path, spark=spark) is not None


def content_checksum(df: DataFrame) -> str:
    """An order-independent checksum of ``df``'s rows, as a decimal string.

    The sum over rows of a 64-bit hash of every column (with a null flag per column,
    so ``(null, 1)`` and ``(1, null)`` differ). A sum, not an XOR, so duplicated rows
    change it; and sums add up: the checksums of the chunks of a migration, added,
    equal the checksum of the same rows written by one plain Spark job. Columns are
    hashed in order and by type, so compare frames of the same schema.
    """
    return _count_and_checksum(df)[1]


def _count_and_checksum(df: DataFrame) -> tuple[int, str]:
    from pyspark.sql import functions as F

    # A decimal sum: a sum of 64-bit longs overflows, which ANSI mode (Spark 4's
    # default) turns into an error.
    row = df.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(_row_hash(df).cast("decimal(38,0)")).alias("checksum"),
    ).first()
    assert row is not None  # an aggregate without grouping always has one row
    return int(row["rows"]), str(int(row["checksum"] or 0))


def _row_hash(df: DataFrame) -> Column:
    from pyspark.sql import functions as F

    # Quoted, so names with dots are not read as nested fields.
    columns = [F.col("`" + name.replace("`", "``") + "`") for name in df.columns]
    if not columns:
        return F.lit(0)
    return F.xxhash64(*columns, *(column.isNull() for column in columns))


# --------------------------------------------------------------------------- files


class _Files(Protocol):
    def read(self, name: str) -> str | None: ...
    def write(self, name: str, text: str) -> None: ...
    def delete(self, name: str) -> None: ...


def _files(path: str, spark: SparkSession | None) -> _Files:
    if not _URI.match(path):
        return _LocalFiles(Path(path))
    if spark is None:
        from jobs.spark import spark_session  # lazily: jobs.spark imports this module

        spark = spark_session()
    return _HadoopFiles(spark, path)


class _LocalFiles:
    """Marker files in a local directory."""

    def __init__(self, directory: Path):
        self._directory = directory

    def read(self, name: str) -> str | None:
        try:
            return (self._directory / name).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write(self, name: str, text: str) -> None:
        # Via a hidden temporary and a rename: a reader sees no marker or a whole one.
        temporary = self._directory / f".{name}.tmp"
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, self._directory / name)

    def delete(self, name: str) -> None:
        (self._directory / name).unlink(missing_ok=True)


class _HadoopFiles:
    """Marker files through the Spark session's Hadoop file system (abfss://, hdfs://...)."""

    def __init__(self, spark: SparkSession, path: str):
        context = spark.sparkContext
        jvm: Any = context._jvm  # py4j's gateway view: untyped
        self._jvm = jvm
        self._directory = jvm.org.apache.hadoop.fs.Path(path)
        self._fs = self._directory.getFileSystem(context._jsc.hadoopConfiguration())

    def _path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self._directory, name)

    def read(self, name: str) -> str | None:
        path = self._path(name)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            scanner = self._jvm.java.util.Scanner(stream, "UTF-8").useDelimiter("\\A")
            return str(scanner.next()) if scanner.hasNext() else ""
        finally:
            stream.close()

    def write(self, name: str, text: str) -> None:
        # One create-and-close: object stores (ABFS, S3) make a blob visible whole.
        stream = self._fs.create(self._path(name), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def delete(self, name: str) -> None:
        self._fs.delete(self._path(name), False)
