"""Observing: what a worker tells of itself and its tasks, never deciding anything.

Log lines (:mod:`~runner.worker.observing.logs`, :mod:`~runner.worker.observing.observe`),
the worker's heartbeat (:mod:`~runner.worker.observing.heartbeat`), and metrics: what the
engine records (:mod:`~runner.worker.observing.recorder`), the metrics concern on the
hooks (:mod:`~runner.worker.observing.metrics_hooks`), the Prometheus recorder
(:mod:`~runner.worker.observing.metrics`) and its endpoint
(:mod:`~runner.worker.observing.metrics_server`).
"""
