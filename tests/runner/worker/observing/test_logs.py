"""The log formats and the ids a line carries (runner/worker/observing/logs.py), without a
worker."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import threading
from collections.abc import Iterator

import pytest

from jobs.submit import submit
from runner.worker.observing.logs import (
    ContextFilter,
    JsonFormatter,
    TaskIds,
    TextFormatter,
    current_ids,
    handler,
    in_context,
    task_ids,
    worker_ids,
)
from tests.e2e.processes import ROOT, runner_command

CHUNK = TaskIds("job-x", "chunk", 3, 2)


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    """A logger writing through the JSON handler the worker uses, into a string."""
    stream = io.StringIO()
    made = handler("json")
    assert isinstance(made, logging.StreamHandler)
    made.setStream(stream)
    logger = logging.getLogger(f"tests.logs.{id(stream)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(made)
    yield logger, stream, made
    logger.removeHandler(made)


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_is_one_object_with_the_ids_set_when_it_was_logged(captured):
    logger, stream, _ = captured
    with worker_ids("vm:42:ab12"):
        logger.info("before the task")
        with task_ids(CHUNK):
            logger.warning("row %d has no customer", 17)
    logger.info("outside")

    before, during, outside = _lines(stream)
    assert during["message"] == "row 17 has no customer"
    assert during["level"] == "WARNING" and during["logger"] == logger.name
    assert (during["job_id"], during["task"], during["chunk"], during["attempt"]) == (
        "job-x",
        "chunk",
        3,
        2,
    )
    assert during["worker_id"] == "vm:42:ab12"
    assert during["process"] > 0 and during["thread"] == threading.current_thread().name
    assert during["time"].endswith("Z") and "T" in during["time"]
    assert before["worker_id"] == "vm:42:ab12" and "job_id" not in before
    assert not {"worker_id", "job_id", "chunk", "attempt", "task"} & set(outside)


def test_planning_and_finalize_lines_name_the_task_not_a_chunk(captured):
    logger, stream, _ = captured
    with task_ids(TaskIds("job-x", "final", 0, 1), "vm:1:0000"):
        logger.info("finalizing")
    (line,) = _lines(stream)
    assert line["task"] == "final" and "chunk" not in line and line["worker_id"] == "vm:1:0000"


def test_a_json_line_carries_the_exception_and_what_was_passed_in_extra(captured):
    logger, stream, _ = captured
    try:
        raise ValueError("bad row 17")
    except ValueError:
        logger.exception("chunk failed", extra={"rows": 17, "table": "orders"})
    (line,) = _lines(stream)
    assert line["exception"].startswith("Traceback")
    assert "ValueError: bad row 17" in line["exception"]
    assert line["rows"] == 17 and line["table"] == "orders"
    assert "\n" not in stream.getvalue().rstrip("\n")  # one line, traceback inside it


def test_an_id_passed_in_extra_outside_a_task_is_kept(captured):
    logger, stream, _ = captured
    logger.info("submitted", extra={"job_id": "job-y"})
    with task_ids(CHUNK):
        logger.info("inside", extra={"table": "t"})
    outside, inside = _lines(stream)
    assert outside["job_id"] == "job-y" and "chunk" not in outside
    assert inside["job_id"] == "job-x" and inside["table"] == "t"


def test_the_text_format_shows_the_ids_compactly_in_its_bracket():
    record = logging.LogRecord("jobs.mine", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    record.processName = "worker-1"
    formatter = TextFormatter()
    with task_ids(CHUNK, "vm:42:ab12"):
        ContextFilter().filter(record)
    line = formatter.format(record)
    assert line.endswith("INFO [worker-1 vm:42:ab12 job-x#3 a2] jobs.mine: hello x")

    bare = logging.LogRecord("runner.worker.loop", logging.INFO, __file__, 1, "idle", (), None)
    bare.processName = "MainProcess"
    assert formatter.format(bare).endswith("INFO [MainProcess] runner.worker.loop: idle")
    planning = TaskIds("job-x", "plan", 0, 1)
    assert str(planning) == "job-x:plan a1"


def test_a_formatter_without_the_filter_reads_the_ids_itself():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    with task_ids(CHUNK, "vm:42:ab12"):
        entry = json.loads(JsonFormatter().format(record))
    assert entry["job_id"] == "job-x" and entry["worker_id"] == "vm:42:ab12"


def test_threads_started_in_context_carry_the_ids_and_others_start_with_none():
    seen: dict[str, dict] = {}

    def note(name: str) -> None:
        seen[name] = current_ids()

    with worker_ids("vm:42:ab12"), task_ids(CHUNK):
        inherited = threading.Thread(target=in_context(lambda: note("inherited")))
        plain = threading.Thread(target=lambda: note("plain"))
        for thread in (inherited, plain):
            thread.start()
            thread.join()
    assert seen["inherited"]["worker_id"] == "vm:42:ab12"
    assert seen["inherited"]["chunk"] == 3
    assert seen["plain"] == {}
    assert current_ids() == {}  # reset on leaving


# --------------------------------------------------------------------------- a worker


@pytest.mark.parametrize("workers", [1, 2])
def test_runner_start_log_format_json_writes_only_json_lines(tmp_path, workers):
    # Given a job of four chunks, each logging a line of its own
    storage = str(tmp_path / "store")
    job_id = submit("tests.runner.worker.logged_jobs:Chatty", {"chunks": 4}, storage=storage)

    # When workers run it with --log-format json
    done = subprocess.run(
        [*runner_command(), "start", "tests.runner.worker.logged_jobs:Chatty", "--burst",
         "--log-format", "json", "--workers", str(workers), "--poll-max", "0.1",
         "--storage", storage],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip

    # Then every line it logged is one JSON object
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert {"time", "level", "logger", "message", "process", "process_name"} <= set(lines[0])
    # the job's own lines carry the chunk's ids and their extra field
    hello = [line for line in lines if line["logger"] == "tests.runner.worker.logged_jobs"]
    assert sorted(line["chunk"] for line in hello) == [0, 1, 2, 3]
    for line in hello:
        assert line["message"] == f"hello from chunk {line['chunk']}"
        assert line["row"] == line["chunk"] * 10
        assert (line["job_id"], line["task"], line["attempt"]) == (job_id, "chunk", 1)
        assert line["worker_id"].split(":")[1] == str(line["process"])
    # and so do the runner's lines of a chunk's start and finish
    chunk_lines = [line["message"] for line in lines if line.get("chunk") == 2]
    assert f"chunk 2 of {job_id} started (attempt 1)" in chunk_lines
    assert any(m.startswith(f"chunk 2 of {job_id} finished in ") for m in chunk_lines)
    names = {line["process_name"] for line in lines if "worker_id" in line}
    assert names == ({"MainProcess"} if workers == 1 else {"worker-1", "worker-2"})
