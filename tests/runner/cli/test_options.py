"""The command line's own options and listings (docs/cli.md): ``--version``, ``--storage``
before the command, ``status`` newest first with ``--state`` and ``--limit``, help lines
not cut, optional ``--params``, titled worker processes, and what ``--burst`` says when a
job type has nothing to serve.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.store import CheckpointStore
from runner.cli.commands import cli
from runner.cli.selection import SHOWN_BY_DEFAULT
from runner.worker import supervisor
from runner.worker.loop import EXIT_OK, WorkerSettings
from tests.e2e.processes import ROOT, runner_command, wait_until
from tests.runner.cli.invoke import run_runner

SUMS = (
    "from jobs import ChunkedJob\n\n\nclass Sums(ChunkedJob):\n"
    "    queue = 'sums'\n\n"
    "    def split(self, params):\n        return [params]\n\n"
    "    def process(self, chunk):\n        return chunk.payload\n\n\n"
    "class OtherSums(Sums):\n    queue = 'sums'\n"
)


def test_version_is_the_installed_packages():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"runner, version {importlib.metadata.version('chunkrunner')}\n"


def _three_jobs(where: Path) -> None:
    """Jobs a, b, c submitted a minute apart; b has ended ``done``."""
    clock = FakeClock()
    with open_storage(str(where), clock=clock) as opened:
        store = CheckpointStore(opened, clock)
        for job_id in ("a", "b", "c"):
            store.create_job(job_id, "m:Job", "m-job", None)
            clock.advance(60)
        store.change_job("b", lambda job: {"state": "done"})


def _listed(*args: str) -> list[str]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return [job["job_id"] for job in json.loads(result.output)]


def test_storage_given_before_the_command(tmp_path):
    _three_jobs(tmp_path)
    assert _listed("--storage", str(tmp_path), "status") == ["c", "a"]
    assert _listed("--storage", str(tmp_path), "status", "--storage", str(tmp_path))
    differing = CliRunner().invoke(
        cli, ["--storage", str(tmp_path), "status", "--storage", str(tmp_path / "other")]
    )
    assert differing.exit_code == 2
    assert "--storage is given before and after the command, differently" in differing.output


def test_status_lists_the_active_jobs_newest_first_and_selects_by_state_and_limit(tmp_path):
    _three_jobs(tmp_path)
    where = ["status", "--storage", str(tmp_path)]
    assert _listed(*where) == ["c", "a"]
    assert _listed(*where, "--all") == ["c", "b", "a"]
    assert _listed(*where, "--state", "done") == ["b"]
    assert _listed(*where, "--state", "planning", "--state", "done") == ["c", "b", "a"]
    assert _listed(*where, "--limit", "1") == ["c"]
    assert _listed(*where, "--all", "--limit", "2") == ["c", "b"]
    assert _listed(*where, "--state", "planning", "--limit", "1") == ["c"]
    one = CliRunner().invoke(cli, [*where, "a", "--limit", "1"])
    assert one.exit_code == 2 and "not with JOB_ID" in one.output
    both = CliRunner().invoke(cli, [*where, "--all", "--state", "done"])
    assert both.exit_code == 2 and "give --all or --state, not both" in both.output


def test_status_shows_the_newest_active_jobs_up_to_a_default_and_json_lists_them_all(
    tmp_path: Path,
):
    # Given more active jobs than a view shows by default
    count = SHOWN_BY_DEFAULT + 3
    clock = FakeClock()
    with open_storage(str(tmp_path), clock=clock) as opened:
        store = CheckpointStore(opened, clock)
        for number in range(count):
            store.create_job(f"j{number:03d}", "m:Job", "m-job", None)
            clock.advance(1)
    where = ["status", "--storage", str(tmp_path)]

    # When the list is shown as text, as JSON, and as text with a higher limit
    shown = CliRunner().invoke(cli, where).output
    titles = [line.split()[0] for line in shown.splitlines() if line.startswith("j")]

    # Then the text shows the newest ones and says how many it left out (each job shown
    # costs reads of its chunks: a store of hundreds of queued jobs answers in seconds)
    assert titles == [f"j{number:03d}" for number in reversed(range(3, count))]
    assert shown.endswith("\n\nand 3 more, older (raise --limit)\n")
    assert len(_listed(*where)) == count
    raised = CliRunner().invoke(cli, [*where, "--limit", str(count)]).output
    assert "more, older" not in raised
    assert sum(line.startswith("j") for line in raised.splitlines()) == count


def test_status_counts_the_ended_jobs_in_one_line_and_says_what_a_limit_left_out(tmp_path):
    _three_jobs(tmp_path)
    where = ["status", "--storage", str(tmp_path)]

    shown = CliRunner().invoke(cli, where).output

    assert [line for line in shown.splitlines() if not line.startswith(" ")] == [
        "c  m:Job  planning",
        "",
        "a  m:Job  planning",
        "",
        "and 1 ended job: 1 done (runner status --all, or --state done)",
    ]
    limited = CliRunner().invoke(cli, [*where, "--all", "--limit", "1"]).output
    assert limited.endswith("\n\nand 2 more, older (raise --limit)\n")
    nothing = CliRunner().invoke(cli, [*where, "--state", "failed"]).output
    assert nothing == "no jobs\n"


def test_status_says_when_no_job_is_active_and_counts_the_ended_ones(tmp_path):
    clock = FakeClock()
    with open_storage(str(tmp_path), clock=clock) as opened:
        store = CheckpointStore(opened, clock)
        store.ensure()
        empty = CliRunner().invoke(cli, ["status", "--storage", str(tmp_path)]).output
        assert empty == "no jobs\n"
        for job_id, state in [("x", "done"), ("y", "failed"), ("z", "done")]:
            job, _ = store.create_job(job_id, "m:Job", "m-job", None)
            store.update_job(job, state=state)

    shown = CliRunner().invoke(cli, ["status", "--storage", str(tmp_path)]).output

    assert shown == (
        "no active jobs; 3 ended jobs: 2 done, 1 failed (runner status --all, or --state failed)\n"
    )


@pytest.mark.parametrize("group", [[], ["poison"]], ids=["runner", "poison"])
def test_command_lists_in_help_are_whole_sentences(group):
    result = CliRunner().invoke(cli, [*group, "--help"], env={"COLUMNS": "80"})
    listed = result.output.split("Commands:\n", 1)[1].splitlines()
    assert listed and all(line.endswith(".") and "..." not in line for line in listed), listed


def test_params_are_optional_for_a_job_that_takes_none(tmp_path):
    (tmp_path / "sums.py").write_text(SUMS)
    result = run_runner(tmp_path, "submit", "sums:Sums", "--job-id", "none-1")
    assert result.returncode == 0 and result.stdout == "none-1\n", result
    with open_storage(str(tmp_path / ".runner"), create=False) as opened:
        store = CheckpointStore(opened)
        assert store.params(store.get_job("none-1")) is None


def test_a_burst_worker_says_when_its_job_type_has_nothing_to_serve(tmp_path):
    (tmp_path / "sums.py").write_text(SUMS)
    assert run_runner(tmp_path, "submit", "sums:OtherSums", "--params", "1").returncode == 0
    result = run_runner(tmp_path, "start", "sums:Sums", "--burst")
    assert result.returncode == 0, result
    assert (
        "burst: nothing to serve for sums:Sums: no job of this type in "
        f"embedded:{tmp_path / '.runner'}; its queue's jobs were submitted as sums:OtherSums"
    ) in result.stderr


def _titles(parent: int) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(cmdline.replace(b"\0", b" ").decode().strip())
    return sorted(title for title in found if title.startswith("runner worker-"))


def test_worker_processes_are_titled_with_their_name_and_queue(tmp_path):
    (tmp_path / "sums.py").write_text(SUMS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env["RUNNER_STORAGE"] = str(tmp_path / "store")
    start = subprocess.Popen(
        [*runner_command(), "start", "sums:Sums", "--workers", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    expected = ["runner worker-1 sums", "runner worker-2 sums"]
    try:
        wait_until(
            lambda: _titles(start.pid) == expected,
            "both workers titled `runner worker-N QUEUE`",
            timeout=120,  # two spawned interpreters starting on a busy 2-core machine
            explain=lambda: f"titles seen: {_titles(start.pid)}",
        )
    finally:
        start.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 120
        while start.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if start.poll() is None:
            start.kill()
    assert start.wait() == 0


def test_a_sigterm_while_a_worker_starts_stops_it_cleanly(tmp_path, monkeypatch):
    # Given a worker that is sent SIGTERM while it starts, before its loop exists
    (tmp_path / "sums.py").write_text(SUMS)
    monkeypatch.syspath_prepend(str(tmp_path))
    real_load = supervisor.load_job_class

    def signalled_while_loading(path: str) -> type:
        os.kill(os.getpid(), signal.SIGTERM)
        return real_load(path)

    monkeypatch.setattr(supervisor, "load_job_class", signalled_while_loading)
    options = supervisor.StartOptions(("sums:Sums",), str(tmp_path / "store"), WorkerSettings())
    previous = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}

    def too_early(number: int, frame: object) -> None:
        raise AssertionError("SIGTERM arrived before the worker's own handler was in place")

    signal.signal(signal.SIGTERM, too_early)  # in place of the default: killing pytest
    try:
        code = supervisor.run_in_this_process(options)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    # Then it stops as asked once started (it was not killed outright): exit 0
    assert code == EXIT_OK


class _Ended:
    def __init__(self, exitcode: int):
        self.exitcode, self.pid = exitcode, 4242


@pytest.mark.parametrize(("stopping", "expected"), [(True, EXIT_OK), (False, 128 + signal.SIGTERM)])
def test_a_worker_killed_by_the_sigterm_passed_on_while_stopping_stopped_as_asked(
    stopping, expected
):
    # Given a worker process ended by SIGTERM before its handler was in place
    place = supervisor._Worker("worker-1", process=_Ended(-signal.SIGTERM))  # type: ignore[arg-type]
    supervisor._look_after(place, stopping, False, random.Random(1), lambda _: None)
    # Then while this parent stops the workers, that is a stop as asked (exit 0); at
    # another time it is a death (no restart here: its exit code, 128 + 15)
    assert place.exit_code == expected


def test_priority_is_kept_and_shown_by_status(tmp_path):
    where = str(tmp_path / "store")
    job = "tests.runner.world:Verdicts"
    for job_id, more in (("p-1", ["--priority", "7"]), ("p-0", [])):
        args = ["submit", job, "--params", '{"payloads": []}', "--job-id", job_id, *more]
        given = CliRunner().invoke(cli, [*args, "--storage", where])
        assert given.exit_code == 0, given.output

    text = CliRunner().invoke(cli, ["status", "--storage", where])
    shown = CliRunner().invoke(cli, ["status", "p-1", "--json", "--storage", where])

    heads = [line for line in text.output.splitlines() if line.startswith("p-")]
    assert [head.endswith("priority 7") for head in sorted(heads)] == [False, True], heads
    assert json.loads(shown.output)["priority"] == 7


def test_a_priority_that_is_not_a_whole_number_is_one_error_line(tmp_path):
    (tmp_path / "sums.py").write_text(SUMS)
    result = run_runner(tmp_path, "submit", "sums:Sums", "--priority", "high")
    assert result.returncode != 0 and "--priority" in result.stderr
    assert "Traceback" not in result.stderr
