"""Spark inside chunks: one SparkSession per worker process, one job group per chunk.

PySpark is the ``spark`` extra (``make venv`` installs it): it is imported
only when a session is first wanted, so ``import jobs.spark`` and the rest of the
project never need it. ::

    from jobs.spark import (SparkChunkedJob, chunk_output_path, finalize_outputs,
                            write_chunk_output)

    class MigrateOrders(SparkChunkedJob):
        spark_conf = {"spark.sql.shuffle.partitions": "8"}

        def process(self, chunk):
            with self.job_group(chunk):          # cancelled if the chunk must stop
                df = self.spark.read.json(chunk.payload["files"])
                out = chunk_output_path(chunk.params["out"], chunk.job_id, chunk.index)
                commit = write_chunk_output(migrate(df), out, chunk=chunk)
            return {"rows": commit.rows}

        def finalize(self, params, summary):
            manifest = list(finalize_outputs(summary, spark=self.spark))

The session is built on first use with the master (or Spark Connect remote) and conf of
:class:`SparkSettings` (the job class's ``spark_master`` / ``spark_remote`` /
``spark_conf``, overridden by ``RUNNER_SPARK_MASTER`` / ``RUNNER_SPARK_REMOTE`` /
``RUNNER_SPARK_CONF``) and then shared by every chunk the process runs: a driver's JVM
starts once per worker, not once per chunk, and a Connect client (no JVM at all) keeps
one server-side session.
"""

from jobs.planning import split_files, split_key_range
from jobs.spark.chunk_output import (
    ATTEMPTS_DIR,
    COMMIT_MARKER,
    EXACT_FORMATS,
    ChunkCommit,
    attempt_path,
    chunk_output_path,
    content_checksum,
    finalize_outputs,
    is_committed,
    observed_metrics,
    read_commit,
    write_chunk_output,
)
from jobs.spark.job import ChunkJobGroup, SparkChunkedJob, job_group
from jobs.spark.session import default_parallelism, is_connect, spark_session, stop_spark
from jobs.spark.settings import CONF_ENV, MASTER_ENV, REMOTE_ENV, SparkSettings

__all__ = [
    "ATTEMPTS_DIR",
    "COMMIT_MARKER",
    "CONF_ENV",
    "EXACT_FORMATS",
    "ChunkCommit",
    "ChunkJobGroup",
    "MASTER_ENV",
    "REMOTE_ENV",
    "SparkChunkedJob",
    "SparkSettings",
    "attempt_path",
    "chunk_output_path",
    "content_checksum",
    "default_parallelism",
    "finalize_outputs",
    "is_committed",
    "is_connect",
    "job_group",
    "observed_metrics",
    "read_commit",
    "spark_session",
    "split_files",
    "split_key_range",
    "stop_spark",
    "write_chunk_output",
]
