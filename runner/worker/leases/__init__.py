"""Leases: a worker's time on the messages it received, renewed until they end.

The lease and its keeper (:mod:`~runner.worker.leases.lease`), the keeper's thread pools
(:mod:`~runner.worker.leases.pool`), and what a claim learns of the attempt whose lease
it takes a chunk over from (:mod:`~runner.worker.leases.takeover`).
"""
