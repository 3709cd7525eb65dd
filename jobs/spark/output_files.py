"""The file operations fenced chunk output needs, on each kind of storage it may live on.

:mod:`jobs.spark.chunk_output` writes each attempt of a chunk under a hidden directory of its
own and, once the attempt has published it, renames that directory into place. Three
ways to reach the files:

- :class:`LocalFiles`: plain paths (and ``file://`` URLs from a Connect client), with
  the standard library.
  ``os.rename`` of a directory is atomic and refuses a non-empty target, so an attempt
  can never rename over another's published output.
- :class:`HadoopFiles`: URIs (``abfss://``, ``hdfs://``, ``file://``) through a classic
  Spark session's Hadoop file system. Renames a directory atomically where the file system
  does (HDFS, ADLS Gen2 with a hierarchical namespace); a rename onto an existing
  directory is refused here before it is tried (Hadoop would move *into* it).
- :class:`SparkFiles`: other URIs from a Spark Connect client, which has no file system
  of its own: text written and read as one-line Spark text datasets, and no rename or
  listing at all, so output there stays where its attempt wrote it and readers follow
  the marker (``ChunkCommit.path``).

PySpark is imported only when used.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

from jobs.spark.session import is_connect, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


class OutputFiles(Protocol):
    """Files and directories at full paths (or URIs) of one storage."""

    #: True if :meth:`rename_dir` and :meth:`names` work (False: Spark Connect URIs).
    renames: bool

    def read_text(self, path: str) -> str | None:
        """The text of the file (or Spark text dataset) at ``path``; None if absent."""
        ...

    def write_text(self, path: str, text: str) -> None:
        """Write ``text`` so that a reader sees the old text, none, or the whole new one."""
        ...

    def exists(self, path: str) -> bool: ...

    def rename_dir(self, source: str, target: str) -> bool:
        """Rename directory ``source`` to ``target``; False (nothing moved) if ``target``
        exists or ``source`` does not."""
        ...

    def remove(self, path: str) -> None:
        """Remove the file or directory tree at ``path`` (nothing if absent)."""
        ...

    def names(self, directory: str) -> list[str]:
        """The names in ``directory`` ([] if it does not exist)."""
        ...


def is_uri(path: str) -> bool:
    return bool(_URI.match(path))


def files_for(path: str, spark: SparkSession | None) -> OutputFiles:
    """The way to reach ``path``'s files: local for plain paths; a URI through
    ``spark``'s Hadoop file system (this process's session if None), or from a Spark
    Connect client, locally for a ``file://`` URL (a folder the client shares with
    the cluster, as plain paths must be) and as Spark datasets otherwise."""
    if not is_uri(path):
        return LocalFiles()
    if spark is None:
        spark = spark_session()
    if not is_connect(spark):
        return HadoopFiles(spark)
    if path.startswith("file:"):
        return LocalFiles()
    return SparkFiles(spark)


def local_path(path: str) -> Path:
    """A plain path, or a ``file://`` URL's path, as a Path."""
    if path.startswith("file:"):
        return Path(unquote(urlparse(path).path))
    return Path(path)


class LocalFiles:
    """Plain paths and ``file://`` URLs (for a cluster: a folder every node shares)."""

    renames = True

    def read_text(self, path: str) -> str | None:
        try:
            return local_path(path).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write_text(self, path: str, text: str) -> None:
        # Via a hidden temporary and a rename: a reader sees no file or a whole one.
        target = local_path(path)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, target)

    def exists(self, path: str) -> bool:
        return local_path(path).exists()

    def rename_dir(self, source: str, target: str) -> bool:
        try:
            # Atomic, and refused (ENOTEMPTY/EEXIST) if another attempt's output is at
            # the target: the kernel decides, so no other writer slips in between.
            os.rename(local_path(source), local_path(target))
        except OSError:
            return False
        return True

    def remove(self, path: str) -> None:
        local = local_path(path)
        if local.is_dir() and not local.is_symlink():
            shutil.rmtree(local, ignore_errors=True)
        else:
            local.unlink(missing_ok=True)

    def names(self, directory: str) -> list[str]:
        try:
            return sorted(os.listdir(local_path(directory)))
        except (FileNotFoundError, NotADirectoryError):
            return []


class HadoopFiles:
    """URIs through a classic Spark session's Hadoop file system (abfss://, hdfs://...)."""

    renames = True

    def __init__(self, spark: SparkSession):
        context = spark.sparkContext
        self._jvm: Any = context._jvm  # py4j's gateway view: untyped
        self._conf = context._jsc.hadoopConfiguration()

    def _fs_path(self, path: str) -> tuple[Any, Any]:
        hadoop_path = self._jvm.org.apache.hadoop.fs.Path(path)
        return hadoop_path.getFileSystem(self._conf), hadoop_path

    def read_text(self, path: str) -> str | None:
        fs, hadoop_path = self._fs_path(path)
        if not fs.exists(hadoop_path):
            return None
        stream = fs.open(hadoop_path)
        try:
            scanner = self._jvm.java.util.Scanner(stream, "UTF-8").useDelimiter("\\A")
            return str(scanner.next()) if scanner.hasNext() else ""
        finally:
            stream.close()

    def write_text(self, path: str, text: str) -> None:
        # One create-and-close: object stores (ABFS, S3) make a blob visible whole.
        fs, hadoop_path = self._fs_path(path)
        stream = fs.create(hadoop_path, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def exists(self, path: str) -> bool:
        fs, hadoop_path = self._fs_path(path)
        return bool(fs.exists(hadoop_path))

    def rename_dir(self, source: str, target: str) -> bool:
        fs, source_path = self._fs_path(source)
        _, target_path = self._fs_path(target)
        # Hadoop renames a directory *into* an existing target directory: refuse that
        # here. Not atomic with the rename; the window is a stalled attempt waking in
        # the milliseconds between them (docs/spark.md, "Fenced output").
        if fs.exists(target_path) or not fs.exists(source_path):
            return False
        return bool(fs.rename(source_path, target_path))

    def remove(self, path: str) -> None:
        fs, hadoop_path = self._fs_path(path)
        fs.delete(hadoop_path, True)

    def names(self, directory: str) -> list[str]:
        fs, hadoop_path = self._fs_path(directory)
        if not fs.exists(hadoop_path):
            return []
        return sorted(str(status.getPath().getName()) for status in fs.listStatus(hadoop_path))


class SparkFiles:
    """URIs from a Spark Connect client: text as one-line Spark text datasets.

    A Connect client has no Hadoop file system, and Spark's data sources write
    directories, not files: the text at ``path`` is the directory ``path`` holding one
    text file. Spark readers skip it like any ``_`` path. Written with overwrite (a
    reader sees the old text, none, or the new); removed by overwriting it with
    nothing, which reads back as absent. No rename and no listing.
    """

    renames = False

    def __init__(self, spark: SparkSession):
        self._spark = spark

    def read_text(self, path: str) -> str | None:
        from pyspark.errors import AnalysisException

        try:
            lines = self._spark.read.text(path).collect()
        except AnalysisException as error:
            if error.getCondition() == "PATH_NOT_FOUND":
                return None
            raise
        return "\n".join(row["value"] for row in lines) if lines else None

    def write_text(self, path: str, text: str) -> None:
        frame = self._spark.createDataFrame([(text,)], "value string").coalesce(1)
        frame.write.mode("overwrite").text(path)

    def exists(self, path: str) -> bool:
        return self.read_text(path) is not None

    def rename_dir(self, source: str, target: str) -> bool:
        return False

    def remove(self, path: str) -> None:
        # Overwriting with no rows leaves an empty dataset: nothing for any reader.
        self._spark.createDataFrame([], "value string").write.mode("overwrite").text(path)

    def names(self, directory: str) -> list[str]:
        return []
