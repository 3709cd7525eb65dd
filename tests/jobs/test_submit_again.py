"""A submit under an existing job id is idempotent only when it asks for the same job;
another class or other params are refused, never silently dropped (docs/semantics.md
§10), on both backends.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from checkpoint.errors import ConfigurationError
from checkpoint.store import CheckpointStore
from jobs import Chunk, ChunkedJob
from jobs.errors import JobDefinitionError, JobIdTaken
from jobs.submit import submit
from runner.cli import commands
from tests.backends import Backend
from tests.runner.cli.invoke import one_error_line, run_runner


class Totals(ChunkedJob):
    def split(self, params: Any) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> Any:
        return chunk.payload


class OtherTotals(Totals):
    queue = "other-totals"


class NoProcess(ChunkedJob):
    def split(self, params: Any) -> Any:
        return [1]


def _job_id() -> str:
    return f"again-{uuid.uuid4().hex[:10]}"


def test_the_same_job_submitted_again_is_a_no_op(backend: Backend):
    job_id = _job_id()
    params = {"chunks": 2, "pair": (1, 2)}
    assert submit(Totals, params, job_id=job_id, storage=backend.storage) == job_id
    first = CheckpointStore(backend.storage).get_job(job_id)
    # the same params, as JSON would give them (a tuple comes back a list), by class name
    again = submit(
        "tests.jobs.test_submit_again:Totals",
        {"pair": [1, 2], "chunks": 2},
        job_id=job_id,
        delay_seconds=5,
        storage=backend.storage,
    )
    assert again == job_id
    assert CheckpointStore(backend.storage).get_job(job_id).incarnation == first.incarnation


def test_other_params_under_an_existing_id_are_refused(backend: Backend):
    job_id = _job_id()
    submit(Totals, {"chunks": 2}, job_id=job_id, storage=backend.storage)
    with pytest.raises(JobIdTaken) as refused:
        submit(Totals, {"chunks": 3}, job_id=job_id, storage=backend.storage)
    assert str(refused.value) == (
        f"job {job_id!r} exists already with other params ({{'chunks': 2}}); submit under "
        f"another --job-id, or `runner delete {job_id}` (--force if it has not ended) and "
        "submit again"
    )
    assert CheckpointStore(backend.storage).params(
        CheckpointStore(backend.storage).get_job(job_id)
    ) == {"chunks": 2}


def test_another_class_under_an_existing_id_is_refused(backend: Backend):
    job_id = _job_id()
    submit(Totals, {"chunks": 2}, job_id=job_id, storage=backend.storage)
    with pytest.raises(
        JobIdTaken,
        match="exists already as tests.jobs.test_submit_again:Totals, "
        "not tests.jobs.test_submit_again:OtherTotals",
    ):
        submit(OtherTotals, {"chunks": 2}, job_id=job_id, storage=backend.storage)


def test_a_long_first_params_is_shown_cut(backend: Backend):
    job_id = _job_id()
    submit(Totals, {"chunks": 1, "pad": "x" * 500}, job_id=job_id, storage=backend.storage)
    with pytest.raises(JobIdTaken, match=r"with other params \(\{'chunks': 1, 'pad': 'xxx"):
        submit(Totals, {"chunks": 1}, job_id=job_id, storage=backend.storage)


def test_a_class_without_process_is_refused_at_submit(backend: Backend):
    with pytest.raises(
        JobDefinitionError,
        match=r"NoProcess \(.*test_submit_again.py line \d+\)"
        r" defines no process\(\)",
    ):
        submit(NoProcess, None, storage=backend.storage)


def test_the_cli_refuses_other_params_in_one_line(tmp_path):
    (tmp_path / "sums.py").write_text(
        "from jobs import ChunkedJob\n\n\nclass Sums(ChunkedJob):\n"
        "    def split(self, params):\n        return [params]\n\n"
        "    def process(self, chunk):\n        return chunk.payload\n"
    )
    first = run_runner(tmp_path, "submit", "sums:Sums", "--params", "1", "--job-id", "s-1")
    same = run_runner(tmp_path, "submit", "sums:Sums", "--params", "1", "--job-id", "s-1")
    assert first.stdout == same.stdout == "s-1\n" and same.returncode == 0, same
    line = one_error_line(
        run_runner(tmp_path, "submit", "sums:Sums", "--params", "2", "--job-id", "s-1")
    )
    assert line.startswith("runner: error: job 's-1' exists already with other params (1)")


def test_a_class_whose_source_cannot_be_found_is_named_by_its_module():
    made = type("Made", (ChunkedJob,), {"__module__": __name__})
    with pytest.raises(
        JobDefinitionError,
        match=r"^Made \(module tests.jobs.test_submit_again\) "
        r"defines no split\(\) and no process\(\)",
    ):
        submit(made, None, storage="unused: refused before any storage is opened")


@pytest.mark.parametrize("priority", [1.5, "high", 1_000_001])
def test_a_priority_out_of_range_is_refused_before_anything_is_recorded(
    backend: Backend, priority: Any
):
    job_id = _job_id()
    with pytest.raises(ConfigurationError, match="priority"):
        submit(Totals, {"chunks": 1}, job_id=job_id, priority=priority, storage=backend.storage)
    assert job_id not in {job.job_id for job in CheckpointStore(backend.storage).list_jobs()}


def test_a_submit_again_keeps_the_first_priority(backend: Backend):
    job_id = _job_id()
    submit(Totals, {"chunks": 1}, job_id=job_id, priority=3, storage=backend.storage)
    submit(Totals, {"chunks": 1}, job_id=job_id, priority=9, storage=backend.storage)
    assert CheckpointStore(backend.storage).get_job(job_id).priority == 3


def test_a_submit_again_with_another_priority_says_what_was_kept(
    backend: Backend, caplog: pytest.LogCaptureFixture
):
    job_id = _job_id()
    submit(Totals, {"chunks": 1}, job_id=job_id, priority=3, storage=backend.storage)
    caplog.clear()
    # The existing job comes back, with one warning saying what stands
    again = submit(Totals, {"chunks": 1}, job_id=job_id, priority=9, storage=backend.storage)
    assert again == job_id
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [
        f"job {job_id!r} exists already: kept its params and priority 3; "
        "the new priority 9 was not applied"
    ]
    # The same priority again is the plain no-op: nothing to warn of
    caplog.clear()
    submit(Totals, {"chunks": 1}, job_id=job_id, priority=3, storage=backend.storage)
    assert [r for r in caplog.records if r.levelname == "WARNING"] == []


def test_the_cli_says_in_one_line_that_a_new_priority_was_not_applied(tmp_path):
    (tmp_path / "sums.py").write_text(
        "from jobs import ChunkedJob\n\n\nclass Sums(ChunkedJob):\n"
        "    def split(self, params):\n        return [params]\n\n"
        "    def process(self, chunk):\n        return chunk.payload\n"
    )
    run_runner(tmp_path, "submit", "sums:Sums", "--params", "1", "--job-id", "s-1")
    again = run_runner(
        tmp_path, "submit", "sums:Sums", "--params", "1", "--job-id", "s-1", "--priority", "5"
    )
    assert again.returncode == 0 and again.stdout == "s-1\n", again
    assert again.stderr.splitlines() == [
        "runner: warning: job 's-1' exists already: kept its params and priority 0; "
        "the new --priority 5 was not applied"
    ]


def test_runner_submit_in_process_warns_of_a_priority_not_applied(tmp_path):
    store = str(tmp_path / "store")
    args = ["submit", f"{__name__}:Totals", "--params", '{"chunks": 1}', "--job-id", "t-1"]
    first = CliRunner().invoke(commands.cli, [*args, "--priority", "2", "--storage", store])
    again = CliRunner().invoke(commands.cli, [*args, "--storage", store])
    assert first.exit_code == again.exit_code == 0 and again.stdout == "t-1\n", again.output
    assert again.stderr == (
        "runner: warning: job 't-1' exists already: kept its params and priority 2; "
        "the new --priority 0 was not applied\n"
    )
