"""Jobs the end-to-end tests run in real ``runner start`` worker processes.

Every job writes what it does to an append-only *event log* (``<dir>/events.jsonl``, one
JSON line per event with the worker's pid and the wall-clock time) and its output to an
idempotent *sink* (``<dir>/sink/<item>``, one file per item, rewritten whole): the sink
says whether every item landed exactly once, the log says how often each was written.

Params (all jobs): ``dir`` for the log and the sink, ``chunks`` and ``items`` (per
chunk), ``item_seconds`` (time one item takes). Queue names carry ``$E2E_QUEUE_TAG`` so
tests sharing one Azurite never share a queue; the test process computes the same names
with :func:`queue_for`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from jobs import Backoff, Chunk, ChunkedJob, JobSummary

TAG_ENV = "E2E_QUEUE_TAG"
EVENTS_FILE = "events.jsonl"
SINK_DIR = "sink"
#: A chunk of :class:`Flaky` fails while this file is missing from ``dir``.
FIXED_FLAG = "fixed"
SUMMARY_FILE = "summary.json"


def queue_for(name: str, tag: str | None = None) -> str:
    """``e2e-<tag>-<name>``: the queue of a test job, unique per test on a shared account."""
    tag = tag if tag is not None else os.environ.get(TAG_ENV, "local")
    return f"e2e-{tag}-{name}"


def record(params: dict[str, Any], event: str, **fields: Any) -> None:
    """Append one event to the log. One ``write`` on an O_APPEND file per line, so lines
    from several processes never interleave."""
    line = json.dumps({"event": event, "pid": os.getpid(), "at": time.time(), **fields})
    path = Path(params["dir"]) / EVENTS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def put_item(params: dict[str, Any], item: int) -> None:
    """Write one item to the sink; a redone item replaces its own file with equal content."""
    sink = Path(params["dir"]) / SINK_DIR
    sink.mkdir(exist_ok=True)
    scratch = sink / f".{item:06d}.{os.getpid()}"
    scratch.write_text(str(item))
    os.replace(scratch, sink / f"{item:06d}")


def write_atomically(path: Path, text: str) -> None:
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(text)
    os.replace(scratch, path)


class Items(ChunkedJob):
    """Chunks of numbered items, each written to the sink; resumes from the next item."""

    queue = queue_for("items")
    lease_seconds = 2
    checkpoint_interval_seconds = 1.0
    max_attempts = 5

    def split(self, params: dict[str, Any]) -> Any:
        record(params, "split")
        size = params["items"]
        for number in range(params["chunks"]):
            yield {"first": number * size, "last": (number + 1) * size}

    def process(self, chunk: Chunk) -> Any:
        params = chunk.params
        item = chunk.state if chunk.state is not None else chunk.payload["first"]
        record(params, "start", chunk=chunk.index, attempt=chunk.attempt, state=chunk.state)
        try:
            while item < chunk.payload["last"]:
                self.work(chunk, item)
                record(params, "item", chunk=chunk.index, item=item)
                put_item(params, item)
                item += 1
                chunk.checkpoint(item, progress=self.said(chunk, item))
        except BaseException as error:
            record(params, "exit", chunk=chunk.index, error=type(error).__name__)
            raise
        record(params, "end", chunk=chunk.index)
        return {"pid": os.getpid(), "items": chunk.payload["last"] - chunk.payload["first"]}

    def work(self, chunk: Chunk, item: int) -> None:
        time.sleep(chunk.params.get("item_seconds", 0.0))
        gate = chunk.params.get("gate")
        if gate and item == chunk.payload["last"] - 1:
            # The last item waits for the test (however slow the machine) to create the
            # gate file, checkpointing so that a pause or cancel still reaches the chunk.
            while not os.path.exists(gate):
                chunk.checkpoint(item)
                time.sleep(0.1)

    def said(self, chunk: Chunk, item: int) -> tuple[int, int] | None:
        """How far the chunk got, if its params ask it to say (``say_progress``)."""
        if not chunk.params.get("say_progress"):
            return None
        first, last = chunk.payload["first"], chunk.payload["last"]
        return item - first, last - first

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        record(params, "finalize_start", total=summary.total, done=summary.done)
        try:
            time.sleep(params.get("finalize_seconds", 0.0))
            items = sum(result["items"] for _, result in summary.results())
        except BaseException as error:
            record(params, "finalize_exit", error=type(error).__name__)
            raise
        body = json.dumps({"job_id": summary.job_id, "chunks": summary.total, "items": items})
        write_atomically(Path(params["dir"]) / SUMMARY_FILE, body)
        record(params, "finalize_end")


class Paused(Items):
    """:class:`Items` on a queue of its own, checkpointing often (the pause test)."""

    queue = queue_for("paused")
    checkpoint_interval_seconds = 0.5


class Finalized(Items):
    """:class:`Items` whose finalize takes ``finalize_seconds`` (longer than its lease)."""

    queue = queue_for("finalized")


class Delayed(Items):
    """:class:`Items` for the ``--delay`` and ``--job-id`` tests."""

    queue = queue_for("delayed")


class Submitted(Items):
    """:class:`Items` taking submissions from other programs on ``<queue>-intake``."""

    queue = queue_for("submitted")
    intake = True


class Graceful(Items):
    """A long lease and a long checkpoint interval: a prompt resume after SIGTERM can
    only come from the released message, and an exact one only from the flush."""

    queue = queue_for("graceful")
    lease_seconds = 60
    checkpoint_interval_seconds = 30.0


class Stubborn(Items):
    """Never reaches a checkpoint: sleeps ``seconds`` without calling it."""

    queue = queue_for("stubborn")
    lease_seconds = 60

    def process(self, chunk: Chunk) -> Any:
        record(chunk.params, "start", chunk=chunk.index, attempt=chunk.attempt, state=None)
        time.sleep(chunk.params["seconds"])
        record(chunk.params, "end", chunk=chunk.index)
        return {"pid": os.getpid(), "items": 0}


class Busy(Items):
    """One CPU-bound chunk of ``seconds`` of pure Python, far longer than its lease."""

    queue = queue_for("busy")
    checkpoint_interval_seconds = 0.5

    def split(self, params: dict[str, Any]) -> Any:
        record(params, "split")
        yield {"seconds": params["seconds"]}

    def process(self, chunk: Chunk) -> Any:
        params = chunk.params
        record(params, "start", chunk=chunk.index, attempt=chunk.attempt, state=chunk.state)
        spent = chunk.state or 0.0
        began = time.monotonic() - spent
        while spent < chunk.payload["seconds"]:
            total = 0
            for number in range(20_000):  # pure Python: holds the GIL between switches
                total += number * number
            spent = time.monotonic() - began
            chunk.checkpoint(spent)
        record(params, "end", chunk=chunk.index)
        return {"pid": os.getpid(), "items": 0}


class Flaky(Items):
    """Chunk ``fail_chunk`` raises until the ``fixed`` flag file exists in ``dir``."""

    queue = queue_for("flaky")
    max_attempts = 3
    backoff = Backoff(first_seconds=0.5, max_seconds=1.0)

    def process(self, chunk: Chunk) -> Any:
        params = chunk.params
        fixed = (Path(params["dir"]) / FIXED_FLAG).exists()
        if chunk.index == params["fail_chunk"] and not fixed:
            record(params, "fail", chunk=chunk.index, attempt=chunk.attempt)
            raise RuntimeError(f"chunk {chunk.index} always fails (attempt {chunk.attempt})")
        return super().process(chunk)


#: Markup in :class:`Marked`'s error: run as a script, it would retitle the page.
MARKUP = "<script>document.title='owned'</script>"


class Marked(Flaky):
    """:class:`Flaky` whose failing chunk's error holds markup: a dashboard must show it
    as text (the browser test checks the script in it never runs)."""

    queue = queue_for("marked")
    checkpoint_interval_seconds = 0.5

    def process(self, chunk: Chunk) -> Any:
        params = chunk.params
        if chunk.index == params["fail_chunk"]:
            record(params, "fail", chunk=chunk.index, attempt=chunk.attempt)
            raise RuntimeError(f"{MARKUP} chunk {chunk.index} fails (attempt {chunk.attempt})")
        return Items.process(self, chunk)


class Limited(Items):
    """:class:`Items` at most two chunks at once over every worker process."""

    queue = queue_for("limited")
    max_running = 2
