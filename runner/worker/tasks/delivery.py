"""What the steps of a message's life take: the worker's shared parts (:class:`Context`)
and the message in hand (:class:`Delivery`), built once when it is decoded.

A step is given the delivery, plus the claimed task's
:class:`~runner.worker.tasks.control.TaskControl` once it runs, instead of the worker, lease,
message, job class, job and task message one by one.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from checkpoint import layout, retries
from checkpoint.clock import Clock, SystemClock
from checkpoint.messages import TaskMessage
from checkpoint.records import JobRecord, TaskKind
from checkpoint.retries import Budget
from checkpoint.storage import QueueMessage, QueueStore
from checkpoint.store import CheckpointStore
from checkpoint.workers import WorkerBook
from jobs.job import ChunkedJob
from runner.worker.hooks import Hooks
from runner.worker.job_cache import JobCache
from runner.worker.leases.lease import Lease, LeaseKeeper
from runner.worker.leases.sizes import LeaseSizes
from runner.worker.limits.admission import Admission
from runner.worker.observing.heartbeat import RunningTasks
from runner.worker.poison import PoisonRouter
from runner.worker.receiving.prefetch import ChunkTimes
from runner.worker.stop_orders import StopOrderWatcher
from runner.worker.tasks.chunk_finisher import Finisher
from runner.worker.tasks.job_completion import Completion


@dataclass
class Context:
    """What every task of one worker process shares; assembled by the worker loop
    (:func:`runner.worker.loop.assemble`), each part given only what it uses."""

    store: CheckpointStore
    queues: QueueStore
    keeper: LeaseKeeper
    clock: Clock
    worker_id: str
    job_classes: dict[str, type[ChunkedJob]]
    #: Every queue served, with the job class whose messages it carries
    #: (:func:`runner.worker.receiving.polling.served_queues`).
    by_queue: dict[str, type[ChunkedJob]]
    poison: PoisonRouter
    completion: Completion
    finisher: Finisher
    job_cache: JobCache
    #: Tells running tasks of a cancelled or paused job to stop (its own thread).
    stop_orders: StopOrderWatcher
    #: Takes and gives back the shared rate and running limits of the job types served.
    admission: Admission
    #: The lease of each adaptive job type, learned with every worker (its own thread).
    lease_sizes: LeaseSizes = field(default_factory=lambda: LeaseSizes(None, (), SystemClock()))
    #: Heartbeats, read when a claim takes over a chunk whose attempt ran Spark work.
    workers: WorkerBook | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    rng: random.Random = field(default_factory=random.Random)
    running: RunningTasks = field(default_factory=RunningTasks)
    #: The concerns hooked on the points of a message's life (:mod:`runner.worker.hooks`).
    hooks: Hooks = field(default_factory=Hooks)
    #: How long each job type's chunks take here (whether their messages move).
    chunk_times: ChunkTimes = field(default_factory=ChunkTimes)


@dataclass(frozen=True)
class Delivery:
    """One received message, leased (``lease``), decoded to ``task_message``, of an
    existing ``job`` whose ``job_class`` this worker runs on the message's queue."""

    worker: Context
    lease: Lease
    message: QueueMessage
    task_message: TaskMessage
    job_class: type[ChunkedJob]
    job: JobRecord
    #: The task message's kind and index (the path reads them at most steps).
    kind: TaskKind
    index: int
    #: Retries of a policy for as long as the message's lease lasts (a partial of
    #: :class:`~checkpoint.retries.Budget`, made once as the message is decoded).
    budget: Callable[[retries.RetryPolicy], Budget]

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def home_queue(self) -> str:
        """The queue its message belongs to: the one it came from, or for a chunk's
        message moved to its type's resume queue, the chunk's queue in its job (planning
        and finalize, index 0, never move: theirs is the job's first queue)."""
        if not layout.is_resume_queue(self.lease.queue):
            return self.lease.queue
        return self.job.chunk_queue(self.index)
