"""The dashboard's leases page (``/leases``, runner/cli/dashboard/app.py) and the lease on a
job's page, through Starlette's TestClient on each backend: the rows ``runner lease``
shows, read the same way (:func:`runner.cli.lease_view.read_leases`), an unreadable row
said so, a store out of reach shown stale."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from starlette.testclient import TestClient

from checkpoint import layout
from checkpoint.backends import open_storage
from checkpoint.clock import FakeClock
from checkpoint.lease_book import LeaseBook
from checkpoint.retries import STANDALONE, Budget
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from jobs.job import ChunkedJob
from runner.cli.dashboard.app import DashboardSettings, build_app
from runner.cli.lease_view import lease_line, read_leases
from runner.worker.leases.learned import pin_lease
from runner.worker.leases.sizes import LeaseSizes
from tests.backends import Backend
from tests.runner.cli.dashboard.test_app import FlakyRecords


def _types(count: int) -> list[type[ChunkedJob]]:
    """Job classes of types of their own (Azurite's leases table is shared)."""
    names = [f"Paged{uuid.uuid4().hex[:10]}" for _ in range(count)]
    return [type(name, (ChunkedJob,), {"queue": name.lower()}) for name in names]


def _cells(html: str, job_type: str) -> list[str]:
    found = re.search(rf'<tr data-type="{re.escape(job_type)}">(.*?)</tr>', html, re.S)
    assert found, f"no row of {job_type}"
    cells = re.findall(r"<td.*?</td>", found.group(1), re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", cell).split()) for cell in cells]


def test_the_leases_page_shows_each_types_lease_as_runner_lease_does(backend: Backend):
    # Given a type learned by its worker (a late renewal, a lost lease), one pinned,
    # and one whose row is garbled
    clock = FakeClock(datetime.now(UTC))
    store = CheckpointStore(backend.storage, clock)
    store.ensure()
    learned, pinned, garbled = _types(3)
    book = LeaseBook(backend.storage.records)
    sizes = LeaseSizes(book, [learned], clock)
    sizes.renewed(learned.job_type(), 8.0)
    sizes.lost(learned.job_type(), 10)
    sizes.exchange()
    pin_lease(book, pinned.job_type(), 90, Budget(STANDALONE, clock))
    where = (layout.LEASES_TABLE, layout.LEASES_PARTITION, garbled.job_type())
    backend.storage.records.upsert(*where, {"lease_seconds": "long"})
    job_id = f"paged-{uuid.uuid4().hex[:8]}"
    store.create_job(job_id, learned.job_type(), learned.queue, None)
    client = TestClient(build_app(store, DashboardSettings("test store"), clock.monotonic))

    # When the page is asked for, then each row says what runner lease says
    answer = client.get("/leases")
    assert answer.status_code == 200
    html = answer.text
    assert '<a href="/leases" aria-current="page">Leases</a>' in html
    assert _cells(html, learned.job_type()) == [
        learned.job_type(),
        "50 s learned",
        "10-600 s",
        "10 s",
        "1",
        "1",
    ]
    assert _cells(html, pinned.job_type())[1:3] == ["90 s pinned learned 10 s", "10-600 s"]
    assert _cells(html, pinned.job_type())[3] == "-"  # no renewal reported yet
    why = _cells(html, garbled.job_type())[1]
    assert why.startswith(f"unreadable learned lease of {garbled.job_type()}: no lateness")
    assert "within 15 s" in html
    shown = {lease.job_type: lease for lease in read_leases(store, clock.now())}
    assert lease_line(shown[learned.job_type()]).startswith(f"{learned.job_type()}  50 s")
    # ... the live fragment is the table alone, and the job's page names its lease
    fragment = client.get("/leases?fragment=1").text
    assert "<html" not in fragment and f'data-type="{pinned.job_type()}"' in fragment
    job_page = client.get(f"/jobs/{job_id}").text
    assert re.search(r"<dt>lease</dt><dd>50 s, learned \(<a href=\"/leases\">", job_page)


def test_no_lease_yet_says_so_and_a_store_out_of_reach_shows_the_last_read(tmp_path):
    with open_storage(str(tmp_path / "store")) as real:
        clock = FakeClock()
        records = FlakyRecords(real.records)
        storage = Storage(real.queues, records, real.blobs, real.description)
        store = CheckpointStore(storage, clock)
        store.ensure()
        client = TestClient(build_app(store, DashboardSettings("test store"), clock.monotonic))
        assert "No lease learned or pinned yet" in client.get("/leases").text
        # Once out of reach, past the refresh: the last good read, said stale
        records.failing = True
        clock.advance(5.0)
        html = client.get("/leases").text
        assert "No lease learned or pinned yet" in html
        assert "last refresh failed: the store is out of reach" in html
        assert "unreadable" not in html  # (a job-less page: nothing else to say)
