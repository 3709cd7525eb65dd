"""Every sample runs as its README says: ``runner submit``, then ``runner start --burst``,
as real processes, on both backends; and in the test's own process with
``jobs.testing.run_job``, workers killed mid-way."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.testing import CrashAt, run_job
from samples.quickstart.make_text import make_text
from samples.quickstart.wordcount import LINES_PER_CHECKPOINT, TOP_WORDS, WORD, WordCount
from tests.backends import BACKENDS
from tests.e2e.processes import ROOT, Worker, runner_command

pytestmark = pytest.mark.timeout(180)

WORD_COUNT = "samples.quickstart.wordcount:WordCount"


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "embedded":
        return str(tmp_path / "store")
    return str(request.getfixturevalue("azurite").connection_string)


@pytest.fixture
def started() -> Iterator[list[Worker]]:
    """Background ``runner`` processes of a test, killed at its end if still running."""
    workers: list[Worker] = []
    yield workers
    for worker in workers:
        worker.kill_all()


def runner(storage: str, *args: str) -> str:
    done = subprocess.run(
        [*runner_command(), *args, "--storage", storage],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_word_count(storage: str, tmp_path: Path, started: list[Worker]) -> None:
    # Given generated text files
    files = make_text(tmp_path / "input", files=6, lines=400, seed=5)
    expected = Counter(word for path in files for word in WORD.findall(path.read_text().lower()))
    output = tmp_path / "out" / "summary.json"

    # When the job is submitted and two workers run it in burst mode
    params = json.dumps({"input": str(tmp_path / "input"), "output": str(output)})
    job_id = runner(storage, "submit", WORD_COUNT, "--params", params).strip()
    log_path = tmp_path / "start.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                *runner_command(),
                "start",
                WORD_COUNT,
                "--workers",
                "2",
                "--burst",
                "--storage",
                storage,
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = Worker("runner start", process, log_path)
    started.append(worker)

    # Then they exit 0 once done, and the summary holds the true counts
    assert worker.wait_exit(120) == 0, worker.tail()
    status = json.loads(runner(storage, "status", job_id, "--json"))
    assert (status["state"], status["chunks"]["done"], status["finalize"]) == ("done", 6, "done")
    summary = json.loads(output.read_text())
    top = dict(summary.pop("top"))
    assert summary == {
        "job_id": job_id,
        "files": 6,
        "lines": 6 * 400,
        "words": sum(expected.values()),
        "distinct_words": len(expected),
    }
    assert len(top) == TOP_WORDS and all(expected[word] == n for word, n in top.items())
    assert sorted(top.values(), reverse=True) == [n for _, n in expected.most_common(TOP_WORDS)]


def test_quickstart_word_count_in_process_survives_crashes(tmp_path: Path) -> None:
    # Given three files of 1,200 lines: each chunk checkpoints at lines 500 and 1,000
    files = make_text(tmp_path / "input", files=3, lines=1200, seed=5)
    expected = Counter(word for path in files for word in WORD.findall(path.read_text().lower()))
    output = tmp_path / "out" / "summary.json"

    # When chunk 1's worker dies right after its 2nd checkpoint, chunk 2's once it has
    # counted its file (before recording it), and finalize's once it wrote the summary
    params = {"input": str(tmp_path / "input"), "output": str(output)}
    crashes = [CrashAt(chunk=1, checkpoint=2), CrashAt(chunk=2), CrashAt.finalizing()]
    run = run_job(WordCount, params, crash=crashes).assert_done()

    # Then chunk 1 went on from line 1,000 with the counts so far, and counted only the rest
    crashed, resumed = run.chunks[1].calls
    first_lines = files[1].read_text().lower().splitlines()[: 2 * LINES_PER_CHECKPOINT]
    so_far = Counter(word for line in first_lines for word in WORD.findall(line))
    assert resumed.started_from == {"line": 1000, "counts": dict(so_far)}
    assert resumed.started_from == crashed.checkpoints[-1]
    # chunk 2 counted its file again from the start (nothing of it was durable)
    assert [call.started_from for call in run.chunks[2].calls] == [None, None]
    # and finalize, run twice, wrote the true counts
    assert [chunk.runs for chunk in run.chunks] == [1, 2, 2] and run.finalize is not None
    assert run.finalize.runs == 2
    summary = json.loads(output.read_text())
    assert (summary["files"], summary["lines"]) == (3, 3 * 1200)
    assert summary["words"] == sum(expected.values())
    assert all(expected[word] == n for word, n in summary["top"])
