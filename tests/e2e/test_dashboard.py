"""The dashboard in a real browser (Debian's chromium through Playwright) against a live
run: real ``runner start`` worker processes on the embedded store, ``runner dashboard``
as a real process. The page shows the job progressing without reloading, a chunk
failing and then poisoned (its error, which holds a script, shown as text), and a
pause and a cancel made from the page take effect: the job record says so and the
workers take no more of its chunks.

Screenshots go to ``test-artifacts/dashboard/`` (git-ignored, kept by the run).
"""

from __future__ import annotations

import re
import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.lease_book import LeaseBook
from checkpoint.retries import STANDALONE, Budget
from checkpoint.store import CheckpointStore
from jobs.job import ChunkedJob
from runner.worker.leases.learned import pin_lease
from runner.worker.leases.sizes import LeaseSizes
from tests.e2e.dashboard import DashboardProcess
from tests.e2e.e2e_jobs import MARKUP
from tests.e2e.harness import Cluster
from tests.e2e.processes import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.timeout(180)]

ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
#: Debian's chromium as root in a container: no sandbox, no GPU, nothing fetched.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: A pause or a cancel reaches every worker within this (a job record at most 1 s old,
#: looked at every second, a checkpoint every item), on a loaded 2-core machine.
HOLD_SECONDS = 3.0
WAIT_MS = 45_000


def chromium() -> str:
    """Debian's chromium; missing, the test fails (``make chromium`` installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is missing: `make chromium` installs it", pytrace=False)
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    subject = Cluster("embedded", str(tmp_path / "store"), workdir, uuid.uuid4().hex[:8])
    try:
        yield subject
    finally:
        subject.close()


def _shot(page: Page, name: str, full_page: bool = True) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def _bar(page: Page, job_id: str) -> float:
    return float(page.locator(f'tr[data-job="{job_id}"] progress').get_attribute("value") or 0)


def _job_bar(page: Page) -> float:
    return float(page.locator(".bigbar progress").get_attribute("value") or 0)


def _buttons(page: Page) -> list[str]:
    return [b.get_attribute("value") or "" for b in page.locator("#actions button").all()]


def _note_error(message: ConsoleMessage, problems: list[str]) -> None:
    if message.type == "error":
        problems.append(f"console: {message.text}")


def _starts_after(cluster: Cluster, moment: float) -> list[dict[str, Any]]:
    return [event for event in cluster.events("start") if event["at"] > moment]


def test_a_live_run_is_seen_and_controlled_from_the_browser(browser: Browser, cluster: Cluster):
    # Given a job of 7 chunks of 30 s saying how far they got, whose chunk 2 always
    # fails (3 attempts), a dashboard with actions, and a worker running 8 chunks at a
    # time (so chunk 2's retries find a free slot at once)
    params = cluster.params(chunks=7, items=60, item_seconds=0.5, fail_chunk=2, say_progress=1)
    job_id = cluster.submit("Marked", params)
    dashboard = DashboardProcess(cluster.storage, "--allow-actions", "--refresh", "1")
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: _note_error(message, problems))
    try:
        page.goto(dashboard.url)
        expect(page.locator(f'tr[data-job="{job_id}"]')).to_be_visible()
        page.evaluate("window.notReloaded = true")
        cluster.start("Marked", "--concurrency", "8", burst=False)

        # Then the jobs page shows it progressing, refreshed in place
        page.wait_for_function(
            f"""() => {{
                const bar = document.querySelector('tr[data-job="{job_id}"] progress');
                return bar && Number(bar.value) > 0.05;
            }}""",
            timeout=WAIT_MS,
        )
        assert page.evaluate("window.notReloaded") is True
        assert _bar(page, job_id) > 0.05
        _shot(page, "jobs")

        # and the job's page, at its first load, a rate and ETA and when it last moved
        page.goto(f"{dashboard.url}jobs/{job_id}")
        expect(page.locator(".bigbar .rate")).to_contain_text(re.compile(r"chunks/s"))
        moved = page.locator("dt:text-is('moved') + dd")
        expect(moved).to_have_text(re.compile(r"^\d+s ago$"))
        page.evaluate("window.notReloaded = true")
        # then chunk 2 failing, then poisoned, its error as text
        poisoned = page.get_by_role("heading", name=re.compile(r"^Poisoned"))
        expect(poisoned).to_be_visible(timeout=WAIT_MS)
        assert len(cluster.events("fail", chunk=2)) == 3
        failures = page.locator("ul.failures").last
        expect(failures).to_contain_text(f"RuntimeError: {MARKUP} chunk 2 fails (attempt 3)")
        expect(page.locator("#chunk-2")).to_contain_text("poisoned")
        assert page.evaluate("window.notReloaded") is True  # it came by a live refresh
        assert "owned" not in page.title()
        _shot(page, "job-poisoned")
        _shot(page, "job-poisoned-top", full_page=False)

        # and only the actions that apply to a running job with a chunk poisoned
        assert _buttons(page) == ["pause", "redrive", "cancel"]

        # When it is paused from the page, with the token
        before_pause = _job_bar(page)
        page.fill("#token", dashboard.token or "")
        page.click("button[value=pause]")
        expect(page.locator("p.said")).to_have_text("Paused.")
        paused_at = time.time()
        # the chunks handed back keep their progress in the bar, and it offers Resume
        assert _job_bar(page) >= before_pause > 0
        assert _buttons(page) == ["resume", "redrive", "cancel"]

        # Then the job record says paused, the page too, and no chunk of it starts
        record = cluster.store.get_job(job_id)
        assert record.paused_on is not None and record.state == "running"
        expect(page.locator("h1 .state.paused")).to_be_visible()
        time.sleep(HOLD_SECONDS + 2)
        assert _starts_after(cluster, paused_at + HOLD_SECONDS) == []
        items = [e for e in cluster.events("item") if e["at"] > paused_at + HOLD_SECONDS]
        assert items == []
        _shot(page, "job-paused")

        # When it is cancelled from the page (the token kept for the tab, a reason given)
        expect(page.locator("#token")).to_have_value(dashboard.token or "")
        page.fill("input[name=reason]", "stopped from the browser test")
        page.once("dialog", lambda dialog: dialog.accept())
        before_cancel = _job_bar(page)
        page.click("button[value=cancel]")
        expect(page.locator("p.said")).to_have_text("Cancelled.")
        cancelled_at = time.time()
        assert _job_bar(page) >= before_cancel
        expect(page.locator("#actions-none")).to_contain_text("No action applies")
        assert _buttons(page) == []

        # Then the job record says cancelled, its waiting chunks are dropped unrun
        record = cluster.store.get_job(job_id)
        assert record.state == "cancelled"
        assert record.cancel_reason == "stopped from the browser test"
        expect(page.locator("h1 .state.cancelled")).to_be_visible()
        cluster.wait_until(
            lambda: cluster.queues.approximate_length(cluster.queue("marked")) == 0,
            "the cancelled job's messages to be deleted",
        )
        assert _starts_after(cluster, min(paused_at, cancelled_at) + HOLD_SECONDS) == []
        assert cluster.events("finalize_start") == []
        _shot(page, "job-cancelled")
        assert problems == []
    finally:
        page.close()
        code, err = dashboard.stop()
    assert code == 0, err


class Sized(ChunkedJob):
    """A job type whose lease its workers size (it sets no ``lease_seconds``)."""

    queue = "sized"


class Pinned(Sized):
    queue = "pinned"


class Garbled(Sized):
    queue = "garbled"


def test_the_leases_page_shows_each_types_lease_in_the_browser(browser: Browser, tmp_path: Path):
    # Given a store where one type's workers learned a lease (a late renewal, a lost
    # lease), another's is pinned by hand and a third's row is garbled
    storage = str(tmp_path / "store")
    with open_storage(storage) as opened:
        clock = FakeClock(datetime.now(UTC))
        CheckpointStore(opened, clock).ensure()
        book = LeaseBook(opened.records)
        sizes = LeaseSizes(book, [Sized], clock)
        for late in (0.02,) * 40 + (8.0,):
            sizes.renewed(Sized.job_type(), late)
        sizes.lost(Sized.job_type(), 10)
        sizes.exchange()
        pin_lease(book, Pinned.job_type(), 120, Budget(STANDALONE, clock))
        where = (layout.LEASES_TABLE, layout.LEASES_PARTITION, Garbled.job_type())
        opened.records.upsert(*where, {"lease_seconds": 30})
        job_id = f"sized-{uuid.uuid4().hex[:8]}"
        CheckpointStore(opened, clock).create_job(job_id, Sized.job_type(), Sized.queue, None)
    dashboard = DashboardProcess(storage, "--refresh", "1")
    page = browser.new_page(viewport={"width": 1280, "height": 600})
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: _note_error(message, problems))
    try:
        # When the leases page is opened from the nav
        page.goto(dashboard.url)
        page.click("nav >> text=Leases")

        # Then each type's row shows its lease, and the garbled one why it is unreadable
        learned = page.locator(f'tr[data-type="{Sized.job_type()}"]')
        expect(learned.locator("td").nth(1)).to_have_text(re.compile(r"^\s*50 s\s+learned\s*$"))
        expect(learned.locator("td").nth(3)).to_have_text("10 s")
        expect(learned.locator("td").nth(4)).to_have_text("41")
        pinned = page.locator(f'tr[data-type="{Pinned.job_type()}"]')
        expect(pinned.locator("td").nth(1)).to_contain_text("120 s")
        expect(pinned.locator(".state.pinned")).to_be_visible()
        garbled = page.locator(f'tr[data-type="{Garbled.job_type()}"]')
        expect(garbled).to_contain_text("no lateness, lost, low_seconds, high_seconds")
        expect(page.locator("p.hint")).to_contain_text("reaches every worker within 15 s")
        page.evaluate("window.notReloaded = true")
        page.wait_for_timeout(2500)  # two refreshes, swapped in place
        assert page.evaluate("window.notReloaded") is True
        expect(learned.locator("td").nth(1)).to_contain_text("50 s")
        _shot(page, "leases")
        # and a job of the learned type names its lease, linked to the page
        page.goto(f"{dashboard.url}jobs/{job_id}")
        lease = page.locator("dt:text-is('lease') + dd")
        expect(lease).to_have_text("50 s, learned (leases)")
        _shot(page, "job-lease-top", full_page=False)
        assert problems == []
    finally:
        page.close()
        code, err = dashboard.stop()
    assert code == 0, err
