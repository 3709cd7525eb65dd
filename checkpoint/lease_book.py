"""The lease each job type has learned, one shared row per type, kept in the record store.

Workers add what they observed (how late their renewals landed, the leases they lost)
to their type's row by compare-and-swap (:mod:`checkpoint.shared_rows`), and read back
the lease every worker gives that type's messages; an operator pins or releases a value
there (``runner lease``). What the row's properties mean, and the rule that turns them
into a lease, are the worker's (:mod:`runner.worker.leases.learned`): this module only
keeps the rows.
"""

from __future__ import annotations

import functools
from typing import TypeVar

from checkpoint import layout
from checkpoint.retries import Budget
from checkpoint.shared_rows import Change, change_row, read_row
from checkpoint.storage import ANY_ETAG, Record, RecordStore

T = TypeVar("T")


class LeaseBook:
    """The learned-lease table. Every call takes a :class:`~checkpoint.retries.Budget`."""

    def __init__(self, records: RecordStore):
        self._records = records

    def read(self, job_type: str, budget: Budget) -> Record | None:
        """``job_type``'s row, None if nothing was learned or pinned for it yet."""
        return read_row(
            self._records, layout.LEASES_TABLE, layout.LEASES_PARTITION, job_type, budget
        )

    def change(
        self, job_type: str, change: Change[T], budget: Budget, tries: dict[str, T] | None = None
    ) -> T:
        """Apply ``change`` to ``job_type``'s row (``tries``: see
        :func:`checkpoint.shared_rows.change_row`)."""
        where = (layout.LEASES_TABLE, layout.LEASES_PARTITION, job_type)
        return change_row(self._records, where, change, budget, tries)

    def scan(self, budget: Budget) -> list[Record]:
        """Every job type's row (one partition: a listing is one query)."""
        return budget.call(
            lambda: list(self._records.query(layout.LEASES_TABLE, layout.LEASES_PARTITION))
        )

    def forget(self, job_type: str, budget: Budget) -> bool:
        """Remove ``job_type``'s row: its workers start again from the lower bound. True
        if there was one."""
        found = self.read(job_type, budget) is not None
        delete = self._records.delete
        budget.call(
            functools.partial(
                delete, layout.LEASES_TABLE, layout.LEASES_PARTITION, job_type, etag=ANY_ETAG
            )
        )
        return found
