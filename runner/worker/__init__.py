"""The engine: what a worker does with a job's messages, from receive to done.

Here: ``runner start``'s processes (:mod:`~runner.worker.supervisor`), the worker loop
and its threads (:mod:`~runner.worker.loop`), the named hooks of a message's life, job
control (:mod:`~runner.worker.stop_orders`) and the worker's view of each job. By
concept, in folders: ``receiving/`` (which queues, in what order, how many),
``limits/`` (the user's shared limits), ``leases/`` (leases and their renewal),
``tasks/`` (a task's life: claim, plan, run the user's code, fenced checkpoints, done
marks, completion, poison) and ``observing/`` (log lines, heartbeats, metrics). Nothing
here imports :mod:`runner.cli` (tests/project/test_layers.py checks it).
"""
