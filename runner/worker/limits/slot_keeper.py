"""One thread per worker renewing the running slots it keeps
(:mod:`runner.worker.limits.admission`).

A slot is kept in the store with an expiry of one lease, so a worker that dies frees
its slots within a lease. This thread renews them every third of the shortest lease of
the job types served: one write per limit name per interval, whatever the number of
chunks, kept off the lease keeper (which renews messages, not slots).
"""

from __future__ import annotations

import logging
import threading

from runner.worker.leases.lease import KEEPER_STOP_SECONDS
from runner.worker.limits.admission import Admission
from runner.worker.observing.logs import in_context

log = logging.getLogger(__name__)

#: Renewals per lease: a slot survives two failed renewals in a row.
RENEWALS_PER_LEASE = 3


class SlotKeeper:
    """Renews a worker's slots every ``lease_seconds / 3`` until stopped."""

    def __init__(self, admission: Admission, lease_seconds: float):
        self._admission = admission
        self.interval_seconds = lease_seconds / RENEWALS_PER_LEASE
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=in_context(self._run), name="slot-keeper", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, waiting for it up to :data:`KEEPER_STOP_SECONDS` as for the
        other keepers; a renewal stuck past that is left behind (the slots lapse)."""
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join(KEEPER_STOP_SECONDS)
        if self._thread.is_alive():
            log.warning(
                "the slot keeper did not stop within %g s (a renewal of the running slots "
                "is stuck); leaving it, its slots lapse within a lease",
                KEEPER_STOP_SECONDS,
            )

    def _run(self) -> None:
        # Real waits, as the lease keeper's: a FakeClock would spin through renewals.
        while not self._stop.wait(self.interval_seconds):
            self._admission.renew()
