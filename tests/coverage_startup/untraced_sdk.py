"""A coverage plugin of ``make test`` that measures nothing: it stops the line tracer
while the Azure SDK's pipeline sends a request.

On Python 3.11 coverage traces through a trace function that every Python call of a
traced thread goes through, in measured files or not (Python 3.12's ``sys.monitoring``,
which coverage uses there, can switch off whole code objects; 3.11 has nothing like
it). A request passes some hundreds of calls through the SDK's pipeline policies,
requests and urllib3, none of them ours: a table read measured 2.1 ms of CPU bare and
4.7 ms under coverage, 2.9 ms with this plugin. The suite makes hundreds of thousands
of requests (its workers' and the tests' own), so coverage was most of its CPU.

Nothing of ours runs inside a request but the retry policy's backoff
(``checkpoint.backends.azure.retry``), which the suite reaches outside a request too.
The pipeline is patched when its module is first imported, so a process that never
uses the Azure backend never imports the SDK for it.

Loaded by ``[tool.coverage.run] plugins`` in every process coverage measures: the
suite's, and every Python process it starts (``patch = ["subprocess"]``), which find
it through the ``PYTHONPATH`` that ``make test`` gives this folder (it holds nothing
else, so it hides no import mistake of the code under test).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: The module of the SDK's synchronous pipeline, whose ``Pipeline.run`` sends a request.
PIPELINE_MODULE = "azure.core.pipeline._base"


def coverage_init(registry: Any, options: dict[str, Any]) -> None:
    """Coverage's plugin entry: registers no plugin, installs the patch."""
    install()


def install() -> None:
    module = sys.modules.get(PIPELINE_MODULE)
    if module is not None:
        _untraced_pipeline(module)
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def _untraced_pipeline(module: ModuleType) -> None:
    pipeline = module.Pipeline
    run = pipeline.run
    if getattr(run, "untraced", False):
        return

    @functools.wraps(run)
    def untraced_run(self: Any, request: Any, **kwargs: Any) -> Any:
        tracer = sys.gettrace()
        if tracer is None:
            return run(self, request, **kwargs)
        sys.settrace(None)
        try:
            return run(self, request, **kwargs)
        finally:
            # Coverage's C tracer, set back from Python, puts itself back in C at the
            # next call.
            sys.settrace(tracer)

    untraced_run.untraced = True  # type: ignore[attr-defined]
    pipeline.run = untraced_run


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches the pipeline module right after it is first executed."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != PIPELINE_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _untraced_pipeline(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
