"""Chunk output fenced per attempt: written apart, published by a fenced write, then
renamed into place.

A chunk may run more than once (a crash, a lost lease, a stop), and an attempt that is
dead to us may still be writing: a SIGKILLed Spark Connect client's operation runs on in
the server, a SIGSTOPped driver wakes up. So no two attempts ever write one path:

1. :func:`write_chunk_output` writes the attempt's rows to a hidden directory named
   from its claim, ``<parent>/_attempts/<name>.<claim>`` (Spark readers skip ``_``
   paths), observing their count and checksum in the same pass;
2. it **publishes** them with ``chunk.publish``: a write to the chunk's record,
   conditional on its ETag like a checkpoint, that succeeds only while this attempt
   still holds the chunk. An attempt that lost the chunk stops here (``LeaseLost``)
   and has touched nothing anyone reads;
3. it puts the ``_COMMITTED`` marker (rows, checksum, format, the attempt's claim) into
   its directory and renames that directory to the chunk's path: atomically, and
   refused if something is already there (an earlier publication is first moved aside
   into ``_attempts``). So the path holds the published attempt's rows and marker
   whole, or (for an instant while a re-run replaces them) nothing;
4. it removes the directories of the attempts it knows are dead (the one it took the
   chunk over from, the publication it replaced). :func:`finalize_outputs` makes every
   published output's path right from the store's records and sweeps ``_attempts``.

Readers trust a path only through :func:`read_commit` / :func:`is_committed`, and
``finalize`` through ``summary.outputs()`` (the store's record of what was published).
After :func:`finalize_outputs`, a plain ``spark.read`` of a chunk's path gives exactly
its published rows, and nothing else is left beside it.

Where the rename happens: plain paths and ``file://`` URLs with ``os.rename`` (atomic,
refuses a non-empty target); other URIs through a classic session's Hadoop file system
(atomic on HDFS and ADLS Gen2 with a hierarchical namespace). A Spark Connect client has
no file system: a URI's output there stays in its attempt directory and the marker at
the chunk's path names it (``ChunkCommit.path``): readers follow the marker, or
:func:`finalize_outputs`' list. See docs/spark.md, "Fenced output".

The count and the checksum are observed while the write runs (Spark's ``observe``) for
formats that give back exactly what was written (:data:`EXACT_FORMATS`); other formats
are read back once written. PySpark is imported only when used.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from checkpoint import checks
from checkpoint.errors import ConfigurationError
from checkpoint.layout import check_job_id
from jobs.chunk import Chunk
from jobs.spark.output_files import LocalFiles, OutputFiles, files_for, is_uri
from jobs.spark.output_metrics import (
    EXACT_FORMATS,
    OBSERVED_METRICS_WAIT_SECONDS,
    content_checksum,
    metrics,
    new_observation,
    observed_counts,
    observed_metrics,
    read_back_counts,
)
from jobs.summary import JobSummary

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "ATTEMPTS_DIR",
    "COMMIT_MARKER",
    "EXACT_FORMATS",
    "OBSERVED_METRICS_WAIT_SECONDS",
    "ChunkCommit",
    "attempt_path",
    "chunk_output_path",
    "content_checksum",
    "finalize_outputs",
    "is_committed",
    "observed_metrics",
    "read_commit",
    "sweep_attempts",
    "write_chunk_output",
]

log = logging.getLogger(__name__)

#: The marker file in a chunk's output directory: what was published, by which attempt.
COMMIT_MARKER = "_COMMITTED"
#: The hidden folder beside a chunk's path where each attempt writes (Spark skips ``_``).
ATTEMPTS_DIR = "_attempts"
#: How often a publishing attempt tries to move into place when a stalled attempt keeps
#: slipping its own directory in between (each such attempt can do so at most once).
_INSTALL_TRIES = 5


@dataclass(frozen=True)
class ChunkCommit:
    """What a ``_COMMITTED`` marker records about a chunk's output.

    Attributes:
        rows: rows in the output.
        checksum: :func:`content_checksum` of the output (what reading it back and
            checksumming would give), or None when not computed. A decimal string: the
            checksums of disjoint outputs add up to the checksum of their union.
        format: the data source format (``parquet``, ``json``, ...).
        attempt: the claim token of the attempt that wrote and published it ("" in a
            marker written before output was fenced).
        path: where its rows are: the chunk's path once renamed into place, else (a
            URI through Spark Connect) the attempt's own directory.
    """

    rows: int
    checksum: str | None
    format: str
    attempt: str = ""
    path: str = ""


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


def attempt_path(path: str, claim: str) -> str:
    """Where the attempt of claim ``claim`` writes the output of ``path``: a hidden
    directory beside it, ``<parent>/_attempts/<name>.<claim>``."""
    parent, _, name = path.rstrip("/").rpartition("/")
    return f"{parent}/{ATTEMPTS_DIR}/{name}.{claim}"


def write_chunk_output(
    df: DataFrame,
    path: str,
    format: str = "parquet",
    *,
    chunk: Chunk,
    options: dict[str, str] | None = None,
    checksum: bool = True,
    read_back: bool | None = None,
) -> ChunkCommit:
    """Write ``df`` as this attempt of ``chunk``'s output at ``path``, fenced.

    In order (see the module's docstring): write to the attempt's own hidden directory
    (:func:`attempt_path`), publish (``chunk.publish``: succeeds only while this attempt
    holds the chunk), then move it into place with its marker and remove what the
    attempts before it left. Running it again for the same path (a re-run) replaces
    the published output whole, never adds to it; an attempt that lost the chunk
    raises at the publish, having touched nothing anyone reads.

    The rows and checksum are observed in the write's own pass over the data
    (``DataFrame.observe``): one Spark action, ``df`` computed once; they are counted
    in the write's last stage, whose tasks count once each even when one is retried.
    For a format outside :data:`EXACT_FORMATS` the output is read back and counted
    instead (``read_back``), as it also is if Spark does not deliver the observed
    metrics: the marker always describes what a reader gets.

    Args:
        df: the chunk's output.
        path: the chunk's output directory, e.g. from :func:`chunk_output_path`.
        format: a Spark data source format.
        chunk: the chunk being processed (its claim names the attempt's directory, and
            its record is where the output is published).
        options: data source options, used for writing (and reading back, e.g.
            ``{"header": "true"}`` for csv).
        checksum: also compute :func:`content_checksum` (a 64-bit hash of every row).
        read_back: count (and checksum) the output read back after the write, one more
            scan; None: only for formats outside :data:`EXACT_FORMATS`.

    Returns:
        What was published (and what the marker at ``path`` says).

    Raises:
        LeaseLost: the chunk is no longer this attempt's: nothing was published, and
            what it wrote is in its own hidden directory, removed later.
        AnalysisException: ``checksum`` on a frame Spark cannot hash (a map column),
            before anything is written.
    """
    options = dict(options or {})
    if read_back is None:
        read_back = format.lower() not in EXACT_FORMATS
    observation = None if read_back else new_observation()
    # Attached before anything is written: a frame that cannot be hashed fails here.
    written = df if observation is None else df.observe(observation, *metrics(df, checksum))
    files = files_for(path, df.sparkSession)
    mine = attempt_path(path, chunk.claim)
    written.write.mode("overwrite").format(format).options(**options).save(mine)
    counts = None if observation is None else observed_counts(observation, checksum, path)
    rows, digest = counts or read_back_counts(df, mine, format, options, checksum)
    commit = ChunkCommit(
        rows=rows,
        checksum=digest,
        format=format,
        attempt=chunk.claim,
        path=path if files.renames else mine,
    )
    record = asdict(commit)
    chunk.publish(path, record)  # the fence: LeaseLost if the chunk is not ours
    _put_in_place(files, path, commit, confirm=lambda: chunk.publish(path, record))
    # The attempt this one took over from is dead to us: whatever it wrote here is
    # litter. (Others' directories are swept by finalize_outputs, when no attempt of
    # the job can be writing: a directory here may be a newer attempt's, still writing.)
    taken_over = chunk.taken_over
    if taken_over is not None and taken_over.claim not in ("", chunk.claim):
        _remove_quietly(files, attempt_path(path, taken_over.claim))
    return commit


def _put_in_place(
    files: OutputFiles, path: str, commit: ChunkCommit, confirm: Callable[[], None] | None
) -> None:
    """Make ``path`` hold ``commit``'s rows and marker (it was just published).

    ``confirm`` raises LeaseLost if the attempt no longer holds the chunk (a fenced
    write); it is called before anything already at ``path`` is moved aside, so an
    attempt that published and then stalled past its lease cannot push the newer
    publication out. None: no attempt can publish any more (finalize).
    """
    marker = json.dumps(asdict(commit), sort_keys=True)
    mine = attempt_path(path, commit.attempt)
    if not files.renames:
        # Nothing can move: the rows stay in the attempt's directory, which the marker
        # at the chunk's path names for readers.
        files.write_text(f"{path}/{COMMIT_MARKER}", marker)
        return
    if not files.exists(mine):
        # Removed by the attempt that took the chunk over: this one is dead to us.
        if confirm is not None:
            confirm()
        raise RuntimeError(f"{path}: the published attempt's directory {mine} is gone")
    files.write_text(f"{mine}/{COMMIT_MARKER}", marker)  # moves in with the rows
    for _ in range(_INSTALL_TRIES):
        if files.rename_dir(mine, path):
            return
        # An earlier publication is there (a re-run of the path), or a stalled
        # attempt's directory slipped in: make sure the chunk is still ours, then move
        # it back to its attempt's directory (where finalize_outputs finds it, should
        # it be the published one after all) and try again.
        if confirm is not None:
            confirm()
        there = _commit_of(_marker(files, path))
        claim = there.attempt if there is not None and there.attempt else "replaced"
        if not files.rename_dir(path, attempt_path(path, claim)):
            files.rename_dir(path, attempt_path(path, f"{claim}-{uuid.uuid4().hex[:8]}"))
    raise RuntimeError(f"{path}: could not move the published attempt {mine} into place")


def _remove_quietly(files: OutputFiles, path: str) -> None:
    try:
        files.remove(path)
    except Exception as error:  # noqa: BLE001 - best effort: finalize sweeps again
        log.warning("could not remove %s (a dead attempt's output): %s", path, error)


def read_commit(path: str, *, spark: SparkSession | None = None) -> ChunkCommit | None:
    """What the marker at chunk output ``path`` says was published, or None if none is.

    Its ``path`` is where the published rows are: ``path`` itself once renamed into
    place, else (a URI written through Spark Connect) the attempt's directory.

    Args:
        path: the chunk's directory.
        spark: for URIs, the session whose Hadoop file system reads them; this
            process's session (:func:`jobs.spark.spark_session`) if None. Plain paths
            need no Spark.
    """
    commit = _commit_of(_marker(files_for(path, spark), path))
    if commit is not None and not commit.path:
        return ChunkCommit(commit.rows, commit.checksum, commit.format, commit.attempt, path)
    return commit


def is_committed(path: str, *, spark: SparkSession | None = None) -> bool:
    """True if the chunk output at ``path`` was completely written (its marker is there)."""
    return read_commit(path, spark=spark) is not None


def finalize_outputs(
    summary: JobSummary, *, spark: SparkSession | None = None
) -> Iterator[tuple[int, str, ChunkCommit]]:
    """Make every published output of the job right and sweep what attempts left.

    For each done chunk's publications (``summary.outputs()``, the store's record: the
    truth) it makes the path hold the published attempt, moving it into place if a
    crash left it in its attempt directory, rewrites the marker where it says
    otherwise, and removes every other attempt's directory of that path. Call it from
    ``finalize``: every chunk is done then, so no attempt of this job may still write.
    Idempotent: a finalize run again after a crash does what is left.

    Yields:
        ``(chunk index, path, commit)`` of every published output, in chunk order:
        ``commit.path`` is where a reader finds its rows (a manifest).

    Raises:
        RuntimeError: a published attempt's rows are gone from both its directory and
            the path (removed by hand?): the job's output is incomplete.
    """
    for index, outputs in summary.outputs():
        for path, record in sorted(outputs.items()):
            commit = _commit_of(record)
            if commit is None:
                raise RuntimeError(f"chunk {index}: unreadable publication of {path}: {record!r}")
            files = files_for(path, spark)
            _settle(files, path, commit)
            _sweep(files, path, keep=commit.attempt)
            yield index, path, commit


def sweep_attempts(outputs: Mapping[str, Any]) -> int:
    """Remove the dead attempts' directories beside the published outputs ``outputs``
    (one chunk's publications, by path) that this process can reach without Spark:
    plain paths and ``file://`` URLs. For ``runner delete`` and ``purge``, which run
    without the job's Spark session: a job that ended without finalize (failed,
    cancelled) leaves its attempts' litter, never its published output. Returns how
    many directories went.
    """
    removed = 0
    for path, record in outputs.items():
        commit = _commit_of(record)
        if commit is None or (is_uri(path) and not path.startswith("file:")):
            continue  # an unreadable record, or a URI only the job's Spark can reach
        files = LocalFiles()
        before = len(_attempt_names(files, path))
        _sweep(files, path, keep=commit.attempt)
        removed += before - len(_attempt_names(files, path))
    return removed


def _attempt_names(files: OutputFiles, path: str) -> list[str]:
    parent, _, name = path.rstrip("/").rpartition("/")
    return [
        entry for entry in files.names(f"{parent}/{ATTEMPTS_DIR}") if entry.startswith(f"{name}.")
    ]


def _settle(files: OutputFiles, path: str, commit: ChunkCommit) -> None:
    if _commit_of(_marker(files, path)) != commit:
        _put_in_place(files, path, commit, confirm=None)


def _sweep(files: OutputFiles, path: str, keep: str) -> None:
    parent, _, name = path.rstrip("/").rpartition("/")
    attempts = f"{parent}/{ATTEMPTS_DIR}"
    kept = f"{name}.{keep}" if not files.renames else None
    for entry in _attempt_names(files, path):
        if entry != kept:
            _remove_quietly(files, f"{attempts}/{entry}")
    if files.renames and not files.names(attempts):
        _remove_quietly(files, attempts)


def _marker(files: OutputFiles, path: str) -> str | None:
    return files.read_text(f"{path}/{COMMIT_MARKER}")


def _commit_of(found: str | Mapping[str, Any] | None) -> ChunkCommit | None:
    """A marker's text or a publication record as a commit; None if it is none."""
    if found is None:
        return None
    try:
        fields = json.loads(found) if isinstance(found, str) else dict(found)
        return ChunkCommit(
            rows=int(fields["rows"]),
            checksum=fields["checksum"],
            format=str(fields["format"]),
            attempt=str(fields.get("attempt", "")),
            path=str(fields.get("path", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None  # a marker we cannot read vouches for nothing
