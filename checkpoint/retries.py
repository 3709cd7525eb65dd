"""Retrying transient storage trouble in place, with tenacity: one policy per kind of call.

A busy service (503, 500), a timeout or a lost connection is *transient*: the same call
made again a little later usually works. Such trouble is retried where it happens, with
capped exponential backoff and jitter, for as long as the caller can afford: a write
under a lease until that lease's local deadline, a worker's start-up until it is stopped.
Nothing here decides whether a failed *write* was applied: the caller settles that by
reading (see :mod:`checkpoint.store`) before it tries again.

The budgets are data (:class:`RetryPolicy`), one module constant per kind of call, and
docs/semantics.md §15 tabulates them; the SDK's own retries
(``checkpoint/backends/azure/retry.py``) sit below these and cost a few seconds per call.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity
from tenacity import RetryCallState, retry_if_exception_type, wait_exponential_jitter

from checkpoint import metering
from checkpoint.clock import Clock
from checkpoint.errors import StorageError, Throttled, Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors worth the same call again: the service was busy, or could not be reached.
TRANSIENT: tuple[type[StorageError], ...] = (Throttled, Unavailable)


@dataclass(frozen=True)
class RetryPolicy:
    """How one kind of call waits between tries of transient trouble.

    Attributes:
        name: what the call is, for log lines ("claim", "checkpoint", ...).
        first_wait_seconds: the wait before the second try; each later wait doubles,
            up to ``max_wait_seconds``, plus up to ``first_wait_seconds`` of jitter.
        give_up_after_seconds: stop trying this long after the first try; None: only
            the caller's deadline or stop signal ends the retries.
    """

    name: str
    first_wait_seconds: float = 0.2
    max_wait_seconds: float = 2.0
    give_up_after_seconds: float | None = None


#: Every kind of call that retries, and its budget (docs/semantics.md §15 lists them).
#: Calls under a lease are bounded by the lease's local deadline as well.
CLAIM = RetryPolicy("claim")
TASK_WRITE = RetryPolicy("task write")
DONE_MARK = RetryPolicy("done mark")
PLANNING = RetryPolicy("planning page", max_wait_seconds=4.0)
BOOKKEEPING = RetryPolicy("job bookkeeping", max_wait_seconds=4.0)
MESSAGE = RetryPolicy("queue message")
READ = RetryPolicy("read")
#: A call of no lease and no worker (``runner submit``, ``status``, ``poison``, tests).
STANDALONE = RetryPolicy("storage call", max_wait_seconds=4.0, give_up_after_seconds=30.0)
#: A worker's report of what its leases saw (runner.worker.leases.sizes): given up
#: soon, and made again with the same tokens at the next pass.
SHARING = RetryPolicy("lease sharing", max_wait_seconds=4.0, give_up_after_seconds=15.0)
START_UP = RetryPolicy("start-up", first_wait_seconds=0.5, max_wait_seconds=30.0)
#: A checkpoint during ``process`` is not retried in place: the user's thread goes on and
#: the newest state is written at the next due checkpoint instead.
CHECKPOINT = RetryPolicy("checkpoint", give_up_after_seconds=0.0)


@dataclass(frozen=True)
class Budget:
    """How long one caller can afford to retry: a policy, a deadline, a stop signal.

    Args:
        policy: waits and overall limit.
        clock: whose ``monotonic`` the deadline is on, and whose ``wait`` sleeps (a
            :class:`~checkpoint.clock.FakeClock` in tests: nothing really sleeps).
        deadline: monotonic time after which no try starts (a lease's local deadline),
            read afresh at each try because renewals move it; None: no deadline.
        stopping: set when the worker stops; a wait ends early and no try follows.
    """

    policy: RetryPolicy
    clock: Clock
    deadline: Callable[[], float] | None = None
    stopping: threading.Event | None = None

    def call(self, action: Callable[[], T], what: str = "") -> T:
        """``action()``, tried again after transient trouble while the budget allows.

        Raises the last error once the budget is spent (or at once if not transient).
        The first try is made directly: tenacity is entered only after a transient
        failure, so a call that succeeds costs nothing more than the call.
        """
        # When the first try started matters only to a policy that gives up after a
        # while; a deadline and the stop signal are read once a try has failed. So a
        # call under a lease that succeeds at once reads no clock.
        limit = self.policy.give_up_after_seconds
        started = self.clock.monotonic() if limit is not None else 0.0
        try:
            return action()
        except TRANSIENT as error:
            first_wait = self.policy.first_wait_seconds * (1 + random.random())
            if self._spent_at(started, first_wait):
                raise
            metering.report(error, "retried")
            log.warning(
                "%s: %s; try 1 failed, next in %.1f s", what or self.policy.name, error, first_wait
            )
            self._sleep(first_wait)
        # Tries 2, 3, ... wait twice the first wait, then doubling, capped, with jitter.
        retrying = tenacity.Retrying(
            retry=retry_if_exception_type(TRANSIENT),
            wait=wait_exponential_jitter(
                multiplier=2 * self.policy.first_wait_seconds,
                max=self.policy.max_wait_seconds,
                jitter=self.policy.first_wait_seconds,
            ),
            stop=lambda state: self._spent_at(started, state.upcoming_sleep or 0.0),
            sleep=self._sleep,
            before_sleep=lambda state: _log_retry(state, what or self.policy.name),
            reraise=True,
        )
        return retrying(action)

    def _spent_at(self, started: float, upcoming_sleep: float) -> bool:
        """Whether no try may follow a wait of ``upcoming_sleep`` from now."""
        resume_at = self.clock.monotonic() + upcoming_sleep
        if self.stopping is not None and self.stopping.is_set():
            return True
        limit = self.policy.give_up_after_seconds
        if limit is not None and resume_at > started + limit:
            return True
        return self.deadline is not None and resume_at >= self.deadline()

    def _sleep(self, seconds: float) -> None:
        if self.stopping is not None:
            self.clock.wait(self.stopping, seconds)
        else:
            self.clock.sleep(seconds)


def _log_retry(state: RetryCallState, what: str) -> None:
    error = state.outcome.exception() if state.outcome else None
    if error is not None:
        metering.report(error, "retried")
    log.warning(
        "%s: %s; try %d failed, next in %.1f s",
        what,
        error,
        state.attempt_number + 1,  # the first try was made before tenacity
        state.upcoming_sleep or 0.0,
    )


def once(clock: Clock) -> Budget:
    """A budget of exactly one try (the caller has a retry of its own, or none is due)."""
    return Budget(CHECKPOINT, clock)


def given(budget: Budget | None, clock: Clock) -> Budget:
    """The caller's budget, or :data:`STANDALONE`'s on ``clock`` if it gave none."""
    return budget if budget is not None else Budget(STANDALONE, clock)
