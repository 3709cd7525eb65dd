"""A small pool of daemon threads: where the lease keeper renews and refreshes.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits,
so a renewal hanging on a store that does not answer would hold up a worker's exit for
as long as the call hangs. These threads are daemons, as the keeper's own thread is: a
call still under way when the process ends is dropped, and its lease left to lapse.
Threads start as work arrives (an idle one is reused first), up to the pool's size.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class DaemonPool:
    """Runs calls on at most ``threads`` daemon threads named ``name-N``."""

    def __init__(self, threads: int, name: str):
        self._size = threads
        self._name = name
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        # Released by each thread that waits for work, taken by a submit that it serves
        # (how concurrent.futures reuses idle threads before starting new ones).
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, call: Callable[[], T]) -> Future[T]:
        """Run ``call`` on a thread of the pool; its future holds what it returns or
        raises. Raises RuntimeError once the pool is shut down."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self._name} pool is shut down")
            self._work.put((call, future))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}-{len(self._threads) + 1}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def shutdown(self) -> None:
        """Take no more work, cancel what has not started, let the threads end once
        their calls do (idempotent; never waits)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[1].cancel()
            for _ in self._threads:
                self._work.put(None)

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            call, future = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as error:  # noqa: BLE001 - handed to whoever waits
                    future.set_exception(error)
            self._idle.release()
