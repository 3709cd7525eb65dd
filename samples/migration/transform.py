"""The one PySpark transform of the migration: legacy orders v1 -> typed orders v2.

Used as is by the chunked job (:mod:`.job`, one batch of files per call) and by the one-shot
verification (:mod:`.verify`, all files in one call), so the two can only differ by how
the input was cut up::

    raw = read_orders_v1(spark, paths)
    migrated = migrate(raw)           # Migrated(orders=..., rejects=...)

v2 ``orders``: ``order_id`` BIGINT, ``customer_id`` BIGINT (null: guest), ``order_date``
DATE, ``updated_at`` TIMESTAMP (UTC), ``amount`` DECIMAL(12,2), ``currency`` (ISO code),
``status`` (lower case, ``unknown`` if missing); one row per order, its latest *valid*
version (newest ``updated_at``; a full-row tie-break keeps it deterministic).

``rejects``: ``reason``, ``order_id`` (as written, may be null) and ``record`` (the
malformed line, or the parsed v1 fields as JSON), one row per rejected input line.
Every timestamp is given an explicit zone before it is parsed, so no result depends on
the session time zone.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

#: The v1 fields, all read as strings: the legacy export is not typed.
V1_FIELDS = ("order_id", "customer_id", "order_date", "updated_at", "amount", "currency", "status")
#: Where Spark puts a line that is not JSON.
CORRUPT = "_corrupt_record"
#: Fields a row cannot do without (checked in this order: the first problem is the reason).
REQUIRED = ("order_id", "order_date", "updated_at", "amount")
#: Every ``reason`` :func:`judge` gives, in the order they are checked: a line that is
#: not JSON, then per required field missing (blank) or bad (does not parse).
REASONS = ("malformed_line", *(f"{how}_{name}" for name in REQUIRED for how in ("missing", "bad")))
V2_COLUMNS = ("order_id", "customer_id", "order_date", "updated_at", "amount", "currency", "status")
AMOUNT_TYPE = "decimal(12,2)"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
DEFAULT_CURRENCY = "USD"  # the legacy system's: no currency anywhere means dollars
SYMBOL_CURRENCIES = {"$": "USD", "€": "EUR", "£": "GBP"}


@dataclass(frozen=True)
class Migrated:
    """The two outputs of :func:`migrate`."""

    orders: DataFrame
    rejects: DataFrame


def read_orders_v1(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The v1 JSON lines at ``paths`` as string columns, plus the malformed-line column."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(name, StringType()) for name in (*V1_FIELDS, CORRUPT)])
    return (
        spark.read.schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(paths)
    )


def migrate(raw: DataFrame) -> Migrated:
    """v1 rows (from :func:`read_orders_v1`) -> v2 orders and rejects: ``outputs(judge(raw))``."""
    return outputs(judge(raw))


def judge(raw: DataFrame) -> DataFrame:
    """Every v1 row typed as v2, with its ``reason`` (null: valid) and its v1 fields.

    The costly half of the transform (parsing every value). Both outputs read it, so
    a caller that writes both may ``persist()`` it to parse each value once.
    """
    columns = _judge_columns(raw.sparkSession)
    # Trimmed once, in a projection of its own (Spark keeps a projection apart when its
    # costly columns are used many times): the typing and the checks refer to its columns.
    return raw.select(*columns.trimmed).select(*columns.typed).select(*columns.judged)


@dataclass(frozen=True)
class _JudgeColumns:
    """:func:`judge`'s three projections: trimmed text, typed values, with the reason."""

    trimmed: tuple[Column, ...]
    typed: tuple[Column, ...]
    judged: tuple[Column, ...]


@functools.lru_cache(maxsize=1)
def _judge_columns(session: SparkSession) -> _JudgeColumns:
    """:func:`judge`'s columns, built once per session and reused by every batch.

    A Column is an unresolved expression, valid in any frame with these column names.
    In a classic session building these takes about 2,400 calls into the JVM, 0.3-0.4 s
    of every batch on the driver while the executors wait (a Spark Connect client
    builds them in Python alone). ``session`` is the cache's key only: a classic
    session's Columns belong to the JVM they were built in.
    """
    from pyspark.sql import functions as F

    v1 = [F.col(f"v1_{name}") for name in (*V1_FIELDS, CORRUPT)]
    return _JudgeColumns(
        trimmed=(
            *(_trimmed(name) for name in V1_FIELDS),
            *(F.col(name).alias(f"v1_{name}") for name in (*V1_FIELDS, CORRUPT)),
        ),
        typed=(
            *(_typed(name) for name in V2_COLUMNS),
            *v1,
            *(F.col(name).alias(f"t_{name}") for name in REQUIRED),  # trimmed: for the reason
        ),
        judged=(*(F.col(name) for name in V2_COLUMNS), *v1, _reason().alias("reason")),
    )


def outputs(judged: DataFrame) -> Migrated:
    """The v2 orders (latest valid version per order) and the rejects of :func:`judge`'s rows."""
    return Migrated(latest_orders(judged), rejected(judged))


def latest_orders(judged: DataFrame, rows_in: Observation | None = None) -> DataFrame:
    """Per ``order_id``, its latest valid version among :func:`judge`'s rows.

    With ``rows_in``, the action that computes the result also counts every judged row
    into it (``rows_in``, valid or not): each row's group carries its size to the
    result stage, which is observed once per task (a shuffle's map side may run again
    on a cluster, the result stage's tasks count once).
    """
    from pyspark.sql import functions as F

    # Latest valid version: max over a struct compares field by field, newest updated_at
    # first, then the other columns, so equal timestamps still pick the same row. Invalid
    # rows enter as null (ignored by max) rather than being filtered first: a filter would
    # be pushed below the typing and parse every value twice.
    others = [name for name in V2_COLUMNS if name not in ("order_id", "updated_at")]
    version = F.struct("updated_at", *others)
    latest = F.max(F.when(F.col("reason").isNull(), version)).alias("latest")
    if rows_in is None:
        grouped = judged.groupBy("order_id").agg(latest)
    else:
        grouped = judged.groupBy("order_id").agg(latest, F.count(F.lit(1)).alias("rows"))
        # coalesce: a sum over no groups is null, and an empty batch read 0 rows
        grouped = grouped.observe(rows_in, F.coalesce(F.sum("rows"), F.lit(0)).alias("rows_in"))
    return grouped.where(F.col("latest").isNotNull()).select(
        "order_id", *(F.col(f"latest.{name}").alias(name) for name in V2_COLUMNS[1:])
    )


def rejected(judged: DataFrame) -> DataFrame:
    """Every rejected row of :func:`judge` with its reason and its original record."""
    from pyspark.sql import functions as F

    v1 = F.struct(*(F.col(f"v1_{name}").alias(name) for name in V1_FIELDS))
    return judged.where(F.col("reason").isNotNull()).select(
        "reason",
        F.col("v1_order_id").alias("order_id"),
        F.coalesce(F.col(f"v1_{CORRUPT}"), F.to_json(v1)).alias("record"),
    )


# --------------------------------------------------------------------------- columns
# Each format is recognised by a cheap character test and rewritten to ISO text, which
# a cast parses: several times faster than Spark's pattern parsers (to_date with a
# format), and trying pattern after pattern would make the JVM build an exception per
# miss. Regular expressions are avoided where a plain string test does.


def _trimmed(name: str) -> Column:
    """The field without surrounding blanks; null if nothing is left."""
    from pyspark.sql import functions as F

    value = F.trim(F.col(name))
    return F.when(value != "", value).alias(name)


def _typed(name: str) -> Column:
    return {
        "order_id": _order_id,
        "customer_id": _customer_id,
        "order_date": _order_date,
        "updated_at": _updated_at,
        "amount": _amount,
        "currency": _currency,
        "status": _status,
    }[name]().alias(name)


def _order_id() -> Column:
    from pyspark.sql import functions as F

    text = F.col("order_id")
    return (
        F.when(text.startswith("ORD-"), F.substring(text, 5, 30)).otherwise(text).try_cast("bigint")
    )


def _customer_id() -> Column:
    from pyspark.sql import functions as F

    text = F.col("customer_id")
    return F.when(text.startswith("C"), F.substring(text, 2, 30)).otherwise(text).try_cast("bigint")


def _order_date() -> Column:
    from pyspark.sql import functions as F

    text = F.col("order_date")
    fifth, third = F.substring(text, 5, 1), F.substring(text, 3, 1)
    day_first = F.concat_ws(
        "-", F.substring(text, 7, 4), F.substring(text, 4, 2), F.substring(text, 1, 2)
    )
    iso = (
        F.when(fifth == "-", text)
        .when(third == "/", day_first)  # dd/MM/yyyy
        .when(fifth == "/", F.translate(text, "/", "-"))  # yyyy/MM/dd
        .otherwise(_month_name_date(text))  # MMM d yyyy
    )
    return iso.try_cast("date")  # yyyy-MM-dd; an impossible date (Feb 30) gives null


def _month_name_date(text: Column) -> Column:
    from pyspark.sql import functions as F

    parts = F.split(text, " ")
    months = F.create_map(*(F.lit(v) for n, name in enumerate(MONTHS, 1) for v in (name, n)))
    month = F.try_element_at(months, F.initcap(F.try_element_at(parts, F.lit(1))))
    day = F.try_element_at(parts, F.lit(2))
    year = F.try_element_at(parts, F.lit(3))
    return F.concat_ws("-", year, F.lpad(month.cast("string"), 2, "0"), F.lpad(day, 2, "0"))


def _updated_at() -> Column:
    from pyspark.sql import functions as F

    text = F.col("updated_at")
    # Only dash-free text can be epoch seconds; asking first is cheap, whereas a failing
    # try_cast to a number costs the JVM an exception.
    epoch = F.when(~text.contains("-"), text.try_cast("bigint"))
    # No zone written means UTC: say so in the text rather than trust the session zone.
    zoned = F.when(F.length(text) == 19, F.concat(text, F.lit("Z"))).otherwise(text)
    return F.when(epoch.isNotNull(), F.timestamp_seconds(epoch)).otherwise(
        zoned.try_cast("timestamp")  # ISO 8601, 'T' or ' ', with Z or +hh:mm
    )


def _amount() -> Column:
    from pyspark.sql import functions as F

    digits = F.regexp_replace(F.col("amount"), r"[^0-9.\-]", "")
    return F.when(digits != "", digits).try_cast(AMOUNT_TYPE)


def _currency() -> Column:
    from pyspark.sql import functions as F

    amount = F.coalesce(F.col("amount"), F.lit(""))
    from_symbol = [F.when(amount.contains(sym), code) for sym, code in SYMBOL_CURRENCIES.items()]
    code = F.regexp_extract(amount, r"([A-Z]{3})", 1)
    return F.coalesce(  # evaluated in order, stopping at the first non-null
        F.upper(F.col("currency")),
        *from_symbol,
        F.when(code != "", code),
        F.lit(DEFAULT_CURRENCY),
    )


def _status() -> Column:
    from pyspark.sql import functions as F

    status = F.lower(F.col("status"))
    return F.when(status == "canceled", "cancelled").otherwise(F.coalesce(status, F.lit("unknown")))


def _reason() -> Column:
    """Why a row of the typed frame is rejected (the first problem found), or null."""
    from pyspark.sql import functions as F

    checks = [F.when(F.col(f"v1_{CORRUPT}").isNotNull(), F.lit("malformed_line"))]
    for name in REQUIRED:
        checks.append(F.when(F.col(f"t_{name}").isNull(), F.lit(f"missing_{name}")))
        checks.append(F.when(F.col(name).isNull(), F.lit(f"bad_{name}")))
    return F.coalesce(*checks)
