"""``chunk.limit(name)`` on a worker: units of a named resource taken from its shared
bucket, waiting for them while the chunk may go on.

The control of a running chunk (:class:`~runner.worker.tasks.control.TaskControl`) with one
more call: each try takes what the bucket holds (a compare-and-swap in the store, as a
receive's tokens) and, short of ``units``, waits until the next token is due, at most
:data:`STOP_CHECK_SECONDS` at a time, checking the chunk's stop signal before each try,
so a chunk waiting for a token never outlives its lease and a cancel, a pause or a
stopping worker reaches it as at a checkpoint. Storage trouble is the runner's
(StorageTrouble: the chunk is handed back, no attempt spent).
"""

from __future__ import annotations

import functools

from checkpoint import retries
from checkpoint.errors import BadRecord, StorageTrouble
from checkpoint.limits.book import Taken
from checkpoint.limits.rates import Rate, parse_rate
from jobs.job import ChunkedJob, resource_rate
from runner.worker.limits.admission import Admission
from runner.worker.tasks.control import TaskControl, runner_side

#: Longest wait for a token between two looks at the stop signal.
STOP_CHECK_SECONDS = 0.25


class LimitedControl(TaskControl):
    """A task's control that also takes units of its class's named resources: built as
    a :class:`TaskControl`, then given the worker's :attr:`admission` and the task's
    :attr:`job_class` (no constructor of its own: one hop less on every task's path)."""

    admission: Admission
    job_class: type[ChunkedJob]

    def limit(self, name: str, units: int) -> None:
        rate = parse_rate(resource_rate(self.job_class, name))
        left = units
        while True:
            self.raise_if_stopped()
            taken = runner_side(functools.partial(self._take, name, left, rate), f"limit {name}")
            left -= taken.count
            if left <= 0:
                return
            if taken.wait_seconds > 0:  # 0: the bucket was just made again; try it
                wait = min(taken.wait_seconds, STOP_CHECK_SECONDS)
                self._clock.wait(self._worker_stopping, wait)

    def _take(self, name: str, wanted: int, rate: Rate) -> Taken:
        book, budget = self.admission.book, self.lease_budget(retries.READ)
        try:
            taken = book.take_tokens(name, wanted, budget)
        except BadRecord as bad:
            # Not the chunk's fault, so neither a failure nor poison: handed back, no
            # attempt spent, until someone mends the record.
            raise StorageTrouble(f"{bad} (`runner limit {name} --clear` resets it)") from bad
        if taken is None:
            # Cleared by hand while we run: the class value applies again, from the
            # next try on.
            book.define_rate(name, rate, self.job_class.job_type(), budget)
            return Taken(0)
        return taken
