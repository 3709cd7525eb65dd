"""Idempotent chunk output: one deterministic directory per chunk, overwritten, then marked.

A chunk may run more than once (a crash, a lost lease, a stop), so its output goes to a
place derived from the chunk alone and is written with overwrite: a re-run replaces the
earlier attempt's files instead of adding to them. Only after the write has succeeded is
a ``_COMMITTED`` marker written next to the data, holding the row count and a content
checksum; the marker is removed before each write. A consumer (``finalize``, the next
pipeline stage) trusts a chunk's directory only while :func:`is_committed` says so.

The count and the checksum are observed while the write runs (Spark's ``observe``), in
the same pass over the data, for formats that give back exactly what was written
(:data:`EXACT_FORMATS`); other formats are read back once written.

Spark readers skip files whose names start with ``_`` or ``.``, so the marker (like
Spark's own ``_SUCCESS``) never shows up as data when the directory is read.

Plain paths are handled with the standard library; URIs (``abfss://``, ``hdfs://``,
``file://``) through the Hadoop file system of the Spark session, so the helpers work on
a cluster's storage as they do on a local disk. A Spark Connect session has no Hadoop
file system on the client: there a URI's marker is written through Spark itself, as a
one-line text dataset in a ``_COMMITTED/`` directory (see :class:`_SparkFiles`), and a
plain path must be one the client and the cluster share. PySpark is imported only when
used.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from checkpoint import checks
from checkpoint.errors import ConfigurationError
from checkpoint.layout import check_job_id
from jobs.errors import MetricsUnavailable
from jobs.spark_session import is_connect, spark_session

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

__all__ = [
    "COMMIT_MARKER",
    "EXACT_FORMATS",
    "OBSERVED_METRICS_WAIT_SECONDS",
    "ChunkCommit",
    "chunk_output_path",
    "content_checksum",
    "is_committed",
    "observed_metrics",
    "read_commit",
    "write_chunk_output",
]

log = logging.getLogger(__name__)

#: The marker file written into a chunk's output directory once it is complete.
COMMIT_MARKER = "_COMMITTED"
#: Formats whose files give back every value with its type exactly as written, so the
#: rows and checksum observed while writing equal those of the output read back
#: (tested: nulls, decimals, dates, timestamps, NaN, -0.0, structs, arrays, binary).
#: Text formats do not: CSV reads an empty string as null and skips an empty line, JSON
#: turns binary into base64 text.
EXACT_FORMATS = frozenset({"parquet", "orc"})
#: Bound on the wait for a finished write's observed metrics. Spark hands them to a
#: listener on its event bus, normally within milliseconds of the action's end;
#: ``Observation.get`` itself would wait forever for an event that never comes.
OBSERVED_METRICS_WAIT_SECONDS = 60.0
#: How often :func:`observed_metrics` asks whether they have come.
_METRICS_POLL_SECONDS = 0.005
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


@dataclass(frozen=True)
class ChunkCommit:
    """What a ``_COMMITTED`` marker records about a chunk's output.

    Attributes:
        rows: rows in the output.
        checksum: :func:`content_checksum` of the output (what reading it back and
            checksumming would give), or None when not computed. A decimal string: the
            checksums of disjoint outputs add up to the checksum of their union.
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
    check_job_id(job_id)
    checks.whole(index, "chunk index", lowest=0, error=ConfigurationError)
    return f"{base.rstrip('/')}/{job_id}/chunk-{index:06d}"


def write_chunk_output(
    df: DataFrame,
    path: str,
    format: str = "parquet",
    *,
    options: dict[str, str] | None = None,
    checksum: bool = True,
    read_back: bool | None = None,
) -> ChunkCommit:
    """Write ``df`` to ``path`` with overwrite, then mark it committed.

    In order: remove the marker (a crash from here on leaves the directory
    uncommitted), write with ``mode("overwrite")`` (replacing any earlier attempt's
    files), then write the marker with the output's rows and checksum. Running it again
    for the same chunk replaces the output, never duplicates it.

    The rows and checksum are observed in the write's own pass over the data
    (``DataFrame.observe``): one Spark action, nothing read twice, ``df`` computed once.
    They are counted in the write's last stage, whose tasks count once each even when
    one is retried. For a format outside :data:`EXACT_FORMATS` the output is read back
    and counted instead (``read_back``), as it also is if Spark does not deliver the
    observed metrics (see :func:`observed_metrics`): the marker always describes what
    a reader gets.

    Two attempts writing the same chunk at once (an old owner that has not yet
    noticed its lost lease) could interleave files; run the write inside the chunk's
    job group (:class:`jobs.spark.ChunkJobGroup`), which cancels the old owner's work.

    Args:
        df: the chunk's output.
        path: the chunk's directory, from :func:`chunk_output_path`.
        format: a Spark data source format.
        options: data source options, used for writing (and reading back, e.g.
            ``{"header": "true"}`` for csv).
        checksum: also compute :func:`content_checksum` (a 64-bit hash of every row).
        read_back: count (and checksum) the output read back after the write, one more
            scan; None: only for formats outside :data:`EXACT_FORMATS`.

    Returns:
        What the marker records.

    Raises:
        AnalysisException: ``checksum`` on a frame Spark cannot hash (a map column),
            before anything at ``path`` is touched.
    """
    options = dict(options or {})
    if read_back is None:
        read_back = format.lower() not in EXACT_FORMATS
    observation = None if read_back else _new_observation()
    # Attached before the marker goes: a frame that cannot be hashed fails here, with
    # the earlier attempt's committed output left as it was.
    written = df if observation is None else df.observe(observation, *_metrics(df, checksum))
    files = _files(path, df.sparkSession)
    files.delete(COMMIT_MARKER)
    written.write.mode("overwrite").format(format).options(**options).save(path)
    counts = None if observation is None else _observed_counts(observation, checksum, path)
    rows, digest = counts or _read_back_counts(df, path, format, options, checksum)
    commit = ChunkCommit(rows=rows, checksum=digest, format=format)
    files.write(COMMIT_MARKER, json.dumps(asdict(commit), sort_keys=True))
    return commit


def observed_metrics(
    observation: Observation, timeout_seconds: float = OBSERVED_METRICS_WAIT_SECONDS
) -> dict[str, Any]:
    """The metrics of ``observation``, once the action that observed them has returned.

    Spark delivers observed metrics to a listener on its event bus, normally within
    milliseconds of the action's end, and ``Observation.get`` waits for them without
    a bound: a dropped event would hang the chunk while its lease is still renewed.
    This waits ``timeout_seconds`` at most. Call it only after the action succeeded.

    Args:
        observation: a ``pyspark.sql.Observation`` attached with ``DataFrame.observe``
            to a frame an action has run on.
        timeout_seconds: how long to wait for Spark to deliver the metrics.

    Returns:
        The metrics by name, as ``Observation.get`` gives them.

    Raises:
        MetricsUnavailable: none came in time, or Spark sent none (it sends an empty
            row when the optimizer removed the observation).
    """
    if not hasattr(observation, "_jo"):
        # A Spark Connect observation: the server sends the metrics with the action's
        # own result, so they are there (or never will be) once the action returned.
        return _delivered(observation.get)
    # The JVM-side Observation's future (public in Scala) can be asked without waiting.
    future = observation._jo.future() if observation._jo is not None else None
    if future is None:
        raise MetricsUnavailable("the observation was never attached to a DataFrame")
    deadline = time.monotonic() + timeout_seconds
    while not future.isCompleted():
        if time.monotonic() >= deadline:
            raise MetricsUnavailable(f"no observed metrics within {timeout_seconds} s")
        time.sleep(_METRICS_POLL_SECONDS)
    return _delivered(observation.get)


def _delivered(metrics: dict[str, Any]) -> dict[str, Any]:
    if not metrics:
        raise MetricsUnavailable("Spark delivered no observed metrics (observation optimized away)")
    return metrics


def _new_observation() -> Observation:
    from pyspark.sql import Observation

    return Observation()


def _observed_counts(
    observation: Observation, checksum: bool, path: str
) -> tuple[int, str | None] | None:
    """Rows and checksum observed by the write; None if Spark did not deliver them."""
    try:
        metrics = observed_metrics(observation)
    except MetricsUnavailable as missing:
        log.warning("%s: %s; reading the output back to count it", path, missing)
        return None
    return int(metrics["rows"]), (_decimal_text(metrics["checksum"]) if checksum else None)


def _read_back_counts(
    df: DataFrame, path: str, format: str, options: dict[str, str], checksum: bool
) -> tuple[int, str | None]:
    # With df's schema: no inference pass, and the columns hash by the types written.
    written = df.sparkSession.read.format(format).options(**options).schema(df.schema).load(path)
    if checksum:
        return _count_and_checksum(written)
    return written.count(), None


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
    row = df.agg(*_metrics(df, checksum=True)).first()
    assert row is not None  # an aggregate without grouping always has one row
    return int(row["rows"]), _decimal_text(row["checksum"])


def _metrics(df: DataFrame, checksum: bool) -> list[Column]:
    """The aggregates behind a marker: ``rows`` and, if asked, ``checksum``.

    The same expressions whether they aggregate a frame read back or are observed
    during a write, so both ways give the same figures.
    """
    from pyspark.sql import functions as F

    rows = F.count(F.lit(1)).alias("rows")
    if not checksum:
        return [rows]
    # A decimal sum: a sum of 64-bit longs overflows, which ANSI mode (Spark 4's
    # default) turns into an error.
    return [rows, F.sum(_row_hash(df).cast("decimal(38,0)")).alias("checksum")]


def _decimal_text(total: Any) -> str:
    return str(int(total or 0))  # the sum over no rows is null


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
        spark = spark_session()
    if is_connect(spark):
        return _SparkFiles(spark, path)
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


class _SparkFiles:
    """Marker files at a URI, written and read through a Spark Connect session.

    A Connect client has no Hadoop file system of its own, and Spark's data sources
    write directories, not files: the marker ``name`` is the directory ``<path>/name``
    holding one text file with the marker's one line. Spark readers skip it like any
    ``_`` path. Written with overwrite (a reader sees the old text, none, or the new),
    and deleted by overwriting it with nothing, which reads back as no marker. The
    chunk's own write with overwrite replaces the whole directory, marker included.
    """

    def __init__(self, spark: SparkSession, path: str):
        self._spark = spark
        self._directory = path.rstrip("/")

    def read(self, name: str) -> str | None:
        from pyspark.errors import AnalysisException

        try:
            lines = self._spark.read.text(f"{self._directory}/{name}").collect()
        except AnalysisException as error:
            if error.getCondition() == "PATH_NOT_FOUND":
                return None
            raise
        return "\n".join(row["value"] for row in lines) if lines else None

    def write(self, name: str, text: str) -> None:
        frame = self._spark.createDataFrame([(text,)], "value string").coalesce(1)
        frame.write.mode("overwrite").text(f"{self._directory}/{name}")

    def delete(self, name: str) -> None:
        if self.read(name) is not None:
            empty = self._spark.createDataFrame([], "value string")
            empty.write.mode("overwrite").text(f"{self._directory}/{name}")
