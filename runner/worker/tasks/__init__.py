"""A task's path: one received message, from its lease to its end.

:mod:`~runner.worker.tasks.life` is the module to open first: the steps of a message's
life in order, each a call into a module here (decode, claim, run, outcome, completion,
poison). Its log lines go to the ``runner.worker.tasks`` logger
(:data:`runner.worker.observing.logs.TASK_LOGGER`).
"""
