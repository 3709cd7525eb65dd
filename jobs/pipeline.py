"""``jobs.Pipeline``: a migration's steps declared in code and submitted as one run.

```python
run = Pipeline("orders-2026-11")
stage = run.step("stage", StageOrders, {"day": "2026-11-01"})
transform = run.step("transform", TransformOrders, {...}, after=[stage])
verify = run.step("verify", VerifyOrders, {...}, after=[transform])
run.step("publish", PublishOrders, {...}, after=[verify])
run.submit(storage=...)
```

Each step is a job with the id ``<pipeline>-<step>``, submitted with ``pipeline=`` and
``after=`` the steps it names (:mod:`jobs.dependencies` starts it when they are done).
The ids are derived, so running the same script again submits nothing new: a step that
exists is the same job (a submit under an existing id is a no-op when it asks for the
same job, and refused when it does not, so a changed step is said, never dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint import layout
from checkpoint.errors import ConfigurationError
from checkpoint.storage import Storage
from jobs.job import ChunkedJob
from jobs.submit import record_submission


@dataclass(frozen=True)
class Step:
    """One step: its name, job (class or ``module:Class``), params and what it runs after
    (job ids)."""

    name: str
    job: type[ChunkedJob] | str
    params: Any
    after: tuple[str, ...]
    priority: int = 0
    delay_seconds: int = 0


class Pipeline:
    """The steps of one pipeline run (``pipeline_id``), in the order declared."""

    def __init__(self, pipeline_id: str):
        layout.check_job_id(pipeline_id)
        self.pipeline_id = pipeline_id
        self.steps: list[Step] = []

    def job_id(self, step: str) -> str:
        """The job id of step ``step``: ``<pipeline>-<step>``."""
        return f"{self.pipeline_id}-{step}"

    def step(
        self,
        name: str,
        job: type[ChunkedJob] | str,
        params: Any = None,
        *,
        after: Sequence[str] = (),
        priority: int = 0,
        delay_seconds: int = 0,
    ) -> str:
        """Declare a step; returns its job id, to name in a later step's ``after``.

        ``after`` holds job ids: those this method returned (a step declared earlier),
        or of jobs outside the pipeline that exist when it is submitted."""
        job_id = self.job_id(name)
        try:
            layout.check_job_id(job_id)
        except ConfigurationError:
            raise ConfigurationError(
                f"step {name!r} of pipeline {self.pipeline_id!r} makes the job id "
                f"{job_id!r}: use letters, digits, '.', '_' and '-' (100 in all)"
            ) from None
        if any(step.name == name for step in self.steps):
            raise ConfigurationError(f"pipeline {self.pipeline_id!r} has a step {name!r} already")
        if isinstance(after, str):
            after = [after]
        self.steps.append(Step(name, job, params, tuple(after), priority, delay_seconds))
        return job_id

    def submit(self, storage: Storage | str | None = None) -> list[str]:
        """Submit every step in the order declared; returns their job ids. Steps that
        exist already are left as they are (a re-run of the script is a no-op for them).

        Raises what :func:`jobs.submit` raises, for the first step it refuses; the steps
        before it are submitted."""
        submitted = []
        for step in self.steps:
            done = record_submission(
                step.job,
                step.params,
                job_id=self.job_id(step.name),
                delay_seconds=step.delay_seconds,
                priority=step.priority,
                after=step.after,
                pipeline=self.pipeline_id,
                storage=storage,
            )
            submitted.append(done.job_id)
        return submitted
