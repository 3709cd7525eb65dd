"""Receiving: which queues a worker asks, in what order, and how many messages it takes.

The queues it serves and their fair rotation (:mod:`~runner.worker.receiving.polling`),
the turns between job types (:mod:`~runner.worker.receiving.type_turns`), one receive
round's order (:mod:`~runner.worker.receiving.receive_order`) and how far ahead of its
slots it takes messages (:mod:`~runner.worker.receiving.prefetch`).
"""
