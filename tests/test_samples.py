"""Every sample runs as its README says: ``runner submit``, then ``runner start --burst``,
as real processes, on both backends."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from samples.quickstart.make_text import make_text
from samples.quickstart.wordcount import TOP_WORDS, WORD
from tests.conftest import BACKENDS
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
            [*runner_command(), "start", WORD_COUNT, "--workers", "2", "--burst",
             "--storage", storage],
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
