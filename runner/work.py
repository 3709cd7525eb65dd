"""Calling the user's ``process`` and ``finalize`` with what they need."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkpoint.records import JobRecord
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.summary import JobSummary
from runner.control import TaskControl

if TYPE_CHECKING:
    from runner.tasks import Context


def run_user_code(
    worker: Context, job_class: type[ChunkedJob], job: JobRecord, control: TaskControl
) -> Any:
    """Run one chunk's ``process`` or the job's ``finalize``; return its outcome.

    Raises BadRecord, before any user code runs, if the params, payload or state as
    stored cannot be read."""
    store, task = worker.store, control.task
    params = store.params(job)
    instance = job_class()
    if task.kind == "final":
        job = store.get_job(job.job_id)  # fresh: the cached record predates the total
        counts = store.counts(job.job_id)
        summary = JobSummary(
            job.job_id, job.total or 0, counts["done"], lambda: store.results(job.job_id)
        )
        instance.finalize(params, summary)
        return None
    chunk = Chunk(
        job_id=job.job_id,
        index=task.index,
        payload=store.value(task.properties, "payload", of=task.name),
        params=params,
        state=store.value(task.properties, "progress", of=task.name),
        attempt=task.attempt,
        control=control,
    )
    return instance.process(chunk)
