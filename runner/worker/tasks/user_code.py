"""Calling the user's ``process`` and ``finalize`` with what they need."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkpoint import retries
from checkpoint.records import JobRecord
from checkpoint.retries import Budget
from checkpoint.store import CheckpointStore
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.summary import JobSummary, PoisonedChunk
from runner.worker.limits.unit_limits import LimitedControl
from runner.worker.tasks.control import runner_side


def run_finalize(
    store: CheckpointStore, job_class: type[ChunkedJob], job: JobRecord, control: LimitedControl
) -> None:
    """Run the job's ``finalize`` with a summary of its chunks.

    Raises BadRecord, before any user code runs, if the params or the job as stored
    cannot be read."""
    budget = control.lease_budget(retries.READ)
    params = _params(store, job, budget)
    instance = job_class()
    # Fresh: the cached record predates the total.
    job = runner_side(lambda: store.get_job(job.job_id, budget), "reading the job")
    counts = runner_side(lambda: store.counts(job.job_id, budget), "counting chunks")
    summary = JobSummary(
        job.job_id,
        job.total or 0,
        counts["done"],
        lambda: store.results(job.job_id, budget),
        control,
        lambda: _poisoned_chunks(store, job.job_id, budget),
        lambda: store.outputs(job.job_id, budget),
    )
    instance.finalize(params, summary)


def run_chunk(
    store: CheckpointStore, job_class: type[ChunkedJob], job: JobRecord, control: LimitedControl
) -> Any:
    """Run one chunk's ``process``; return its result.

    Raises BadRecord, before any user code runs, if the params, payload or state as
    stored cannot be read."""
    task = control.task
    budget = control.lease_budget(retries.READ)
    # One step for the three reads (each retried in place): fewer hops on every chunk.
    params, payload, state = runner_side(
        lambda: (
            budget.call(lambda: store.params(job)),
            # Required: a record that lost it (written over when it could not be read)
            # must not run the chunk on a payload of None.
            budget.call(
                lambda: store.value(task.properties, "payload", of=task.name, required=True)
            ),
            budget.call(lambda: store.value(task.properties, "progress", of=task.name)),
        ),
        "reading the job's params and the chunk's payload and state",
    )
    instance = job_class()
    chunk = Chunk(
        job_id=job.job_id,
        index=task.index,
        payload=payload,
        params=params,
        state=state,
        attempt=task.attempt,
        control=control,
    )
    return instance.process(chunk)


def _params(store: CheckpointStore, job: JobRecord, budget: Budget) -> Any:
    return runner_side(lambda: budget.call(lambda: store.params(job)), "reading the job's params")


def _poisoned_chunks(
    store: CheckpointStore, job_id: str, budget: Budget
) -> Iterator[PoisonedChunk]:
    for task in store.chunks(job_id, ("poisoned",), budget):
        error = task.error or {}
        yield PoisonedChunk(
            index=task.index,
            payload=store.value(task.properties, "payload", of=task.name),
            attempts=task.attempt,
            error_type=error.get("type", ""),
            error_message=error.get("message", ""),
        )
