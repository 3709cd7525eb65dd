"""Where the checkpoint store keeps things: table, partition and row names.

Azure serves about 2,000 entities/s per table partition, so one job's chunk records are
spread over :data:`SHARDS` partitions, in blocks of :data:`SHARD_BLOCK` consecutive
chunks dealt round-robin; each shard partition also holds a counter row updated in the
same atomic batch as the chunks it counts. Blocks, not single chunks, because a worker
receives consecutive messages 32 at a time: their done marks then fall into one or two
partitions and are written in one or two batches, not sixteen. A job's
planning and finalize records sit in a small partition of their own, and so do the
notes of its parked messages while it is paused.
"""

from __future__ import annotations

import re

from checkpoint.errors import ConfigurationError

JOBS_TABLE = "runnerjobs"
TASKS_TABLE = "runnertasks"
#: Workers' heartbeats: one record per worker process, in one partition.
WORKERS_TABLE = "runnerworkers"
WORKERS_PARTITION = "workers"
#: Rate and concurrency limits shared by every worker (:mod:`checkpoint.limits.book`): one
#: partition per limit name (its ``rate`` and ``running`` rows), so one busy limit's
#: compare-and-swap writes never contend with another's, and a catalogue partition
#: naming them all (a listing reads one partition, not the whole table).
LIMITS_TABLE = "runnerlimits"
LIMITS_CATALOGUE = "~names"
#: The lease each job type learned (:mod:`checkpoint.lease_book`): one row per job type,
#: all in one partition (a few hundred types at most; each row is written by its
#: type's workers every few seconds, far below a partition's 2,000 entities/s).
LEASES_TABLE = "runnerleases"
LEASES_PARTITION = "leases"
#: Blob container for large params, payloads, state and results.
DATA_CONTAINER = "runner-data"
#: Partition of the job catalogue (one record per job).
JOBS_PARTITION = "jobs"
#: Chunk-record partitions per job.
SHARDS = 16
#: Consecutive chunks per block of a shard (a job of over SHARDS x SHARD_BLOCK = 512
#: chunks uses every shard).
SHARD_BLOCK = 32
#: Row of each shard partition holding its done / poisoned counts (sorts after chunks).
COUNTS_ROW = "zcounts"
PLAN_ROW = "plan"
FEED_ROW = "feed"
FINAL_ROW = "final"
#: The row of each task of a job's control partition (all but its chunks).
CONTROL_ROWS = {"plan": PLAN_ROW, "feed": FEED_ROW, "final": FINAL_ROW}
#: A job queue's poison queue is its name with this suffix, so a job queue name leaves
#: room for it within Azure's 63 characters.
POISON_SUFFIX = "-poison"
#: Most queues one job type may spread its chunks over (``ChunkedJob.queues``).
MAX_QUEUES = 64
#: Consecutive chunks sent to one queue of a job of several queues: the same blocks as
#: the shards'. A worker receives up to 32 consecutive messages of one queue at a time;
#: if they are consecutive chunks, their done marks fall into one or two shard
#: partitions and are written in one or two batches. Dealing single chunks round-robin
#: over four queues would spread one receive's chunks over four times the indexes.
QUEUE_BLOCK = SHARD_BLOCK
#: A job queue's resume queue: where a chunk's message waits while the chunk runs, so
#: that a chunk whose lease ran out is received before the job queue's fresh chunks.
#: As long as the poison suffix, so the same room is left for it.
RESUME_SUFFIX = "-resume"


#: A job type's intake queue, where other programs put submissions of its jobs (when
#: its class has ``intake = True``), and where those that cannot be read are moved with
#: their reason (runner.worker.intake).
INTAKE_SUFFIX = "-intake"
REJECTED_SUFFIX = "-intake-rejected"


def intake_queue_of(queue: str) -> str:
    """The intake queue of job queue ``queue``: ``<queue>-intake``."""
    return queue + INTAKE_SUFFIX


def rejected_queue_of(queue: str) -> str:
    """Where the submissions of ``queue``'s intake that cannot be read are moved:
    ``<queue>-intake-rejected``."""
    return queue + REJECTED_SUFFIX


def is_rejected_queue(queue: str) -> bool:
    return queue.endswith(REJECTED_SUFFIX)


def resume_queue_of(queue: str) -> str:
    """The resume queue of job queue ``queue``."""
    return queue + RESUME_SUFFIX


def home_queue_of(queue: str) -> str:
    """The job queue a message in ``queue`` belongs to: ``queue`` itself, or the job
    queue of a resume queue."""
    return queue.removesuffix(RESUME_SUFFIX)


def is_resume_queue(queue: str) -> bool:
    return queue.endswith(RESUME_SUFFIX)


def poison_queue_of(queue: str) -> str:
    """The poison queue of job queue ``queue`` (``<queue>-poison``, ``<queue>-2-poison``),
    or of a resume queue's job queue. A job of several queues has no messages of its own
    in ``<queue>``: its chunks moved to the resume queue are poisoned into the poison
    queue of their own queue (see :class:`runner.worker.poison.PoisonRouter`)."""
    return home_queue_of(queue) + POISON_SUFFIX


_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_job_id(job_id: str) -> str:
    """1-100 letters, digits, '.', '_' and '-', starting with a letter or digit."""
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise ConfigurationError(
            f"invalid job id {job_id!r}: use 1-100 letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return job_id


def is_job_id(text: str) -> bool:
    return bool(_JOB_ID.match(text))


#: A job's dependents (the jobs submitted to run after it): one row each, named by the
#: dependent's id, in a partition of the jobs table of its own, so the job's hand-off
#: reads its dependents, never the catalogue (no job id holds ``~``).
DEPENDENTS_PREFIX = "~after~"


def dependents_partition(job_id: str) -> str:
    return DEPENDENTS_PREFIX + job_id


#: A pipeline's steps: one row per job submitted with ``pipeline=``, named by its id, in
#: a partition of the pipeline's own, so a pipeline's view reads its steps, never the
#: catalogue.
PIPELINE_PREFIX = "~pipeline~"


def pipeline_partition(pipeline: str) -> str:
    return PIPELINE_PREFIX + pipeline


def shard_of(index: int) -> int:
    return (index // SHARD_BLOCK) % SHARDS


def shard_partition(job_id: str, shard: int) -> str:
    return f"{job_id}~{shard:02d}"


def control_partition(job_id: str) -> str:
    return f"{job_id}~ctl"


def park_partition(job_id: str) -> str:
    """Where a paused job's parked messages are noted (:mod:`checkpoint.parks`)."""
    return f"{job_id}~park"


def chunk_row(index: int) -> str:
    # Zero-padded so RowKey order is index order.
    return f"c{index:012d}"


def index_of_row(row_key: str) -> int:
    return int(row_key[1:])


def shards_holding(total: int | None) -> range:
    """The shards a job of ``total`` chunks writes to: all of them while its total is not
    known (planning), else those its chunk blocks fall in (one for up to SHARD_BLOCK)."""
    if total is None:
        return range(SHARDS)
    return range(min(SHARDS, -(-max(total, 0) // SHARD_BLOCK)))


def chunks_in_shard(total: int, shard: int) -> int:
    """How many of ``total`` chunks fall into ``shard``."""
    rounds, rest = divmod(total, SHARDS * SHARD_BLOCK)
    return rounds * SHARD_BLOCK + min(max(rest - shard * SHARD_BLOCK, 0), SHARD_BLOCK)


def job_queues(queue: str, count: int) -> tuple[str, ...]:
    """The queues a job of ``count`` queues uses: ``(queue,)`` for one (as before jobs
    had several), else ``queue-0`` ... ``queue-<count - 1>``."""
    if count == 1:
        return (queue,)
    return tuple(f"{queue}-{n}" for n in range(count))


def chunk_queue(queue: str, count: int, index: int) -> str:
    """The queue of chunk ``index`` of a job of ``count`` queues: blocks of
    :data:`QUEUE_BLOCK` consecutive chunks dealt round-robin."""
    return queue if count == 1 else f"{queue}-{(index // QUEUE_BLOCK) % count}"


def job_blob_prefix(job_id: str) -> str:
    """What the names of a job's blobs, and of no other job's, start with (a job id
    holds no ``/``)."""
    return f"{job_id}/"


def blob_name(job_id: str, kind: str, index: int, field: str, version: str) -> str:
    """A spilled value's blob; ``version`` keeps every write its own blob (see store)."""
    return f"{job_blob_prefix(job_id)}{kind}/{index}/{field}-{version}"
