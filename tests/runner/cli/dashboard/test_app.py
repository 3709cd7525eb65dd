"""Every route of the dashboard (runner/cli/dashboard/app.py) through Starlette's
TestClient on each backend: the pages say what ``runner status`` says, page a job's
chunks, escape user data, show no secret, share their reads between viewers, and the
actions change a job only with the token."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.errors import Unavailable
from checkpoint.records import JobRecord
from checkpoint.storage import ANY_ETAG, Storage
from checkpoint.store import CheckpointStore
from jobs import manage
from runner.cli.dashboard.app import (
    MAX_FORM_BYTES,
    SECURITY_HEADERS,
    DashboardSettings,
    build_app,
)
from runner.cli.json_form import to_json
from runner.cli.selection import Listing
from runner.cli.snapshot import read_report
from runner.cli.status import poisoned_chunks
from tests.azurite import Azurite
from tests.backends import Backend
from tests.runner.cli.dashboard.stores import (
    POISONED,
    RETRYING,
    RUNNING,
    SCRIPT,
    Populated,
    clean_up,
    populate,
)
from tests.runner.cli.invoke import run_runner


@pytest.fixture(scope="module")
def azurite(own_azurite: Azurite) -> Azurite:
    """This module's own Azurite (tests/conftest.py ``own_azurite``):
    its pages list every active job of the store, each read in full."""
    return own_azurite


TOKEN = "s3cret-token-for-tests"
ESCAPED_SCRIPT = "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;"


class World:
    """A populated store and a dashboard of it, its reads countable and breakable.

    ``populated``: what an earlier world wrote to the same store, and the seconds its
    clock moved meanwhile; this one's clock then starts where that one's was when done,
    so the pages say what they said to it."""

    def __init__(
        self,
        real: Storage,
        token: str | None,
        allowed: tuple[str, ...] = ("*",),
        populated: tuple[Populated, float] | None = None,
    ):
        self.clock = FakeClock()
        self.records = FlakyRecords(real.records)
        storage = Storage(real.queues, self.records, real.blobs, real.description)
        self.store = CheckpointStore(storage, self.clock)
        if populated is None:
            started = self.clock.monotonic()
            self.ids: Populated = populate(self.store, self.clock)
            self.populated = (self.ids, self.clock.monotonic() - started)
        else:
            self.ids, seconds = self.populated = populated
            self.clock.advance(seconds)
        settings = DashboardSettings(real.description, 2.0, token, allowed)
        self.client = TestClient(build_app(self.store, settings, self.clock.monotonic))

    def job(self, job_id: str) -> JobRecord:
        return self.store.get_job(job_id)

    def page(self, url: str, status: int = 200) -> str:
        answer = self.client.get(url)
        assert answer.status_code == status, answer.text
        return str(answer.text)


class FlakyRecords:
    """Records that count their calls and fail every one while ``failing``."""

    def __init__(self, records: Any):
        self._records = records
        self.calls = 0
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._records, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.failing:
                raise Unavailable("the store is out of reach")
            return method(*args, **kwargs)

        return call


@pytest.fixture(scope="module")
def populated_once() -> dict[str, tuple[Populated, float]]:
    """What the first ``world`` on Azurite wrote, for the module's later ones: a
    populated store cost each test about 1 s there (5 s in a loaded run), and the
    tests of ``world`` only read it. It stays in the module's own Azurite, which
    nothing else writes to but this module's tests; each world still has a clock, a
    dashboard and counted, breakable reads of its own."""
    return {}


@pytest.fixture
def world(backend: Backend, populated_once: dict[str, tuple[Populated, float]]) -> Iterator[World]:
    """A job's pages on each backend, for a test that only reads the store (one that
    writes takes ``fresh``). The embedded store is the test's own, populated anew."""
    if backend.name == "embedded":
        made = World(backend.storage, None)
        yield made
        clean_up(made.store, made.ids)
    else:
        made = World(backend.storage, None, populated=populated_once.get(backend.name))
        populated_once.setdefault(backend.name, made.populated)
        yield made


@pytest.fixture
def fresh(backend: Backend) -> Iterator[World]:
    """A job's pages on each backend, on a store populated for this test alone."""
    made = World(backend.storage, None)
    yield made
    clean_up(made.store, made.ids)


@pytest.fixture
def acting(backend: Backend) -> Iterator[World]:
    made = World(backend.storage, TOKEN)
    yield made
    clean_up(made.store, made.ids)


@pytest.fixture
def whole(tmp_path: Path) -> Iterator[World]:
    """The pages of every job, on a store of their own: the session's Azurite holds every
    test's jobs, and a page of every job reads each of them."""
    with open_storage(str(tmp_path / "store")) as storage:
        yield World(storage, None)


def _row(html: str, job_id: str) -> str:
    found = re.search(rf'<tr data-job="{re.escape(job_id)}">(.*?)</tr>', html, re.DOTALL)
    assert found, f"no row of {job_id}"
    return found.group(1)


def _cells(row: str) -> list[str]:
    """The text of each cell of a row, its whitespace normalised."""
    cells = re.findall(r"<td.*?</td>", row, re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", cell).split()) for cell in cells]


# --------------------------------------------------------------------------- pages


def test_the_jobs_page_lists_jobs_newest_first_with_state_progress_and_failures(whole: World):
    world = whole
    html = world.page("/?state=all")
    ids = world.ids

    # Newest first: the cancelled job, the paused one, the running one
    positions = [html.index(f'data-job="{job_id}"') for job_id in (ids.cancelled, ids.paused)]
    assert positions == sorted(positions) and positions[-1] < html.index(ids.running)
    assert '<span class="state cancelled">cancelled</span>' in _row(html, ids.cancelled)
    paused = _row(html, ids.paused)
    assert "state running" in paused and '<span class="state paused">paused</span>' in paused
    running = _row(html, ids.running)
    assert "<progress" in running and "4/300" in running
    cells = _cells(running)
    assert cells[5:9] == ["1", "292", "2", "1"]  # running, waiting, failed, poisoned
    assert "10 cancelled" in _row(html, ids.cancelled)


def _many_ended(store: CheckpointStore, clock: FakeClock, count: int) -> list[str]:
    """``count`` jobs done, a second apart, newest last."""
    made = []
    for number in range(count):
        clock.advance(1)
        job, _ = store.create_job(f"ended-{number:03d}", "tests:Job", "ended-q", None)
        store.update_job(job, state="done")
        made.append(job.job_id)
    return made


def test_the_jobs_page_lists_the_active_jobs_with_a_tab_for_each_state(whole: World):
    world = whole
    done = _many_ended(world.store, world.clock, 3)

    html = world.page("/")

    # The active jobs only, the ended ones counted on their tabs
    assert f'data-job="{world.ids.running}"' in html and f'data-job="{done[0]}"' not in html
    assert f'data-job="{world.ids.cancelled}"' not in html
    tabs = re.findall(
        r'<a href="([^"]*)"( aria-current="true")?>(\w+) <small>([\d,]+)</small>', html
    )
    shown = {label: (url, int(number), bool(chosen)) for url, chosen, label, number in tabs}
    assert shown["active"][1:] == (2, True) and shown["done"][1:] == (3, False)
    assert shown["cancelled"][1] == 1 and shown["all"][1] == 6
    done_page = world.page(shown["done"][0].replace("&amp;", "&"))
    assert all(f'data-job="{job_id}"' in done_page for job_id in done)
    assert f'data-job="{world.ids.running}"' not in done_page
    assert [job["job_id"] for job in world.client.get("/api/status?state=done").json()] == [
        *reversed(done)
    ]


def test_the_jobs_page_pages_fifty_at_a_time_and_reads_only_its_page(whole: World):
    world = whole
    done = _many_ended(world.store, world.clock, 120)
    newest_first = [*reversed(done)]

    # When the done tab's pages are read, each a refresh of its own
    world.clock.advance(5)
    world.records.calls = 0
    first = world.page("/?state=done")
    reads_of_a_page = world.records.calls
    world.clock.advance(5)
    third = world.page(_link(first, "last"))

    # Then each page holds 50 jobs, newest first, and links to the others
    assert _listed(first) == newest_first[:50] and "jobs 1-50 of 120" in first
    assert _listed(third) == newest_first[100:] and "jobs 101-120 of 120" in third
    assert _link(first, "next") == "/?state=done&page=1" and _link(third, "first")
    second = world.page(_link(third, "previous"))
    assert _listed(second) == newest_first[50:100]
    # and a page costs what 50 jobs cost, not 120: a page of 20 costs less
    world.clock.advance(5)
    world.records.calls = 0
    world.page(_link(first, "last"))
    assert world.records.calls < reads_of_a_page
    assert "no job list" in world.page("/?state=sideways", status=400)
    assert "page must be a whole number" in world.page("/?page=-1", status=400)
    beyond = world.page("/?state=done&page=9")
    assert "No jobs on this page" in beyond


def _listed(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)">', html)


def _link(html: str, label: str) -> str:
    found = re.search(rf'<a href="([^"]+)" class="page-{label}">', html)
    assert found, f"no {label} link"
    return found.group(1).replace("&amp;", "&")


def test_the_poison_page_reads_a_page_of_jobs_with_the_jobs_pages_tabs(whole: World):
    world = whole
    _many_ended(world.store, world.clock, 120)

    # When the poison page is read, then its done tab
    world.records.calls = 0
    html = world.page("/poison")
    reads_of_a_page = world.records.calls
    world.clock.advance(5)
    world.records.calls = 0
    done_page = world.page("/poison?state=done")
    reads_of_done_page = world.records.calls
    world.records.calls = 0
    read_report(world.store, listing=Listing(states=("done",)))
    reads_of_every_done_job = world.records.calls

    # Then the active jobs' poison is listed, with the jobs page's tabs pointing here
    assert f">{world.ids.running}</a>" in html and f"chunk #{POISONED}" in html
    tabs = dict(re.findall(r'<a href="([^"]*)"[^>]*>(\w+) <small>', html)[::-1])
    assert "/poison?state=done" in tabs and "/poison?state=failed" in tabs
    # and a tab of 120 ended jobs reads a page of them (50), not every job
    assert "Nothing is poisoned among the done jobs on this page" in done_page
    assert _link(done_page, "next") == "/poison?state=done&page=1"
    assert reads_of_a_page < reads_of_done_page < 0.6 * reads_of_every_done_job
    assert "no job list" in world.page("/poison?state=sideways", status=400)


def test_the_pages_say_what_runner_status_says(whole: World):
    world = whole
    # The JSON route is `runner status --json`, from the same snapshot
    status = to_json(read_report(world.store))
    assert world.client.get("/api/status").json() == status
    for job_id in (world.ids.running, world.ids.paused):
        (one,) = to_json(read_report(world.store, job_id))
        assert world.client.get(f"/api/status/{job_id}").json() == one

    # and the jobs page shows status's counts for each job
    html = world.page("/")
    for job in status:
        if job["state"] == "unreadable" or job["job_id"] not in vars(world.ids).values():
            continue
        chunks = job["chunks"]
        cells = _cells(_row(html, job["job_id"]))
        assert cells[3] == f"{chunks['done']}/{chunks['total']}"
        assert cells[5] == str(chunks["running"])
        assert cells[7:9] == [str(chunks["failed"]), str(chunks["poisoned"])]


def test_a_job_page_shows_its_state_running_failed_and_poisoned_chunks_and_workers(world: World):
    html = world.page(f"/jobs/{world.ids.running}")

    assert "running 1  waiting 292  failed 2  poisoned 1" in html
    assert f"#{RUNNING}" in html and "40% (40/100)" in html
    assert "ValueError: row 5" in html and "RuntimeError: always fails" in html
    assert world.ids.worker in html
    # the chunk table: chunks 0-49, each with its state, attempts and last error
    rows = re.findall(r'<tr id="chunk-(\d+)" class="(\w+)">', html)
    assert [int(index) for index, _ in rows] == list(range(50))
    states = dict((int(index), state) for index, state in rows)
    assert states[0] == "done" and states[RUNNING] == "running" and states[POISONED] == "poisoned"
    assert "read in 2 requests" in html  # chunks 0-49 are in shards 0 and 1


def test_paused_and_cancelled_job_pages_say_so(world: World):
    assert '<span class="state paused">paused</span>' in world.page(f"/jobs/{world.ids.paused}")
    cancelled = world.page(f"/jobs/{world.ids.cancelled}")
    assert '<span class="state cancelled">cancelled</span>' in cancelled
    assert "wrong input" in cancelled and "cancelled 10" in cancelled


def test_a_jobs_chunks_page_by_index(world: World):
    job = f"/jobs/{world.ids.running}"

    second = world.page(f"{job}?page=1")
    assert re.findall(r'<tr id="chunk-(\d+)"', second) == [str(i) for i in range(50, 100)]
    assert 'class="page-first"' in second and 'href="/jobs/' in second
    last = world.page(f"{job}?chunk=299&size=100")
    assert re.findall(r'<tr id="chunk-(\d+)"', last) == [str(i) for i in range(200, 300)]
    assert '<span class="off">next</span>' in last and '<span class="off">last</span>' in last
    beyond = world.page(f"{job}?page=40")
    assert "No chunk recorded in this range." in beyond
    assert f'href="/jobs/{world.ids.running}?page=5"' in beyond  # previous: the last page


def test_a_jobs_chunks_filtered_by_state_page_with_a_cursor(world: World):
    job = f"/jobs/{world.ids.running}"

    first = world.page(f"{job}?state=retrying&size=1")
    assert re.findall(r'<tr id="chunk-(\d+)"', first) == [str(RETRYING[0])]
    assert "next try in 36s" in first
    second = world.page(_next(first))
    assert re.findall(r'<tr id="chunk-(\d+)"', second) == [str(RETRYING[1])]
    # the page filled at the end of shard 1: the one after it looks in the shards left
    third = world.page(_next(second))
    assert "No chunk retrying here." in third and '<span class="off">next</span>' in third
    assert 'class="page-first"' in third
    poisoned = world.page(f"{job}?state=poisoned")
    assert re.findall(r'<tr id="chunk-(\d+)"', poisoned) == [str(POISONED)]
    assert "No chunk waiting here." not in world.page(f"{job}?state=waiting")


def _next(html: str) -> str:
    found = re.search(r'href="([^"]*)" class="page-next"', html)
    assert found, "no next page"
    return found.group(1).replace("&amp;", "&")


#: Paging queries a job page does not understand. One test goes through them all: a
#: store populated per query cost 6 s each on a loaded Azurite, for one answer each.
NOT_UNDERSTOOD = ["size=0", "size=501", "size=x", "page=-1", "state=bogus", "state=done&after=zz"]


def test_paging_parameters_not_understood_are_400(world: World):
    for query in NOT_UNDERSTOOD:
        html = world.page(f"/jobs/{world.ids.running}?{query}", status=400)
        assert '<p class="problem">' in html, query


def test_an_unknown_job_is_404(world: World):
    assert "no job" in world.page("/jobs/no-such-job", status=404)
    answer = world.client.get("/api/status/no-such-job")
    assert answer.status_code == 404 and "no job" in answer.json()["error"]


def test_the_workers_page_shows_each_workers_heartbeat(whole: World):
    world = whole
    html = world.page("/workers")

    row = re.search(rf"{re.escape(world.ids.worker)}.*?</tr>", html, re.S)
    assert row, html
    assert "serving" in row.group(0) and world.ids.queue in row.group(0)
    assert "1/2" in row.group(0) and "dash-host pid 4242" in row.group(0)


def test_the_workers_page_reads_no_job(whole: World):
    world = whole
    world.records.calls = 0
    world.page("/")
    reads_of_the_jobs_page = world.records.calls
    world.clock.advance(5)
    world.records.calls = 0

    world.page("/workers")

    # Then the heartbeats and the catalogue's columns are read, no job in full
    assert world.records.calls <= 3 < reads_of_the_jobs_page


def test_the_poison_page_shows_what_poison_list_shows(whole: World):
    world = whole
    html = world.page("/poison")

    listed = poisoned_chunks(world.store, world.ids.running)
    assert [task.index for task in listed] == [POISONED]
    section = html[html.index(f">{world.ids.running}</a>") :]
    assert f"chunk #{POISONED}" in section and "after 3 attempt(s)" in section
    assert "RuntimeError: always fails" in section and "traceback" in section
    # A payload is JSON, as runner report shows it, not a Python repr
    job_page = world.page(f"/jobs/{world.ids.running}")
    assert "{&#34;i&#34;: 0}" in job_page or '{"i": 0}' in job_page
    for url in ["/", "/poison", "/poison?fragment=1"]:
        _shown_as_text(world.page(url), url)
    assert ESCAPED_SCRIPT in html


def test_user_data_is_shown_as_text_never_as_markup(world: World):
    job = f"/jobs/{world.ids.running}"
    for url in [job, f"{job}?state=retrying", f"{job}?state=poisoned", f"{job}?fragment=1"]:
        _shown_as_text(world.page(url), url)
    assert ESCAPED_SCRIPT in world.page(job)  # the payload of chunk 9, and the errors


def _shown_as_text(html: str, url: str) -> None:
    assert SCRIPT not in html, url
    assert "<script" not in html.replace('<script src="/static/dashboard.js" defer>', ""), url


def test_no_page_shows_a_secret_of_the_storage_location(
    world: World, backend: Backend, request: pytest.FixtureRequest
):
    secrets = []
    if backend.name == "azurite":
        connection = request.getfixturevalue("azurite").connection_string
        secrets = [part.split("=", 1)[1] for part in connection.split(";") if "Key=" in part]
        assert secrets and all(secrets)
    job = f"/jobs/{world.ids.running}"
    urls = [job, f"{job}?state=poisoned", f"/api/status/{world.ids.running}", "/jobs/nothing"]
    for url in urls:
        text = world.client.get(url).text
        assert not any(secret in text for secret in secrets), url
    assert backend.storage.description in world.page(job)


def test_a_fragment_is_the_live_part_of_its_page(whole: World):
    world = whole
    page = world.page("/")
    fragment = world.page("/?fragment=1")

    assert '<main id="live" data-refresh-seconds="2.0">' in page
    assert "<html" not in fragment and "<main" not in fragment
    assert fragment.strip() in page
    for url in ["/workers", "/poison", f"/jobs/{world.ids.running}"]:
        assert "<html" not in world.page(f"{url}?fragment=1")


def test_assets_are_served_from_the_package(world: World):
    script = world.client.get("/static/dashboard.js")
    style = world.client.get("/static/dashboard.css")

    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "fragment" in script.text
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")


def test_every_answer_carries_the_security_headers(world: World):
    job_id = world.ids.running
    for url in [f"/jobs/{job_id}", "/static/dashboard.css", "/nothing", f"/api/status/{job_id}"]:
        answer = world.client.get(url)
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers[name] == value, (url, name)


def test_a_host_name_not_ours_is_refused(world: World, backend: Backend):
    guarded = World(backend.storage, None, ("127.0.0.1", "localhost"), world.populated)
    job = f"/jobs/{guarded.ids.running}"
    assert guarded.client.get(job, headers={"host": "evil.example"}).status_code == 400
    assert guarded.client.get(job, headers={"host": "127.0.0.1:8321"}).status_code == 200


def test_long_lists_are_cut_and_point_to_the_chunk_table(world: World, monkeypatch):
    monkeypatch.setattr("runner.cli.dashboard.app.MAX_TASK_ROWS", 1)
    html = world.page(f"/jobs/{world.ids.running}")
    assert "and 1 more: filter the chunks below." in html


# --------------------------------------------------------------------------- sharing


def test_viewers_within_a_refresh_share_one_read_of_the_store(world: World):
    job = f"/jobs/{world.ids.running}"
    world.page(job)
    before = world.records.calls

    # Many viewers, pages and fragments, within the refresh interval: no read at all
    for _ in range(20):
        world.page(f"{job}?fragment=1")
        world.page(job)
        world.client.get(f"/api/status/{world.ids.running}")
    assert world.records.calls == before

    # Once the interval has passed, one read for all of them
    world.clock.advance(2)
    world.page(job)
    one_read = world.records.calls - before
    for _ in range(20):
        world.page(f"{job}?fragment=1")
    assert world.records.calls - before == one_read > 0


def test_a_failed_refresh_keeps_the_last_page_and_says_why(world: World):
    world.page(f"/jobs/{world.ids.running}")
    world.records.failing = True
    world.clock.advance(2)

    html = world.page(f"/jobs/{world.ids.running}?fragment=1")

    assert "last refresh failed: the store is out of reach" in html
    assert world.ids.running in html
    # a page never read before has nothing to fall back on
    assert "out of reach" in world.page(f"/jobs/{world.ids.paused}", status=503)
    world.records.failing = False


def test_rates_and_etas_come_from_the_refreshes(fresh: World):
    world = fresh
    job = world.ids.running
    world.page(f"/jobs/{job}")
    task = world.store.get_task(job, "chunk", 10)
    world.store.count_chunk(task, {"state": "done", "attempt": 1}, {"result": 0}, "done")
    world.clock.advance(4)

    rate = re.search(r'<span class="rate">(.*?)</span>', world.page(f"/jobs/{job}"))

    assert rate and re.fullmatch(r"0\.\d\d chunks/s  ETA \d+m\d\ds", rate.group(1)), rate


def test_the_first_load_has_a_rate_an_eta_and_when_the_job_last_moved(world: World):
    # Given the running job: 4 chunks done and one at 40 % when it was written, 4 s ago
    job = world.ids.running

    # When its page and the jobs page are first loaded (no refresh before)
    html = world.page(f"/jobs/{job}")
    listed = _cells(_row(world.page("/"), job))

    # Then each has a rate and ETA from the store (4.4 chunks in 4 s, 295.6 left)
    rate = re.search(r'<span class="rate">(.*?)</span>', html)
    assert rate and rate.group(1) == "1.10 chunks/s  ETA 4m29s"
    assert listed[4] == "1.10 chunks/s ETA 4m29s"
    # and says when the job last moved, apart from when its record was written
    assert re.search(r"<dt>moved</dt><dd[^>]*>4s ago</dd>", html)
    assert "<dt>record updated</dt>" in html
    assert listed[9] == "4s ago"


# --------------------------------------------------------------------------- actions


def _unchanged(world: World, job_id: str, before: JobRecord) -> None:
    after = world.job(job_id)
    assert (after.etag, after.properties) == (before.etag, before.properties)


def test_read_only_refuses_every_action_and_changes_nothing(world: World):
    job_id = world.ids.running
    before = world.job(job_id)

    for action in ("cancel", "pause", "resume", "redrive"):
        answer = world.client.post(f"/jobs/{job_id}/{action}", data={"token": TOKEN})
        assert answer.status_code == 403 and "--allow-actions" in answer.text

    _unchanged(world, job_id, before)
    page = world.page(f"/jobs/{job_id}")
    assert 'id="actions"' not in page and "read-only" in page


#: Tokens that are not the dashboard's (None: no token field at all), tried in one test.
WRONG_TOKENS = [None, "", "wrong", TOKEN + "x", TOKEN.upper(), "é" * 5]


def test_an_action_without_the_token_is_403_and_changes_nothing(acting: World):
    job_id = acting.ids.running
    before = acting.job(job_id)

    for token in WRONG_TOKENS:
        data = {} if token is None else {"token": token}
        for action in ("cancel", "pause", "redrive"):
            answer = acting.client.post(
                f"/jobs/{job_id}/{action}", data=data, follow_redirects=False
            )
            assert answer.status_code == 403, (token, answer.text)
            assert "token is missing or wrong" in answer.text

    _unchanged(acting, job_id, before)
    assert acting.store.get_task(job_id, "chunk", POISONED).state == "poisoned"


def test_pause_resume_redrive_and_cancel_with_the_token(acting: World):
    job_id = acting.ids.running
    page = acting.page(f"/jobs/{job_id}")
    assert 'id="actions"' in page and "actions on" in page
    post = acting.client.post

    # Pause (the token in the form), draining
    answer = post(
        f"/jobs/{job_id}/pause", data={"token": TOKEN, "drain": "1"}, follow_redirects=False
    )
    assert answer.status_code == 303 and answer.headers["location"] == f"/jobs/{job_id}?did=pause"
    paused = acting.job(job_id)
    assert paused.paused_on is not None and paused.drain
    shown = acting.page(answer.headers["location"])
    assert "Paused." in shown and '<span class="state paused">paused (draining)</span>' in shown

    # Resume (the token in a header)
    answer = post(f"/jobs/{job_id}/resume", headers={"x-runner-token": TOKEN})
    assert answer.status_code == 200 and "Resumed." in answer.text
    assert acting.job(job_id).paused_on is None

    # Redrive: the poisoned chunk waits again
    answer = post(f"/jobs/{job_id}/redrive", data={"token": TOKEN})
    assert "Redrove 1 poisoned task(s)." in answer.text
    assert acting.store.get_task(job_id, "chunk", POISONED).state == "waiting"

    # Cancel, with a reason
    answer = post(f"/jobs/{job_id}/cancel", data={"token": TOKEN, "reason": "bad <b>input</b>"})
    cancelled = acting.job(job_id)
    assert cancelled.state == "cancelled" and cancelled.cancel_reason == "bad <b>input</b>"
    assert "Cancelled." in answer.text and "bad &lt;b&gt;input&lt;/b&gt;" in answer.text

    # A job that has ended cannot be paused: 409, saying why
    refused = post(f"/jobs/{job_id}/pause", data={"token": TOKEN})
    assert refused.status_code == 409 and "has ended (cancelled)" in refused.text


def _buttons(html: str) -> list[str]:
    return re.findall(r'<button type="submit"[^>]*value="(\w+)"', html)


def test_a_job_page_offers_only_the_actions_that_apply(acting: World):
    ids = acting.ids
    # running, a chunk poisoned: no Resume
    assert _buttons(acting.page(f"/jobs/{ids.running}")) == ["pause", "redrive", "cancel"]
    # paused, nothing poisoned: no Pause, no Redrive
    assert _buttons(acting.page(f"/jobs/{ids.paused}")) == ["resume", "cancel"]
    # cancelled: nothing applies, and the page says so
    cancelled = acting.page(f"/jobs/{ids.cancelled}")
    assert _buttons(cancelled) == [] and 'id="actions"' not in cancelled
    assert "No action applies: the job has ended (cancelled)." in cancelled


def test_a_cancel_without_a_reason_says_it_came_from_the_dashboard(acting: World):
    acting.client.post(f"/jobs/{acting.ids.paused}/cancel", data={"token": TOKEN})
    assert acting.job(acting.ids.paused).cancel_reason == "cancelled from the dashboard"


def test_an_action_page_the_store_changed_is_read_again_at_once(acting: World):
    job_id = acting.ids.paused
    assert '<span class="state paused">' in acting.page(f"/jobs/{job_id}")

    shown = acting.client.post(f"/jobs/{job_id}/resume", data={"token": TOKEN}).text

    assert '<span class="state paused">' not in shown


def test_an_unknown_action_or_job_and_an_oversized_form(acting: World):
    job_id = acting.ids.running
    answer = acting.client.post(f"/jobs/{job_id}/delete", data={"token": TOKEN})
    assert answer.status_code == 404 and "no action &#39;delete&#39;" in answer.text
    answer = acting.client.post("/jobs/no-such-job/pause", data={"token": TOKEN})
    assert answer.status_code == 404 and "no job" in answer.text
    answer = acting.client.post(
        f"/jobs/{job_id}/pause", data={"token": TOKEN, "reason": "x" * MAX_FORM_BYTES}
    )
    assert answer.status_code == 413
    assert acting.job(job_id).paused_on is None
    assert acting.client.get(f"/jobs/{job_id}/pause").status_code == 405


def test_what_the_page_says_after_an_action_comes_only_from_known_words(acting: World):
    job = f"/jobs/{acting.ids.running}"
    said = acting.page(f"{job}?did=redrive&count=3&unreadable=2")
    assert "Redrove 3 poisoned task(s); 2 record(s) cannot be read" in said
    assert "Redrove 0 poisoned task(s)." in acting.page(f"{job}?did=redrive&count=x")
    assert 'class="said"' not in acting.page(f"{job}?did=<b>hi</b>")


def test_the_json_is_what_the_runner_status_command_prints(tmp_path: Path):
    # Given a store at rest (nothing running, no worker: nothing depends on the moment)
    storage = str(tmp_path / "store")
    with open_storage(storage) as opened:
        store = CheckpointStore(opened)
        job, _ = store.create_job("rest-1", "tests:Job", "rest", {})
        store.add_chunks("rest-1", 0, [0, 1, 2])
        store.update_job(job, state="running", total=3)
        task = store.get_task("rest-1", "chunk", 1)
        store.count_chunk(task, {"state": "done", "attempt": 1}, {"result": 1}, "done")
        manage.pause("rest-1", storage=opened)
        client = TestClient(build_app(store, DashboardSettings(opened.description)))

        # When the command and the dashboard are asked
        command = run_runner(tmp_path, "status", "--json", "--storage", storage)
        one = run_runner(tmp_path, "status", "rest-1", "--json", "--storage", storage)

        # Then they say the same
        assert command.returncode == 0, command.stderr
        assert client.get("/api/status").json() == json.loads(command.stdout)
        assert client.get("/api/status/rest-1").json() == json.loads(one.stdout)


def test_a_cancelled_jobs_chunks_left_waiting_say_cancelled(world: World):
    html = world.page(f"/jobs/{world.ids.cancelled}")

    assert html.count('title="dropped unrun: the job was cancelled">cancelled</span>') == 10
    assert "Chunks 0 to 9 " in html


def test_a_pipeline_page_shows_its_steps_in_order_linked_and_acts_on_them(acting: World):
    # Given a pipeline: its first step done, its second failed, its third blocked
    pipeline, queue, store = f"p-{acting.ids.queue}", acting.ids.queue, acting.store
    ids = [f"{pipeline}-{name}" for name in ("stage", "transform", "verify")]
    for before, job_id in zip([None, *ids], ids, strict=False):
        after = [before] if before else []
        store.create_job(job_id, "tests:Job", queue, {}, after=after, pipeline=pipeline)
        store.pipeline_steps.note(pipeline, job_id)
    store.change_job(ids[0], lambda job: {"state": "done", "total": 0})
    store.change_job(ids[1], lambda job: {"state": "failed", "error": "2 chunk(s) poisoned"})

    # Then its page lists them in order, each linked, with what it runs after and why
    html = acting.page(f"/pipelines/{pipeline}")
    assert f"{pipeline} <span" in html and "1/3 steps done" in html
    rows = [_cells(_row(html, job_id)) for job_id in ids]
    assert [(row[1].split()[0], row[2]) for row in rows] == [
        ("stage", "done"),
        ("transform", "failed"),
        ("verify", "blocked"),
    ]
    assert all(f'href="/jobs/{job_id}"' in html for job_id in ids)
    assert "blocked: step transform failed (2 chunk(s) poisoned)" in rows[2][5]
    # and a step's page and its row in the jobs list link the pipeline (the list of the
    # waiting ones: this module's Azurite holds every test's active jobs, each read in
    # full by a list of them all, which took 50 s of a loaded run)
    link = f'<a href="/pipelines/{pipeline}" class="pipeline">{pipeline}</a>'
    listed = _row(acting.page("/?state=waiting"), ids[2])
    assert link in acting.page(f"/jobs/{ids[2]}") and link in listed
    # (where a step not started says so, as on the pipeline's page, not "0% 0/0+")
    assert _cells(listed)[1:4] == ["blocked", "not started", "-"]
    assert _buttons(html) == ["pause", "redrive", "cancel"]
    # (with the token only, and for a pipeline there is)
    assert acting.client.post(f"/pipelines/{pipeline}/pause").status_code == 403
    assert acting.client.post("/pipelines/nope/pause", data={"token": TOKEN}).status_code == 404

    # When the steps under way are paused and resumed, its failed steps redriven, then
    # the rest cancelled, from the page
    answer = acting.client.post(f"/pipelines/{pipeline}/pause", data={"token": TOKEN})
    assert "Paused 1 step(s)." in answer.text and store.get_job(ids[2]).paused_on
    answer = acting.client.post(f"/pipelines/{pipeline}/resume", data={"token": TOKEN})
    assert "Resumed 1 step(s)." in answer.text and not store.get_job(ids[2]).paused_on
    answer = acting.client.post(f"/pipelines/{pipeline}/redrive", data={"token": TOKEN})
    assert "Redrove 1 failed step(s)." in answer.text
    assert store.get_job(ids[1]).state == "planning"
    answer = acting.client.post(f"/pipelines/{pipeline}/cancel", data={"token": TOKEN})
    assert "Cancelled 2 step(s)." in answer.text
    assert [store.get_job(job_id).state for job_id in ids] == ["done", *["cancelled"] * 2]
    # An unknown pipeline is a page saying so; a refresh that fails keeps the last read
    assert "no pipeline &#39;nope&#39;" in acting.page("/pipelines/nope", 404)
    acting.clock.advance(3)
    acting.records.failing = True
    stale = acting.page(f"/pipelines/{pipeline}")
    acting.records.failing = False
    assert "last refresh failed: the store is out of reach" in stale


def test_a_job_whose_record_cannot_be_read_has_a_page_saying_why(acting: World):
    job_id = acting.ids.paused
    acting.store.storage.records.merge(
        layout.JOBS_TABLE, layout.JOBS_PARTITION, job_id, {"state": "bogus"}, etag=ANY_ETAG
    )

    html = acting.page(f"/jobs/{job_id}")

    assert '<span class="state unreadable">unreadable</span>' in html
    assert "state &#39;bogus&#39; is not one of" in html
    assert 'id="actions"' not in html and 'id="chunk-table"' not in html
