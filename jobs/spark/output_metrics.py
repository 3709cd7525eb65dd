"""What a chunk output's marker records: its rows and a content checksum, observed while
the output is written (or counted from it read back).

The count and checksum are observed in the write's own pass over the data (Spark's
``observe``) for formats that give back exactly what was written
(:data:`EXACT_FORMATS`); other formats are read back once written.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from jobs.errors import MetricsUnavailable

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation

log = logging.getLogger("jobs.spark.chunk_output")

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


def _delivered(found: dict[str, Any]) -> dict[str, Any]:
    if not found:
        raise MetricsUnavailable("Spark delivered no observed metrics (observation optimized away)")
    return found


def new_observation() -> Observation:
    from pyspark.sql import Observation

    return Observation()


def observed_counts(
    observation: Observation, checksum: bool, path: str
) -> tuple[int, str | None] | None:
    """Rows and checksum observed by the write; None if Spark did not deliver them."""
    try:
        found = observed_metrics(observation)
    except MetricsUnavailable as missing:
        log.warning("%s: %s; reading the output back to count it", path, missing)
        return None
    return int(found["rows"]), (_decimal_text(found["checksum"]) if checksum else None)


def read_back_counts(
    df: DataFrame, path: str, format: str, options: dict[str, str], checksum: bool
) -> tuple[int, str | None]:
    # With df's schema: no inference pass, and the columns hash by the types written.
    written = df.sparkSession.read.format(format).options(**options).schema(df.schema).load(path)
    if checksum:
        return _count_and_checksum(written)
    return written.count(), None


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
    row = df.agg(*metrics(df, checksum=True)).first()
    assert row is not None  # an aggregate without grouping always has one row
    return int(row["rows"]), _decimal_text(row["checksum"])


def metrics(df: DataFrame, checksum: bool) -> list[Column]:
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
