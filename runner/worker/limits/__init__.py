"""The user's rate and running limits, as one worker takes them from the shared
:class:`~checkpoint.limits.book.LimitBook`.

Tokens and slots taken before a receive (:mod:`~runner.worker.limits.admission`), the
slots kept while their messages run (:mod:`~runner.worker.limits.slot_keeper`), and the
units a running chunk asks for with ``chunk.limit(name)``
(:mod:`~runner.worker.limits.unit_limits`).
"""
