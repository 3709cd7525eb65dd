"""``module:Class`` names: a mistyped class gets "did you mean", and the example the
error gives for a malformed name is a job class that exists."""

from __future__ import annotations

import re

import pytest

from checkpoint.errors import JobNotFound
from jobs.job import ChunkedJob
from jobs.registry import load_job_class

_JOBS_MODULE = """
from jobs import ChunkedJob


class SumSquares(ChunkedJob):
    def split(self, params):
        return [1]

    def process(self, chunk):
        return 1


class SumCubes(SumSquares):
    pass


class SumOfEverything:  # not a job: never offered
    pass
"""


@pytest.fixture
def job_module(tmp_path, monkeypatch) -> str:
    (tmp_path / "sums_for_registry.py").write_text(_JOBS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "sums_for_registry"


def test_a_mistyped_class_name_gets_did_you_mean(job_module: str):
    with pytest.raises(JobNotFound) as missing:
        load_job_class(f"{job_module}:SumSquare")

    assert str(missing.value) == (
        f"module {job_module!r} has no 'SumSquare'; did you mean 'SumSquares'?"
    )


def test_a_class_name_like_two_offers_both(job_module: str):
    with pytest.raises(JobNotFound) as missing:
        load_job_class(f"{job_module}:SumSquaresCubes")

    assert str(missing.value).endswith("; did you mean one of 'SumSquares', 'SumCubes'?")


def test_a_class_name_like_nothing_lists_the_modules_job_classes(job_module: str):
    with pytest.raises(JobNotFound) as missing:
        load_job_class(f"{job_module}:Unrelated")

    assert str(missing.value) == (
        f"module {job_module!r} has no 'Unrelated'; its job classes: SumCubes, SumSquares"
    )


def test_a_module_without_job_classes_says_so(tmp_path, monkeypatch):
    (tmp_path / "no_jobs_here.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(JobNotFound) as missing:
        load_job_class("no_jobs_here:Job")

    assert str(missing.value) == "module 'no_jobs_here' has no 'Job'; it defines no job class"


def test_the_example_of_a_malformed_name_is_a_job_that_exists():
    with pytest.raises(JobNotFound) as malformed:
        load_job_class("squares.SumSquares")

    example = re.search(r"\(e\.g\. ([\w.]+:[\w.]+)\)", str(malformed.value))
    assert example is not None, str(malformed.value)
    assert issubclass(load_job_class(example.group(1)), ChunkedJob)
