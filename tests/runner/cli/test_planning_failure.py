"""A job whose planning (``split``) raises is shown as what it is, on both backends:
while planning retries, which attempt failed and with what; once it is poisoned, that
the job failed in planning, with the error's one line; never ``0/0+ (planning) done``."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from runner.cli.dashboard.app import DashboardSettings, build_app
from runner.cli.render import render_status
from runner.cli.snapshot import read_report
from tests.azurite import Azurite
from tests.runner.world import World


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``):
    its dashboard lists the jobs of the store."""
    return own_azurite


def _status(world: World, job_id: str) -> str:
    return render_status(read_report(world.store, job_id))


def test_planning_that_failed_and_retries_says_which_attempt_and_why(world: World):
    # Given a job whose split raises
    job_id = world.job(None, params={"split": "fail"})
    world.send(job_id, "plan")

    # When its first planning attempt fails
    world.deliver()

    # Then status says planning failed, on which attempt of how many, and why
    text = _status(world, job_id)
    lines = text.splitlines()
    assert lines[0].split()[-1] == "planning"
    assert lines[1].startswith("  planning failed (attempt 1 of 2), next try at ")
    assert lines[1].endswith(": ValueError: split failed")
    assert "(planning) done" not in text and "failed  planning" not in text


def test_planning_poisoned_fails_the_job_in_planning_with_its_error(world: World):
    # Given a job whose split raises, on its last attempt
    job_id = world.job(None, params={"split": "fail"})
    world.set_task(job_id, "plan", state="retrying", attempt=1)
    world.send(job_id, "plan")

    # When that attempt fails too
    world.deliver()

    # Then the job failed in planning, said in one line with the error's own line
    text = _status(world, job_id)
    assert text.splitlines() == [
        f"{job_id}  {world.job_record(job_id).job_type}  failed",
        "  failed in planning after 2 attempt(s): ValueError: split failed",
    ]


def test_the_dashboard_says_a_job_failed_in_planning(world: World):
    # Given a job whose planning was poisoned
    job_id = world.job(None, params={"split": "fail"})
    world.set_task(job_id, "plan", state="retrying", attempt=1)
    world.send(job_id, "plan")
    world.deliver()

    # When its page and the failed jobs' list are read
    settings = DashboardSettings(world.store.storage.description, 2.0, None, ("*",))
    client = TestClient(build_app(world.store, settings, world.clock.monotonic))
    job_page = client.get(f"/jobs/{job_id}").text
    listed = client.get("/?state=failed").text

    # Then both say so, with the error's line, never an empty bar of 0/0
    assert "failed in planning after 2 attempt(s): ValueError: split failed" in job_page
    assert "(planning) done" not in job_page and "No chunks yet" in job_page
    row = listed[listed.index(f'data-job="{job_id}"') :]
    assert "failed in planning" in row[: row.index("</tr>")]
