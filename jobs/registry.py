"""Finding a job class by its ``module:Class`` name, as the CLI and workers do."""

from __future__ import annotations

import importlib
import os
import sys

from checkpoint.errors import JobNotFound
from jobs.job import ChunkedJob


def load_job_class(path: str) -> type[ChunkedJob]:
    """Import ``module:Class`` (the working directory is importable) and check it is a
    ChunkedJob subclass. Raises JobNotFound saying what is missing."""
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise JobNotFound(
            f"job {path!r} is not of the form module:Class (e.g. samples.orders:MigrateOrders)"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise JobNotFound(f"cannot import {module_name!r} for job {path!r}: {error}") from error
    found: object = module
    for part in class_name.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise JobNotFound(f"module {module_name!r} has no {class_name!r}")
    if not isinstance(found, type) or not issubclass(found, ChunkedJob):
        raise JobNotFound(f"{path!r} is not a ChunkedJob subclass")
    return found
