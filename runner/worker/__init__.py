"""The engine: what a worker does with a job's messages, from receive to done.

The worker loop and its threads, leases and their renewal, a task's life (claim, plan,
run the user's code, fenced checkpoints, done marks, completion, poison), heartbeats,
the worker's view of each job, its log lines and ``runner start``'s processes. Nothing
here imports :mod:`runner.cli` (tests/project/test_layers.py checks it).
"""
