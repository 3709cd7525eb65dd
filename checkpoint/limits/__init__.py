"""The user's limits: rate and running limits shared by every worker (``runner limit``).

``rates``: a rate as written to tokens a second; ``rows``: a limit's two rows as values
(a token bucket, running slots); ``book``: the limits in the table ``runnerlimits``.
Azure's own numbers are service targets (:mod:`checkpoint.service_targets`), never limits.
"""
