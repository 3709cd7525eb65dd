"""runner/worker/signal_safe.py: a signal handler's work runs off the interrupted thread,
so a handler landing while that thread holds an Event's lock cannot deadlock on it."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from checkpoint.backends import open_storage
from checkpoint.store import CheckpointStore
from runner.cli import watch
from runner.worker.signal_safe import off_signal


def test_the_action_runs_at_once_on_another_thread():
    ran_on: list[threading.Thread] = []
    done = threading.Event()

    def action() -> None:
        ran_on.append(threading.current_thread())
        done.set()

    off_signal(action, "test-signal")

    assert done.wait(5)
    assert ran_on[0] is not threading.current_thread() and ran_on[0].name == "test-signal"


def test_a_handler_landing_while_this_thread_holds_the_events_lock_returns():
    # Given this thread inside Event.wait's locked moment (holding the event's lock)
    event = threading.Event()
    lock = event._cond  # type: ignore[attr-defined]  # noqa: SLF001 - the lock Event.set takes
    lock.acquire()
    try:
        # When the handler's work is handed off (event.set here would wait forever)
        off_signal(event.set)
        assert not event.is_set()
    finally:
        lock.release()
    # Then it is done as soon as the lock is free
    assert event.wait(5)


def test_watch_ends_on_sigint_through_a_handler_that_hands_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    handed: list[str] = []

    def recording(action: object, name: str = "") -> None:
        handed.append(name)
        off_signal(action, name)  # type: ignore[arg-type]

    monkeypatch.setattr(watch, "off_signal", recording)
    storage = open_storage(str(tmp_path / "store"))
    try:
        store = CheckpointStore(storage)
        store.ensure()
        timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        watch.watch_status(store, None, 0.2)  # returns once the SIGINT is handled
        timer.join()
    finally:
        storage.close()
    assert handed == ["watch-stop"]
