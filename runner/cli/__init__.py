"""The ``runner`` command line: its commands, its views of the store, its admin verbs.

It drives the engine (:mod:`runner.worker`); the engine never imports it. This file
imports nothing: :mod:`runner.cli.entry` must run with the standard library alone
until it has checked that no package of the user's hides ours.
"""
