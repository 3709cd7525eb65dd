"""Every command reports what stops it in one line; the traceback only at debug level.

Run as a user runs them: the ``runner`` script in a subprocess, from the user's folder.
"""

from __future__ import annotations

import pytest

from checkpoint.errors import JobNotFound
from jobs.errors import JobModuleFailed
from jobs.registry import load_job_class
from tests.runner.cli.invoke import one_error_line, run_runner


def test_a_storage_directory_that_cannot_be_made_is_one_line(tmp_path):
    line = one_error_line(run_runner(tmp_path, "check", "--storage", "/proc/nope"))
    assert "/proc/nope" in line


def test_a_job_module_with_a_syntax_error_names_its_file_and_line(tmp_path):
    (tmp_path / "broken.py").write_text("x = 1\ndef f(:\n")
    line = one_error_line(run_runner(tmp_path, "submit", "broken:Job", "--params", "{}"))
    assert f"{tmp_path / 'broken.py'} line 2: SyntaxError" in line


def test_a_job_module_failing_while_importing_names_the_line(tmp_path):
    (tmp_path / "failing.py").write_text("import os\n\nvalue = undefined_name\n")
    line = one_error_line(run_runner(tmp_path, "start", "failing:Job", "--burst"))
    assert "failing.py line 3: NameError: name 'undefined_name' is not defined" in line


def test_a_users_jobs_folder_hidden_by_ours_is_named(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "squares.py").write_text("")
    line = one_error_line(run_runner(tmp_path, "submit", "jobs.squares:Squares", "--params", "{}"))
    assert f"hides your {tmp_path / 'jobs'}" in line and "rename yours" in line


def test_a_users_jobs_package_hiding_ours_is_named(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "__init__.py").write_text("")
    line = one_error_line(run_runner(tmp_path, "status", path=str(tmp_path)))
    assert f"{tmp_path / 'jobs' / '__init__.py'} hides chunkrunner's own 'jobs'" in line


def test_debug_level_adds_the_traceback(tmp_path):
    result = run_runner(tmp_path, "--log-level", "debug", "check", "--storage", "/proc/nope")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("runner: error: ")


def test_a_missing_module_the_job_imports_is_not_called_a_missing_job(tmp_path, monkeypatch):
    (tmp_path / "needs_more.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(JobModuleFailed, match="needs_more.py line 1: ModuleNotFoundError"):
        load_job_class("needs_more:Job")
    with pytest.raises(JobNotFound, match="cannot import 'not_there_either'"):
        load_job_class("not_there_either:Job")


def test_a_job_class_without_process_is_refused_at_submit_and_start(tmp_path):
    (tmp_path / "halfway.py").write_text(
        "from jobs import ChunkedJob\n\n\nclass Halfway(ChunkedJob):\n"
        "    def split(self, params):\n        return [1]\n"
    )
    expected = (
        f"runner: error: Halfway ({tmp_path / 'halfway.py'} line 4) defines no process(): a "
        "job class must define split(self, params) and process(self, chunk)"
    )
    assert one_error_line(run_runner(tmp_path, "submit", "halfway:Halfway")) == expected
    assert one_error_line(run_runner(tmp_path, "start", "halfway:Halfway", "--burst")) == expected
    assert not (tmp_path / ".runner").exists()  # refused before any store was made


def test_a_bad_class_setting_is_reported_at_the_users_class_not_our_check(tmp_path):
    (tmp_path / "leases.py").write_text(
        "from jobs import ChunkedJob\n\n\nclass NoLease(ChunkedJob):\n    lease_seconds = 0\n"
    )
    line = one_error_line(run_runner(tmp_path, "submit", "leases:NoLease"))
    assert line == (
        f"runner: error: job module 'leases' failed while importing: {tmp_path / 'leases.py'} "
        "line 4: JobDefinitionError: NoLease.lease_seconds must be a whole number of seconds "
        "from 1 to 604800, not 0"
    )


def test_params_that_are_not_json_are_one_line(tmp_path):
    line = one_error_line(run_runner(tmp_path, "submit", "any:Job", "--params", "{bad"))
    assert line == (
        "runner: error: --params is not JSON: Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)"
    )
    line = one_error_line(run_runner(tmp_path, "submit", "any:Job", "--params", "@missing.json"))
    assert line == (
        "runner: error: cannot read --params file missing.json: No such file or directory"
    )
