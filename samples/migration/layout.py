"""Where the migration's data lives: its parameters, the blob store, staging, output paths.

The input is a blob container (the embedded store's blob folder, or an Azure / Azurite
container). Spark cannot read Azurite (no hadoop-azure jar here, and Azurite has no Data
Lake endpoint), so a batch's input blobs are first **staged**: copied through the blob
SDK, in bounded ranged reads, to a scratch folder that Spark then reads, and which is
removed after the batch. On a cluster with hadoop-azure, set ``spark_input`` to the
container's ``abfss://`` URI instead: Spark then reads the blobs itself and nothing is
staged.

Staged files are read by Spark's executors, not by the worker. With a ``local`` master
they run in the worker's own JVM, so any folder of this machine will do. On a cluster
or through a Spark Connect server they run elsewhere: the scratch folder must be on a
file system that every executor reads at the same path (an NFS or Azure Files mount),
and the params must say so (``scratch_shared``); :func:`check_staging` refuses a
driver-local one before anything is staged.

The output is a Spark path (``output``): a local folder here, ``abfss://...`` on a
cluster. Each batch of each chunk writes its own deterministic directories (see
:func:`batch_path`), so any attempt of a chunk rewrites exactly its own files.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError
from checkpoint.storage import Storage
from jobs.spark import SparkSettings, chunk_output_path

#: Bytes per ranged read while staging: bounded memory whatever the blob's size.
STAGE_READ_BYTES = 8 << 20
#: The smallest piece :func:`copy_blob` cuts a blob into: smaller ones cost Spark more
#: per file than they balance.
MIN_PIECE_BYTES = 1 << 20
#: The two outputs of every batch.
KINDS = ("orders", "rejects")


@dataclass(frozen=True)
class MigrationParams:
    """The job's parameters (``runner submit --params``), with their defaults.

    Attributes:
        output: where Spark writes the v2 Parquet (a local folder, or a URI Spark can
            write such as ``abfss://orders-v2@<account>.dfs.core.windows.net/out``).
        input_container: the blob container of the v1 export.
        input_prefix: only blobs whose names start with this.
        results_container: where ``finalize`` writes ``<job_id>/manifest.json`` and
            ``<job_id>/summary.json``.
        chunk_bytes: input bytes per chunk (files are never split).
        files_per_batch: input files per checkpoint inside a chunk.
        scratch: the folder for staged inputs, a path or a ``file://`` URL (default:
            the system's temp folder, which only a local master can read).
        scratch_shared: the caller's word that ``scratch`` is on a file system every
            Spark executor reads at the same path; required, with ``scratch``, when
            Spark runs on a cluster or behind a Spark Connect server.
        storage: where the blobs are, as ``runner --storage``; default None: the
            workers' ``$RUNNER_STORAGE`` (then ``./.runner``). Never put an account key
            here: params are stored in the checkpoint records; use the environment.
        spark_input: a URI Spark reads the input container at (``abfss://...``); when
            set, inputs are read in place instead of staged.
    """

    output: str
    input_container: str = "orders-v1"
    input_prefix: str = "export/"
    results_container: str = "orders-v2"
    chunk_bytes: int = 64 << 20
    files_per_batch: int = 1
    scratch: str | None = None
    scratch_shared: bool = False
    storage: str | None = None
    spark_input: str | None = None

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> MigrationParams:
        """Parse and check the submitted params."""
        known = {field.name for field in fields(cls)}
        unknown = set(params) - known
        if unknown or "output" not in params:
            raise ConfigurationError(
                f"migration params need 'output' and take only {sorted(known)}; "
                f"got {sorted(params)}"
            )
        made = cls(**params)
        if made.chunk_bytes < 1 or made.files_per_batch < 1:
            raise ConfigurationError("chunk_bytes and files_per_batch must be >= 1")
        if not isinstance(made.scratch_shared, bool):
            raise ConfigurationError(
                f"scratch_shared must be true or false, not {made.scratch_shared!r}"
            )
        if made.scratch is not None:
            scratch_folder(made.scratch)  # a path or a file:// URL, nothing else
        return made

    def open_storage(self) -> Storage:
        """The storage holding the input and results containers."""
        return open_storage(self.storage)


def params_of(cls: Any, params: Mapping[str, Any], *, required: tuple[str, ...]) -> Any:
    """``cls(**params)`` for a params dataclass, refusing unknown params and missing
    ``required`` ones with one line naming what it takes."""
    known = {field.name for field in fields(cls)}
    if set(params) - known or not set(required) <= set(params):
        raise ConfigurationError(
            f"{cls.__name__} needs {', '.join(required)} and takes only {sorted(known)}; "
            f"got {sorted(params)}"
        )
    return cls(**params)


class StagingUnreachable(ConfigurationError):
    """Staged inputs would land where Spark's executors cannot read them."""


def scratch_folder(scratch: str) -> Path:
    """The local folder of a ``scratch`` param: a path, or a ``file://`` URL.

    Raises:
        ConfigurationError: another kind of URL. Staging writes through this machine's
            file system; object storage is read in place (``spark_input``) instead.
    """
    if not is_uri(scratch):
        return Path(scratch)
    parsed = urlparse(scratch)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        raise ConfigurationError(
            f"scratch {scratch!r}: staging writes through this machine's file system, so "
            "give a path or a file:// URL on a shared mount; for object storage Spark can "
            "read (abfss://...) set spark_input instead, and nothing is staged"
        )
    return Path(unquote(parsed.path))


def check_staging(params: MigrationParams, spark: SparkSettings) -> None:
    """Refuse staging where Spark's executors cannot read the staged files.

    Raises:
        StagingUnreachable: Spark runs on a cluster or behind a Connect server
            (``spark.target``), inputs are staged (no ``spark_input``), and the params
            do not name a scratch folder stated to be shared.
    """
    if params.spark_input or spark.runs_locally or (params.scratch and params.scratch_shared):
        return
    where = f"scratch {params.scratch!r}" if params.scratch else "the system's temp folder"
    raise StagingUnreachable(
        f"Spark runs on {spark.target}, whose executors cannot read files staged in "
        f"{where} on this worker's disk: set params scratch to a folder every executor "
        "reads at the same path (a shared mount) and scratch_shared to true, or "
        "spark_input to a URI Spark reads the input at (abfss://...)"
    )


def batch_path(params: MigrationParams, job_id: str, index: int, batch: int, kind: str) -> str:
    """``<output>/<job_id>/chunk-000003/orders/batch-0001``: one batch's output directory."""
    chunk = chunk_output_path(params.output, job_id, index)
    return f"{chunk}/{kind}/batch-{batch:04d}"


def is_uri(path: str) -> bool:
    """True for ``abfss://...``-style paths (read through Spark's file system)."""
    return "://" in path


@contextmanager
def staged_inputs(
    storage: Storage,
    params: MigrationParams,
    names: list[str],
    scratch: str | None = None,
    *,
    parallelism: int = 1,
    as_uris: bool = False,
) -> Iterator[list[str]]:
    """Paths Spark can read for the blobs ``names``: staged copies, removed on exit.

    With ``parallelism`` (the Spark session's default parallelism), each blob is cut
    into :func:`pieces_per_file` local files of about equal size, at line ends, so the
    batch's pieces can be dealt out evenly over the cores. Spark makes at least one
    task per file it cannot pack with another: 3 whole files on 2 cores are 3 tasks,
    and one core idles through the last third of the scan; cut in 2, they are 6 equal
    pieces that Spark packs into 2 tasks. Lines are never cut, so what Spark reads is
    the same rows (a line's order inside a batch does not matter to the transform).

    With ``params.spark_input`` set, the blobs' own URIs, nothing copied or cut. With
    ``as_uris``, staged files as ``file://`` URIs: a cluster's default file system may
    be another (HDFS), and a plain path would be looked up there.
    """
    if params.spark_input:
        yield [f"{params.spark_input.rstrip('/')}/{name}" for name in names]
        return
    root = scratch or params.scratch
    if root:
        scratch_folder(root).mkdir(parents=True, exist_ok=True)
    folder = Path(
        tempfile.mkdtemp(prefix="migration-", dir=scratch_folder(root) if root else None)
    ).absolute()
    pieces = pieces_per_file(len(names), parallelism)
    try:
        paths: list[str] = []
        for number, name in enumerate(names):
            # Numbered: blob names may repeat their last segment in other folders.
            target = folder / f"{number:05d}-{Path(name).name}"
            staged = copy_blob(storage, params.input_container, name, target, pieces)
            paths.extend(path.as_uri() if as_uris else str(path) for path in staged)
        yield paths
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def pieces_per_file(files: int, parallelism: int) -> int:
    """Pieces to cut each of ``files`` equal files into, so that their number is a
    multiple of ``parallelism``: the fewest that deal out evenly (3 files on 2 cores:
    2 each; 2 or 4 files: whole)."""
    if files < 1 or parallelism < 1:
        raise ValueError("files and parallelism must be >= 1")
    return parallelism // math.gcd(files, parallelism)


def copy_blob(
    storage: Storage, container: str, name: str, target: Path, pieces: int = 1
) -> list[Path]:
    """Copy one blob to local files, one bounded ranged read at a time; the files.

    With ``pieces`` > 1, cut into that many files (``target`` with ``.1``, ``.2``, ...
    before its suffix) of about equal size, each cut just after a newline, so every
    line is whole in one piece and the pieces joined are the blob. Fewer if the blob
    is smaller than :data:`MIN_PIECE_BYTES` a piece, or has too few lines.
    """
    size = storage.blobs.info(container, name).size
    pieces = max(1, min(pieces, size // MIN_PIECE_BYTES))
    if pieces == 1:
        paths = [target]
    else:
        paths = [target.with_name(f"{target.stem}.{n}{target.suffix}") for n in range(pieces)]
    written = []
    piece, end = 0, size // pieces  # end: where the current piece should stop
    out = open(paths[0], "wb")
    try:
        for offset in range(0, size, STAGE_READ_BYTES):
            data = storage.blobs.get(container, name, offset=offset, length=STAGE_READ_BYTES)
            start = 0
            while piece < pieces - 1 and offset + len(data) >= end:
                # The first line end at or after the piece's end; none in this read: the
                # line goes on in the next one.
                cut = data.find(b"\n", max(start, end - offset - 1))
                if cut < 0:
                    break
                out.write(data[start : cut + 1])
                out.close()
                written.append(paths[piece])
                start, piece = cut + 1, piece + 1
                end = size * (piece + 1) // pieces
                out = open(paths[piece], "wb")
            out.write(data[start:])
    finally:
        out.close()
    if piece == 0 or paths[piece].stat().st_size:
        written.append(paths[piece])
    else:
        paths[piece].unlink()  # the cut before it fell on the blob's last byte
    return written


def put_json(storage: Storage, container: str, name: str, value: Any) -> None:
    """Write ``value`` as an indented JSON blob (overwriting)."""
    storage.blobs.create_container(container)
    storage.blobs.put(container, name, (json.dumps(value, indent=2) + "\n").encode("utf-8"))


def get_json(storage: Storage, container: str, name: str) -> Any:
    """Read a JSON blob written by :func:`put_json`."""
    return json.loads(storage.blobs.get(container, name))
