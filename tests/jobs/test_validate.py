"""``validate(params)``: a job class refuses wrong params in the submitting process,
before anything is recorded, through ``jobs.submit`` and ``runner submit`` alike, on
both backends."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from checkpoint.errors import JobNotFound
from checkpoint.store import CheckpointStore
from jobs import ChunkedJob, InvalidParams, submit
from jobs.testing import run_job
from runner.cli.commands import main
from samples.quickstart.wordcount import WordCount
from tests.backends import Backend
from tests.runner.cli.invoke import run_runner


class Counted(ChunkedJob):
    """Params must say how many chunks, as a whole number."""

    queue = "validate-counted"

    def validate(self, params: Any) -> None:
        if not isinstance(params, dict) or "chunks" not in params:
            raise ValueError("params needs 'chunks', the number of chunks")
        if params["chunks"] < 0:
            raise InvalidParams("'chunks' must be 0 or more")

    def split(self, params: Any) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Any) -> Any:
        return chunk.payload


class Careless(ChunkedJob):
    """A validate that reads params as if they were right: its KeyError refuses too."""

    queue = "validate-careless"

    def validate(self, params: Any) -> None:
        int(params["numbers"])

    def split(self, params: Any) -> Any:
        return [1]

    def process(self, chunk: Any) -> Any:
        return 1


def _nothing_recorded(backend: Backend, job_id: str) -> None:
    store = CheckpointStore(backend.storage)
    with pytest.raises(JobNotFound):
        store.get_job(job_id)
    if backend.name == "embedded":  # the only store the test's job could be in
        assert store.list_jobs() == []


@pytest.mark.parametrize(
    ("job", "params", "refusal"),
    [
        (Counted, {}, "params needs 'chunks', the number of chunks"),
        (Counted, None, "params needs 'chunks', the number of chunks"),
        (Counted, {"chunks": -1}, "'chunks' must be 0 or more"),
        (Careless, {}, "KeyError: 'numbers'"),
        (Careless, {"numbers": "many"}, "invalid literal for int() with base 10: 'many'"),
    ],
)
def test_params_the_job_refuses_are_one_line_and_nothing_is_recorded(
    backend: Backend, job: type[ChunkedJob], params: Any, refusal: str
):
    job_id = f"validate-{uuid.uuid4().hex[:8]}"

    with pytest.raises(InvalidParams) as refused:
        submit(job, params, job_id=job_id, storage=backend.storage)

    assert str(refused.value) == f"{job.job_type()} refused its params: {refusal}"
    _nothing_recorded(backend, job_id)


def test_params_the_job_accepts_are_submitted(backend: Backend):
    job_id = submit(Counted, {"chunks": 2}, storage=backend.storage)

    assert CheckpointStore(backend.storage).get_job(job_id).state == "planning"


def test_a_job_without_validate_takes_any_params(backend: Backend):
    class Anything(ChunkedJob):
        queue = "validate-anything"

        def split(self, params: Any) -> Any:
            return [params]

        def process(self, chunk: Any) -> Any:
            return 1

    job_id = submit(Anything, {"whatever": 1}, storage=backend.storage)

    assert CheckpointStore(backend.storage).get_job(job_id).job_id == job_id


def test_the_test_harness_validates_as_submit_does():
    with pytest.raises(InvalidParams, match="params needs 'chunks'"):
        run_job(Counted, {})
    assert run_job(Counted, {"chunks": 3}).results == [0, 1, 2]


_MODULE = """
from jobs import ChunkedJob


class Sums(ChunkedJob):
    def validate(self, params):
        if not isinstance(params, dict) or "numbers" not in params:
            raise ValueError("params needs 'numbers', how many numbers to sum")

    def split(self, params):
        return range(params["numbers"])

    def process(self, chunk):
        return chunk.payload
"""


def test_runner_submit_refuses_in_one_line_with_exit_2_and_makes_no_store(tmp_path):
    (tmp_path / "sums.py").write_text(_MODULE)

    result = run_runner(tmp_path, "submit", "sums:Sums", "--params", "{}")

    assert result.returncode == 2, result
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "runner: error: sums:Sums refused its params: params needs 'numbers', how many "
        "numbers to sum"
    ]
    assert not (tmp_path / ".runner").exists()


def test_the_command_exits_2_in_process_too(tmp_path, monkeypatch, capsys):
    (tmp_path / "sums_in_process.py").write_text(_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("sys.argv", ["runner", "submit", "sums_in_process:Sums", "--params", "{}"])

    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "runner: error: sums_in_process:Sums refused its params: params needs 'numbers', how "
        "many numbers to sum\n"
    )
    assert not (tmp_path / ".runner").exists()


def test_the_quickstart_refuses_params_without_its_folders(tmp_path: Any):
    job = WordCount()
    with pytest.raises(ValueError, match='needs "input"'):
        job.validate({})
    with pytest.raises(ValueError, match="is not a folder"):
        job.validate({"input": str(tmp_path / "nowhere"), "output": "x.json"})
    job.validate({"input": str(tmp_path), "output": str(tmp_path / "summary.json")})
