"""The lease keeper's thread pool: daemon threads, reused, bounded, shut down at once."""

from __future__ import annotations

import threading

import pytest

from runner.worker.leases.pool import DaemonPool


def test_runs_calls_on_at_most_its_size_of_daemon_threads_reusing_idle_ones():
    pool = DaemonPool(2, "test-pool")
    go_on = threading.Event()
    names: list[str] = []

    def call(number: int) -> int:
        names.append(threading.current_thread().name)
        assert go_on.wait(10)
        return number * 10

    # Three calls while the first two wait: the third queues for a thread
    futures = [pool.submit(lambda n=n: call(n)) for n in range(3)]
    go_on.set()

    assert [future.result(10) for future in futures] == [0, 10, 20]
    assert set(names) <= {"test-pool-1", "test-pool-2"}
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("test-pool-"))
    # A call made once a thread is idle again reuses it: no third thread
    assert pool.submit(lambda: 7).result(10) == 7
    assert len([t for t in threading.enumerate() if t.name == "test-pool-3"]) == 0
    pool.shutdown()


def test_a_call_that_raises_hands_its_error_to_its_future():
    pool = DaemonPool(1, "raising-pool")

    def broken() -> None:
        raise ValueError("broken call")

    with pytest.raises(ValueError, match="broken call"):
        pool.submit(broken).result(10)
    pool.shutdown()


def test_shutdown_cancels_what_has_not_started_and_refuses_more():
    pool = DaemonPool(1, "closing-pool")
    started, go_on = threading.Event(), threading.Event()

    def running() -> str:
        started.set()
        assert go_on.wait(10)
        return "finished"

    first = pool.submit(running)
    assert started.wait(10)
    waiting = pool.submit(lambda: "never")

    pool.shutdown()
    pool.shutdown()  # idempotent
    go_on.set()

    # The call under way ends as it would; the one waiting never runs
    assert first.result(10) == "finished"
    assert waiting.cancelled()
    with pytest.raises(RuntimeError, match="closing-pool pool is shut down"):
        pool.submit(lambda: "late")
