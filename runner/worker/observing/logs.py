"""Log lines of a worker: whom they are about, and the two formats they are written in.

While a task runs, its ids (job, task kind, chunk index, attempt) are in a context
variable set on its thread when it starts (:func:`task_ids`), so every line logged
meanwhile on that thread carries them: the runner's own and those of the job's code
(``logging.getLogger(__name__).info(...)`` in ``process``). The worker id is set the same
way for each thread of a worker (:func:`worker_ids`; :func:`in_context` starts a thread
with the ids of the thread starting it). A thread the job's code starts itself begins
with none.

A :class:`ContextFilter` on the handler copies the ids onto each record as it is logged
(on the thread that logs it); :class:`TextFormatter` shows them compactly in the line's
bracket, :class:`JsonFormatter` writes one JSON object per line for log collectors.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from checkpoint.clock import utc_text
from checkpoint.records import TaskKind

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

#: The logger of every line of a task's life, whichever step's module says it: log
#: filters and the chaos analysis select a task's lines by this one name.
TASK_LOGGER = "runner.worker.tasks"

#: The text format's fields; ``ids`` is ``" WORKER JOB#INDEX aATTEMPT"`` when known.
TEXT_FORMAT = "%(asctime)s %(levelname)s [%(processName)s%(ids)s] %(name)s: %(message)s"

#: The record attributes every LogRecord has: anything else was passed in ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
#: The ids the filter adds to a record, as the JSON format names them, and all it adds.
_IDS = ("worker_id", "job_id", "task", "chunk", "attempt")
_OURS = (*_IDS, "ids")


@dataclass(frozen=True)
class TaskIds:
    """Which task a thread is running."""

    job_id: str
    kind: TaskKind
    index: int
    attempt: int

    def __str__(self) -> str:
        where = f"#{self.index}" if self.kind == "chunk" else f":{self.kind}"
        return f"{self.job_id}{where} a{self.attempt}"


_WORKER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "runner_worker_id", default=None
)
_TASK: contextvars.ContextVar[TaskIds | None] = contextvars.ContextVar("runner_task", default=None)


@contextmanager
def worker_ids(worker_id: str) -> Iterator[None]:
    """Lines logged in this block (on this thread, and threads started with
    :func:`in_context`) carry ``worker_id``."""
    token = _WORKER.set(worker_id)
    try:
        yield
    finally:
        _WORKER.reset(token)


@contextmanager
def task_ids(ids: TaskIds, worker_id: str | None = None) -> Iterator[None]:
    """Lines logged in this block on this thread carry the task's ids (and
    ``worker_id``, when given)."""
    task = _TASK.set(ids)
    worker = _WORKER.set(worker_id) if worker_id is not None else None
    try:
        yield
    finally:
        if worker is not None:
            _WORKER.reset(worker)
        _TASK.reset(task)


def in_context(target: Callable[[], None]) -> Callable[[], None]:
    """``target``, to run on a new thread with the ids of the thread calling this (a
    new thread starts with none)."""
    context = contextvars.copy_context()
    return lambda: context.run(target)


def current_ids() -> dict[str, Any]:
    """The ids set on this thread now, as the JSON format names them."""
    found: dict[str, Any] = {}
    worker, task = _WORKER.get(), _TASK.get()
    if worker is not None:
        found["worker_id"] = worker
    if task is not None:
        found.update(job_id=task.job_id, task=task.kind, attempt=task.attempt)
        if task.kind == "chunk":
            found["chunk"] = task.index
    return found


class ContextFilter(logging.Filter):
    """Copies the ids of the logging thread onto each record (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = current_ids()
        for name in _IDS:
            if name in ids:
                setattr(record, name, ids[name])
            elif not hasattr(record, name):  # one passed in extra= stays
                setattr(record, name, None)
        task = _TASK.get()
        shown = [part for part in (ids.get("worker_id"), task and str(task)) if part]
        record.ids = "".join(f" {part}" for part in shown)
        return True


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT`, as in
    ``... INFO [worker-1 host:4711:9ff4 job-x#3 a1] runner.worker.tasks: ...``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "ids"):  # a handler without the filter
            ContextFilter().filter(record)
        return super().format(record)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """The record's time as every output shows one (UTC, ``Z``), not local time."""
        return utc_text(datetime.fromtimestamp(record.created, UTC))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``,
    ``message``, ``process`` (pid), ``process_name``, ``thread``, then the ids set
    (``worker_id``, ``job_id``, ``task``, ``chunk``, ``attempt``), what was passed in
    ``extra=``, and ``exception`` / ``stack`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "ids"):
            ContextFilter().filter(record)
        entry: dict[str, Any] = {
            "time": utc_text(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "process_name": record.processName,
            "thread": record.threadName,
        }
        entry.update(
            (name, getattr(record, name))
            for name in _IDS
            if getattr(record, name, None) is not None
        )
        entry.update(
            (name, value)
            for name, value in vars(record).items()
            if name not in _STANDARD and name not in _OURS and name not in entry
        )
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def handler(log_format: LogFormat) -> logging.Handler:
    """A stderr handler writing ``log_format`` lines, with the ids filter."""
    made = logging.StreamHandler()
    made.addFilter(ContextFilter())
    made.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    return made
