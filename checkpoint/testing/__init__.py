"""Test machinery for storage, off the production path: storage that fails on purpose.

:mod:`.faults` wraps any storage to fail as a plan says (the tests of every layer use
it), and :mod:`.injected` does so in a worker process for ``RUNNER_FAULTS`` (chaos
runs). It sits in ``checkpoint`` because it needs only the storage protocols and the
error tree, so any layer's tests can use it and it imports nothing above. No module of
``checkpoint``, ``jobs`` or ``runner`` imports it: ``runner start`` loads
:mod:`.injected` by name, and only when ``RUNNER_FAULTS`` is set
(:func:`runner.worker.supervisor.storage_faults`).
"""
