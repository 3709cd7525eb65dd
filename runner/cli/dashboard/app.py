"""The dashboard's routes: pages of the store's status, their live fragments, the
status as JSON, and the actions.

- ``GET /``: the active jobs, newest first, 50 a page: state, progress, rate and ETA,
  failures; tabs by state with their counts (``state``: ``active``, ``all`` or a job
  state; ``page``);
- ``GET /jobs/{job_id}``: one job: counts, running and failed chunks, its workers, and a
  page of its chunks (``page``, ``size``, ``chunk``; or ``state`` and ``after``);
- ``GET /pipelines/{pipeline_id}``: a pipeline's steps in the order they run, each with
  its state, progress and what it waits on, linked to its page (:mod:`.pipeline_page`);
- ``GET /workers``: the workers of the last hour, from their heartbeats;
- ``GET /leases``: each job type's lease as its workers size it (``runner lease``);
- ``GET /poison``: the poisoned tasks of a tab and page of the jobs list (``?state=``,
  ``?page=``, as ``/``), as ``runner poison list`` shows them, and the submissions the
  intake queues rejected, as ``runner poison list`` with no JOB_ID shows them;
- ``GET /api/status[/{job_id}]``: ``runner status [JOB_ID] --json``, from the same snapshot
  (the list takes the jobs page's ``state`` and ``page``);
- ``POST /jobs/{job_id}/{action}``: cancel, pause, resume, redrive (:mod:`.actions`);
  ``POST /pipelines/{pipeline_id}/{action}``: each on every step it applies to.

Each page with ``?fragment=1`` is only its live part, which the page's script fetches
every refresh and swaps in. Every page reads the one snapshot of :mod:`.shared` for its
key, so viewers share reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from checkpoint.errors import ConfigurationError, JobNotFound, RunnerError
from checkpoint.store import CheckpointStore
from runner.cli.dashboard.actions import (
    ACTIONS,
    TOKEN_FIELD,
    TOKEN_HEADER,
    Done,
    act,
    actions_for,
    said,
    token_matches,
)
from runner.cli.dashboard.chunk_table import ChunkQuery, ChunkTable, read_chunk_table, stale_table
from runner.cli.dashboard.job_list import DEFAULT_JOBS, JobsQuery, pages, shown_range, tabs
from runner.cli.dashboard.pipeline_page import (
    PIPELINE_ACTIONS,
    PipelineFrame,
    act_on_pipeline,
    pipeline_actions,
    pipeline_said,
    read_pipeline,
    stale_pipeline,
)
from runner.cli.dashboard.shared import DEFAULT_KEYS, SharedReads
from runner.cli.dashboard.views import STATIC, environment
from runner.cli.json_form import to_json
from runner.cli.lease_view import read_leases
from runner.cli.rejections import RejectedQueue, read_rejections
from runner.cli.selection import Listing
from runner.cli.snapshot import read_snapshot
from runner.cli.status_types import JobStatus, LeaseStatus, WatchFrame
from runner.cli.watch import DEFAULT_INTERVAL_SECONDS, Rates
from runner.worker.leases.sizes import READ_EVERY_SECONDS
from runner.worker.lru_map import LruMap

#: The largest action form read (a token, a reason and a flag fit many times over).
MAX_FORM_BYTES = 16 * 1024
#: What the workers page reads of the jobs: none (the catalogue's columns, for the counts).
NO_JOBS = Listing(limit=0)
#: A frame's key: one job (its id), or a list of jobs (None and the listing).
FrameKey = tuple[str | None, Listing]
#: Rows of a job's running, failed and poisoned tasks shown at most from the snapshot
#: (the chunk table pages through all of them).
MAX_TASK_ROWS = 50
#: What every answer says to the browser: no script, style or frame from elsewhere, no
#: inline script, forms post only here, nothing sniffed, no referrer sent.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


@dataclass(frozen=True)
class DashboardSettings:
    """How a dashboard serves.

    Attributes:
        storage: the store's description, secrets hidden (``Storage.description``).
        refresh_seconds: how often pages refresh, and how long a read is shared.
        token: the actions' token; None: read-only, every action answers 403.
        allowed_hosts: the Host headers answered (others get 400), so a page of another
            site cannot reach a dashboard on loopback through a name it rebinds there.
    """

    storage: str
    refresh_seconds: float = DEFAULT_INTERVAL_SECONDS
    token: str | None = None
    allowed_hosts: tuple[str, ...] = ("*",)


def build_app(
    store: CheckpointStore,
    settings: DashboardSettings,
    monotonic: Callable[[], float] = time.monotonic,
) -> Starlette:
    """The dashboard of ``store`` as an ASGI application."""
    pages = Pages(store, settings, monotonic)
    routes = [
        Route("/", pages.jobs, name="jobs"),
        Route("/jobs/{job_id}", pages.job, name="job"),
        Route("/jobs/{job_id}/{action}", pages.action, methods=["POST"], name="action"),
        Route("/pipelines/{pipeline_id}", pages.pipeline, name="pipeline"),
        Route(
            "/pipelines/{pipeline_id}/{action}",
            pages.pipeline_action,
            methods=["POST"],
            name="pipeline_action",
        ),
        Route("/workers", pages.workers, name="workers"),
        Route("/leases", pages.leases, name="leases"),
        Route("/poison", pages.poison, name="poison"),
        Route("/api/status", pages.status_json, name="status"),
        Route("/api/status/{job_id}", pages.status_json, name="job_status"),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [
        Middleware(TrustedHostMiddleware, allowed_hosts=list(settings.allowed_hosts)),
        Middleware(SecurityHeaders),
    ]
    return Starlette(routes=routes, middleware=middleware)


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every answer."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, sending)


class Pages:
    """The endpoints, over one store, with reads shared between viewers."""

    def __init__(
        self, store: CheckpointStore, settings: DashboardSettings, monotonic: Callable[[], float]
    ):
        self.store = store
        self.settings = settings
        self._monotonic = monotonic
        self._templates = Jinja2Templates(env=environment())
        age = settings.refresh_seconds
        self.frames: SharedReads[FrameKey, WatchFrame] = SharedReads(
            self._read_frame, _stale_frame, age, monotonic
        )
        self.tables: SharedReads[tuple[str, ChunkQuery], ChunkTable] = SharedReads(
            self._read_table, stale_table, age, monotonic
        )
        self.rejected: SharedReads[None, RejectedView] = SharedReads(
            self._read_rejected, _stale_rejected, age, monotonic, keys=1
        )
        self.leases_read: SharedReads[None, LeasesView] = SharedReads(
            self._read_leases, _stale_leases, age, monotonic, keys=1
        )
        self.pipelines: SharedReads[str, PipelineFrame] = SharedReads(
            lambda pipeline: read_pipeline(store, pipeline), stale_pipeline, age, monotonic
        )
        self._rates: LruMap[FrameKey, Rates] = LruMap(DEFAULT_KEYS)

    # ----------------------------------------------------------------- reading

    def _read_frame(self, key: FrameKey) -> WatchFrame:
        """A snapshot (a list of jobs, or one) with each job's rate, as ``--watch`` has
        it."""
        job_id, listing = key
        snapshot = read_snapshot(self.store, job_id, listing)
        rates = self._rates.get(key)
        if rates is None:
            rates = Rates()
            self._rates.put(key, rates)
        return WatchFrame(
            snapshot=snapshot,
            rates=rates.observe(self._monotonic(), snapshot.jobs),
            storage=self.settings.storage,
            interval_seconds=self.settings.refresh_seconds,
        )

    def _read_table(self, key: tuple[str, ChunkQuery]) -> ChunkTable:
        return read_chunk_table(self.store, *key)

    def _read_rejected(self, key: None) -> RejectedView:
        return RejectedView(tuple(read_rejections(self.store.storage.queues)))

    def _read_leases(self, key: None) -> LeasesView:
        now = self.store.clock.now()
        return LeasesView(read_leases(self.store, now), now)

    def _rejected(self) -> RejectedView:
        """The rejected submissions, or why they could not be read: the page of
        poisoned jobs is shown either way."""
        try:
            return self.rejected.get(None)
        except RunnerError as error:
            return RejectedView((), str(error))

    # ----------------------------------------------------------------- pages

    def jobs(self, request: Request) -> Response:
        def context() -> dict[str, Any]:
            query = JobsQuery.from_params(request.query_params)
            frame = self.frames.get((None, query.listing()))
            counts = frame.snapshot.counts
            return {
                "frame": frame,
                "now": frame.snapshot.taken_on,
                "query": query,
                "tabs": tabs(query, counts),
                "pages": pages(query, counts),
                "shown_range": shown_range(query, counts, len(frame.snapshot.jobs)),
            }

        return self._page(request, "jobs", context)

    def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]

        def context() -> dict[str, Any]:
            frame = self.frames.get((job_id, DEFAULT_JOBS))
            job = frame.snapshot.jobs[0]
            query = ChunkQuery.from_params(request.query_params)
            table = self.tables.get((job_id, query)) if isinstance(job, JobStatus) else None
            return {
                "frame": frame,
                "now": frame.snapshot.taken_on,
                "job": job,
                "rate": frame.rates.get(job_id),
                "table": table,
                "paging": _paging(job, query, table),
                "filters": _filters(job, query),
                "said": _said(request.query_params),
                "actions": actions_for(job),
                "max_rows": MAX_TASK_ROWS,
            }

        return self._page(request, "job", context)

    def pipeline(self, request: Request) -> Response:
        pipeline_id = request.path_params["pipeline_id"]

        def context() -> dict[str, Any]:
            frame = self.pipelines.get(pipeline_id)
            return {
                "frame": frame,
                "now": frame.taken_on,
                "pipeline": frame.status,
                "said": pipeline_said(
                    request.query_params.get("did"), request.query_params.get("count")
                ),
                "actions": pipeline_actions(frame.status),
            }

        return self._page(request, "pipeline", context)

    def workers(self, request: Request) -> Response:
        def context() -> dict[str, Any]:
            # The heartbeats alone: no job is read (a page of 50 active jobs read in full
            # made this page as slow as the jobs page, for nothing it shows).
            frame = self.frames.get((None, NO_JOBS))
            workers = sorted(frame.snapshot.workers, key=lambda w: (w.gone, w.worker_id))
            return {"frame": frame, "now": frame.snapshot.taken_on, "workers": workers}

        return self._page(request, "workers", context)

    def leases(self, request: Request) -> Response:
        def context() -> dict[str, Any]:
            view = self.leases_read.get(None)
            return {
                "frame": view,
                "now": view.taken_on,
                "leases": view.leases,
                "read_every_seconds": READ_EVERY_SECONDS,
            }

        return self._page(request, "leases", context)

    def poison(self, request: Request) -> Response:
        def context() -> dict[str, Any]:
            # The jobs page's tabs and pages: a refresh reads a page of jobs, not the
            # store (a store of 10,000 ended jobs read in full took minutes).
            query = JobsQuery.from_params(request.query_params, path="/poison")
            frame = self.frames.get((None, query.listing()))
            poisoned = [j for j in frame.snapshot.jobs if isinstance(j, JobStatus) and j.poisoned]
            counts = frame.snapshot.counts
            return {
                "frame": frame,
                "now": frame.snapshot.taken_on,
                "poisoned": poisoned,
                "rejected": self._rejected(),
                "max_rows": MAX_TASK_ROWS,
                "query": query,
                "tabs": tabs(query, counts),
                "pages": pages(query, counts),
                "shown_range": shown_range(query, counts, len(frame.snapshot.jobs)),
            }

        return self._page(request, "poison", context)

    def status_json(self, request: Request) -> Response:
        """What ``runner status [JOB_ID] --json`` prints, from the shared snapshot; the
        list is the jobs page's (``state``, ``page``)."""
        job_id = request.path_params.get("job_id")
        try:
            query = JobsQuery.from_params(request.query_params)
            listing = DEFAULT_JOBS if job_id else query.listing()
            jobs = self.frames.get((job_id, listing)).snapshot.jobs
        except RunnerError as error:
            return JSONResponse({"error": str(error)}, status_code=_status_of(error))
        return JSONResponse(to_json(jobs[0] if job_id else list(jobs)))

    def _page(self, request: Request, name: str, context: Callable[[], dict[str, Any]]) -> Response:
        try:
            values = context()
        except RunnerError as error:
            return self._error(request, _status_of(error), str(error))
        fragment = request.query_params.get("fragment")
        template = f"_{name}.html" if fragment else f"{name}.html"
        return self._templates.TemplateResponse(request, template, {**self._common(name), **values})

    def _common(self, nav: str) -> dict[str, Any]:
        return {
            "nav": nav,
            "storage": self.settings.storage,
            "refresh_seconds": self.settings.refresh_seconds,
            "actions_on": self.settings.token is not None,
            "token_field": TOKEN_FIELD,
            "quote": quote,
        }

    def _error(self, request: Request, status: int, message: str) -> Response:
        return self._templates.TemplateResponse(
            request,
            "error.html",
            {**self._common("error"), "status": status, "message": message},
            status_code=status,
        )

    # ----------------------------------------------------------------- actions

    async def action(self, request: Request) -> Response:
        """An action on a job: 403 unless actions are on and the token is given."""
        job_id, action = request.path_params["job_id"], request.path_params["action"]
        form = await self._allowed(request, action, ACTIONS)
        if isinstance(form, Response):
            return form
        try:
            done = await run_in_threadpool(act, self.store, job_id, action, form)
        except RunnerError as error:
            return self._error(request, _status_of(error, refused=409), str(error))
        self._expire()
        return RedirectResponse(_job_url(job_id, _done_params(done)), status_code=303)

    async def pipeline_action(self, request: Request) -> Response:
        """An action on every step of a pipeline it applies to, on the same terms."""
        pipeline_id, action = request.path_params["pipeline_id"], request.path_params["action"]
        form = await self._allowed(request, action, PIPELINE_ACTIONS)
        if isinstance(form, Response):
            return form
        try:
            count = await run_in_threadpool(act_on_pipeline, self.store, pipeline_id, action, form)
        except RunnerError as error:
            return self._error(request, _status_of(error, refused=409), str(error))
        self._expire()
        query = urlencode({"did": action, "count": count})
        url = f"/pipelines/{quote(pipeline_id, safe='')}?{query}"
        return RedirectResponse(url, status_code=303)

    async def _allowed(
        self, request: Request, action: str, known: tuple[str, ...]
    ) -> dict[str, str] | Response:
        """The posted form if ``action`` is one of ``known``, actions are on and the
        token is given; else the error page saying why (403, 404 or 413)."""
        if self.settings.token is None:
            message = "actions are off: start the dashboard with --allow-actions"
            return self._error(request, 403, message)
        if action not in known:
            return self._error(request, 404, f"no action {action!r}: {', '.join(known)}")
        form = await _form(request)
        if form is None:
            return self._error(request, 413, f"a form over {MAX_FORM_BYTES:,} bytes")
        given = request.headers.get(TOKEN_HEADER) or form.get(TOKEN_FIELD)
        if not token_matches(given, self.settings.token):
            message = "the token is missing or wrong: give the one `runner dashboard` printed"
            return self._error(request, 403, message)
        return form

    def _expire(self) -> None:
        """An action changed the store: every page reads it again at its next look."""
        self.frames.expire()
        self.tables.expire()
        self.pipelines.expire()
        self.leases_read.expire()


def _stale_frame(frame: WatchFrame, error: str) -> WatchFrame:
    return replace(frame, error=error)


@dataclass(frozen=True)
class RejectedView:
    """The poison page's rejected submissions (``runner poison list`` with no JOB_ID),
    and why they are not fresh, if they are not."""

    queues: tuple[RejectedQueue, ...]
    error: str | None = None


def _stale_rejected(view: RejectedView, error: str) -> RejectedView:
    return replace(view, error=error)


@dataclass(frozen=True)
class LeasesView:
    """The leases page: every job type's lease (``runner lease``) as of ``taken_on``,
    and why they are not fresh, if they are not."""

    leases: tuple[LeaseStatus, ...]
    taken_on: datetime
    error: str | None = None


def _stale_leases(view: LeasesView, error: str) -> LeasesView:
    return replace(view, error=error)


def _status_of(error: RunnerError, refused: int = 503) -> int:
    """404 for a job that is not there, 400 for a request not understood; else
    ``refused`` (503: the store did not answer; 409 for an action the job refuses)."""
    if isinstance(error, JobNotFound):
        return 404
    if isinstance(error, ConfigurationError):
        return 400
    return refused


async def _form(request: Request) -> dict[str, str] | None:
    """The posted form's fields (first value of each), None when it is too large."""
    body = b""
    async for part in request.stream():
        body += part
        if len(body) > MAX_FORM_BYTES:
            return None
    fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=20)
    return {name: values[0] for name, values in fields.items()}


def _job_url(job_id: str, params: Mapping[str, str]) -> str:
    query = urlencode(params)
    return f"/jobs/{quote(job_id, safe='')}" + (f"?{query}" if query else "")


def _done_params(done: Done) -> dict[str, str]:
    params = {"did": done.action}
    if done.action == "redrive":
        params.update(
            count=str(done.count), unreadable=str(done.unreadable), resent=str(done.resent)
        )
    return params


def _said(params: Mapping[str, str]) -> str | None:
    """What the page says of the action it was sent back from (``?did=``)."""
    action = params.get("did")
    if action not in ACTIONS:
        return None
    counts = [params.get(name, "0") for name in ("count", "unreadable", "resent")]
    count, unreadable, resent = (int(text) if text.isdigit() else 0 for text in counts)
    return said(Done(action, "", count, unreadable, resent))


def _paging(job: Any, query: ChunkQuery, table: ChunkTable | None) -> list[tuple[str, str | None]]:
    """The table's page links, ``(label, url)``; None where there is no such page."""
    if table is None:
        return []
    job_id = table.job_id
    if query.state:
        first = replace(query, after=None)
        return [
            ("first", _job_url(job_id, first.params()) if query.after else None),
            ("next", _job_url(job_id, table.next.params()) if table.next else None),
        ]
    pages = max(1, -(-job.chunks.total // query.size))

    def to(page: int) -> str:
        return _job_url(job_id, replace(query, page=page).params())

    return [
        ("first", to(0) if query.page else None),
        ("previous", to(min(query.page, pages) - 1) if query.page else None),
        ("next", to(query.page + 1) if query.page + 1 < pages else None),
        ("last", to(pages - 1) if query.page != pages - 1 else None),
    ]


def _filters(job: Any, query: ChunkQuery) -> list[tuple[str, int, str, bool]]:
    """The table's state filters: ``(state, count, url, chosen)``; the counts are the
    snapshot's (``retrying`` is status's ``failed``)."""
    if not isinstance(job, JobStatus):
        return []
    chunks = job.chunks
    counted = [
        ("all", chunks.total),
        ("waiting", chunks.waiting),
        ("running", chunks.running),
        ("retrying", chunks.failed),
        ("done", chunks.done),
        ("poisoned", chunks.poisoned),
    ]
    found = []
    for state, number in counted:
        chosen = (query.state or "all") == state
        params = replace(query, state=None if state == "all" else state, page=0, after=None)
        found.append((state, number, _job_url(job.job_id, params.params()), chosen))
    return found
