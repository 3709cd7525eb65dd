"""The dashboard's templates and the words they show.

Jinja2 with autoescaping on for every template: whatever a job's code put in a payload,
a state or an error is shown as text, never as markup. The words (durations, rates,
chunk counts) are the ones ``runner status --watch`` prints (:mod:`runner.cli.watch_view`,
:mod:`runner.cli.render`), so a page and a terminal say the same thing the same way.
"""

from __future__ import annotations

import functools
from datetime import datetime
from pathlib import Path

import jinja2
from markupsafe import Markup

from jobs.dependencies import step_name
from runner.cli.json_form import utc
from runner.cli.pace import duration, rate_words
from runner.cli.render import chunk_counts, planning_words
from runner.cli.status_types import JobStatus, Rate
from runner.cli.tracebacks import traceback_parts
from runner.cli.watch_view import ENDED_STATES

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


@functools.cache
def environment() -> jinja2.Environment:
    """The templates, autoescaped, with the words below as filters: one environment per
    process, so that each template is compiled once whatever the number of apps (the
    tests make one per test, and compiling the same templates again was a fifth of the
    dashboard tests' CPU)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        duration=duration,
        ago=ago,
        clock=clock_time,
        utc=utc,
        percent=percent,
        count=count,
        rate=rate_text,
        chunk_counts=chunk_counts,
        planning_failed=planning_words,
        state_class=state_class,
        fraction=shown_fraction,
        traceback_html=traceback_html,
        step_name=step_name,
    )
    return env


def traceback_html(text: str) -> Markup:
    """A traceback from the user's first frame, the engine's frames above it under a
    fold of their own (:mod:`runner.cli.tracebacks`); every part escaped."""
    shown = []
    for piece in traceback_parts(text):
        body = Markup("<pre>{}</pre>").format(piece.text)
        if piece.engine_frames:
            fold = '<details class="engine"><summary>{} engine frame(s) above your code</summary>'
            body = Markup(fold + "{}</details>").format(piece.engine_frames, body)
        shown.append(body)
    return Markup("").join(shown)


def ago(when: datetime | None, now: datetime) -> str:
    """``12s ago``; ``in 5s`` for a time to come; ``-`` for none."""
    if when is None:
        return "-"
    seconds = (now - when).total_seconds()
    return f"{duration(seconds)} ago" if seconds >= 0 else f"in {duration(-seconds)}"


def clock_time(when: datetime | None) -> str:
    """``2026-11-26T22:40:03.000000Z``, as every output shows a time, or ``-``."""
    return "-" if when is None else utc(when)


def percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction:.0%}"


def count(value: int) -> str:
    return f"{value:,}"


def rate_text(job: JobStatus, rate: Rate) -> str:
    """``0.25 chunks/s  ETA 14s``, ``paused``, or nothing (ended, or not known yet)."""
    return "  ".join(rate_words(job, rate))


def state_class(job: JobStatus) -> str:
    """The CSS class of a job's state: a paused job that has not ended shows paused."""
    if job.paused and job.state not in ENDED_STATES:
        return "paused"
    return job.state


def shown_fraction(job: JobStatus) -> float:
    """The bar's fraction: as status counts it, or done over total before any chunk
    said how far it got."""
    if job.progress_fraction is not None:
        return job.progress_fraction
    total = job.chunks.total
    return job.chunks.done / total if total else 0.0
