"""The words the dashboard's templates show (runner/cli/dashboard/views.py): the same as
``runner status --watch`` prints, and markup in any value escaped."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from markupsafe import escape

from runner.cli.dashboard.views import (
    ago,
    clock_time,
    environment,
    percent,
    rate_text,
    shown_fraction,
    state_class,
)
from runner.cli.status_types import ChunkCounts, JobStatus, Rate

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def _job(**changes) -> JobStatus:
    job = JobStatus(
        job_id="j",
        job_type="m:C",
        queue="q",
        queues=("q",),
        state="running",
        error=None,
        paused=False,
        paused_on=None,
        drain=False,
        cancelled_on=None,
        cancel_reason=None,
        created_on=None,
        updated_on=None,
        last_progress_at=None,
        planning_done=True,
        chunks=ChunkCounts(
            total=8, done=2, running=0, waiting=6, failed=0, poisoned=0, cancelled=0
        ),
        progress_fraction=None,
        chunks_per_second=None,
        eta_seconds=None,
        running=(),
        failed=(),
        poisoned=(),
        finalize=None,
        unreadable=(),
    )
    return replace(job, **changes)


def test_times_are_ages_or_times_to_come():
    assert ago(NOW - timedelta(seconds=75), NOW) == "1m15s ago"
    assert ago(NOW + timedelta(seconds=5), NOW) == "in 5s"
    assert ago(None, NOW) == "-"
    assert clock_time(NOW) == "2030-01-01T12:00:00.000000Z"
    assert clock_time(None) == "-"


def test_progress_is_what_status_says_or_done_over_total():
    assert shown_fraction(_job(progress_fraction=0.3)) == 0.3
    assert shown_fraction(_job()) == 0.25
    zero = ChunkCounts(total=0, done=0, running=0, waiting=0, failed=0, poisoned=0, cancelled=0)
    assert shown_fraction(_job(chunks=zero)) == 0.0
    assert percent(0.256) == "26%" and percent(None) == "-"


def test_a_paused_job_not_ended_shows_paused_and_has_no_rate():
    paused = _job(paused=True)
    assert state_class(paused) == "paused"
    assert state_class(_job(paused=True, state="done")) == "done"
    assert rate_text(paused, Rate(0.5, 10)) == "paused"
    assert rate_text(_job(), Rate(0.25, 14)) == "0.25 chunks/s  ETA 14s"


def test_templates_escape_every_value():
    template = environment().from_string("{{ value }}")
    assert template.render(value="<b>&</b>") == "&lt;b&gt;&amp;&lt;/b&gt;"


def test_a_traceback_folds_the_engines_frames_above_the_users():
    # Given a traceback as a worker stores it: our frames, then the job's
    engine = (
        '  File "/opt/app/site-packages/runner/worker/tasks/run.py", line 76, in _execute\n'
        "    outcome = run_user_code(worker.store, delivery.job_class, job, control)\n"
    )
    user = '  File "/home/me/jobs_of_mine.py", line 7, in process\n    raise E("<b>")\n'
    text = "Traceback (most recent call last):\n" + engine + user + "E: <b>\n"

    # When the filter shows it, then the engine's frames are under a fold of their own,
    # the user's are shown, and every part is escaped
    html = str(environment().filters["traceback_html"](text))
    assert html == (
        "<pre>Traceback (most recent call last):\n</pre>"
        '<details class="engine"><summary>1 engine frame(s) above your code</summary>'
        f"<pre>{escape(engine)}</pre></details>"
        f"<pre>{escape(user)}E: &lt;b&gt;\n</pre>"
    )
    assert "&lt;b&gt;" in escape(user)
