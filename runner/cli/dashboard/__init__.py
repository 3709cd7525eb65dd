"""``runner dashboard``: the status of the store as web pages, refreshed live.

It reads what ``runner status`` reads (:func:`runner.cli.snapshot.read_snapshot`, the
typed values of :mod:`runner.cli.status_types`, the rates of :mod:`runner.cli.watch`), so
the two never disagree; reads are shared between viewers (:mod:`.shared`), chunk pages
cost the same whatever the job's size (:mod:`checkpoint.tasks.chunk_pages`), and actions are
off unless asked for, each then needing the token printed at start (:mod:`.actions`).
"""
