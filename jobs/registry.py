"""Finding a job class by its ``module:Class`` name, as the CLI and workers do.

Whatever goes wrong says so in one line: a module that is missing (and why, when one of
our own packages stands in its way), a module that fails while importing (its file and
line), a name that is not a ChunkedJob.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import traceback
from pathlib import Path

from checkpoint.errors import JobNotFound
from jobs.errors import JobModuleFailed
from jobs.job import ChunkedJob, check_runnable

#: Where chunkrunner's top-level packages are installed.
_OUR_ROOT = Path(__file__).resolve().parent.parent
#: A job class of the repository's own, which errors give as an example.
EXAMPLE_JOB = "samples.quickstart.wordcount:WordCount"
#: Classes offered for a mistyped class name at most; how alike (difflib's ratio).
_SUGGESTIONS, _CUTOFF = 3, 0.6


def load_job_class(path: str) -> type[ChunkedJob]:
    """Import ``module:Class`` (the working directory is importable) and check it is a
    ChunkedJob subclass.

    Raises:
        JobNotFound: no such module or class (saying what is missing, and when one of
            our packages shadows the user's module of the same name).
        JobModuleFailed: the module raised while importing (its file and line named).
        JobDefinitionError: the class defines no ``split`` or no ``process``.
    """
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise JobNotFound(f"job {path!r} is not of the form module:Class (e.g. {EXAMPLE_JOB})")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        if error.name is not None and not _is_part_of(module_name, error.name):
            # The job's module was found; something it imports was not.
            raise JobModuleFailed(_failure(module_name, error)) from error
        raise JobNotFound(_not_found(module_name, path, error)) from error
    except Exception as error:  # noqa: BLE001 - the user's module failed while importing
        raise JobModuleFailed(_failure(module_name, error)) from error
    found: object = module
    for part in class_name.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise JobNotFound(
                f"module {module_name!r} has no {class_name!r}{_alike(module, class_name)}"
            )
    if not isinstance(found, type) or not issubclass(found, ChunkedJob):
        raise JobNotFound(f"{path!r} is not a ChunkedJob subclass")
    check_runnable(found)
    return found


def _alike(module: object, class_name: str) -> str:
    """What the module offers instead: ``; did you mean 'X'?``, else its job classes."""
    ours = {"jobs", "checkpoint", "runner"}
    classes = sorted(
        name
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, ChunkedJob)
        and value.__module__.split(".")[0] not in ours
    )
    if not classes:
        return "; it defines no job class"
    close = difflib.get_close_matches(class_name, classes, n=_SUGGESTIONS, cutoff=_CUTOFF)
    if len(close) == 1:
        return f"; did you mean {close[0]!r}?"
    if close:
        return f"; did you mean one of {', '.join(map(repr, close))}?"
    return f"; its job classes: {', '.join(classes)}"


def _is_part_of(module_name: str, missing: str) -> bool:
    return module_name == missing or module_name.startswith(missing + ".")


def _not_found(module_name: str, path: str, error: ImportError) -> str:
    top = module_name.split(".")[0]
    shadowed = _user_copy(top) if _is_ours(top) else None
    if shadowed is not None:
        return (
            f"cannot import {module_name!r} for job {path!r}: {top!r} is chunkrunner's own "
            f"package ({_OUR_ROOT / top}), which hides your {shadowed}; rename yours "
            f"(e.g. 'batch_{top}') and use the new name in the job path"
        )
    return f"cannot import {module_name!r} for job {path!r}: {error}"


def _is_ours(top: str) -> bool:
    """``top`` is imported already, and from chunkrunner's packages."""
    module = sys.modules.get(top)
    where = getattr(module, "__file__", None)
    return where is not None and Path(where).resolve().parent.parent == _OUR_ROOT


def _user_copy(top: str) -> str | None:
    """A module or package named ``top`` on the import path that is not ours, or None."""
    for entry in sys.path:
        base = Path(entry or os.getcwd()).resolve()
        if base == _OUR_ROOT:
            continue
        for candidate in (base / top, base / f"{top}.py"):
            if candidate.exists():
                return str(candidate)
    return None


def _in_our_packages(filename: str) -> bool:
    path = Path(filename).resolve()
    return any(path.is_relative_to(_OUR_ROOT / top) for top in ("jobs", "checkpoint", "runner"))


def _failure(module_name: str, error: BaseException) -> str:
    """``job module 'x' failed while importing: x.py line 3: NameError: ...``."""
    where = ""
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{error.filename} line {error.lineno}: "
    else:
        frames = [
            frame
            for frame in traceback.extract_tb(error.__traceback__)
            if "importlib" not in frame.filename
        ]
        # The user's line that led there, not ours that raised: a bad class setting is
        # refused by our checks, but the fix is in the user's class.
        theirs = [frame for frame in frames if not _in_our_packages(frame.filename)]
        if frames:
            frame = (theirs or frames)[-1]
            where = f"{frame.filename} line {frame.lineno}: "
    summary = error.msg if isinstance(error, SyntaxError) else str(error)
    kind = type(error).__name__
    return f"job module {module_name!r} failed while importing: {where}{kind}: {summary}"
