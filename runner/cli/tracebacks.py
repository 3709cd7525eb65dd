"""A stored traceback as people read it: from the user's first frame on.

A chunk's traceback starts in the engine (the worker's run of the task, the call of
``process``) before it reaches the user's code; those frames say nothing about the
user's error. :func:`traceback_parts` splits a traceback's text into what to show and
the engine frames above the user's first frame, which ``runner report`` leaves out
(``--full`` keeps them) and the dashboard folds. A frame is the engine's when its file
is a module of our packages (``jobs``, ``checkpoint``, ``runner``), judged by the path
after the package's name, so a traceback written on another machine reads the same; a
frame of the standard library above the user's first frame (a thread pool's) folds
with them. A traceback with no frame of the user's is shown whole.
"""

from __future__ import annotations

import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import checkpoint
import jobs
import runner

#: Our packages; a frame in one of their modules is the engine's.
ENGINE_PACKAGES = {
    Path(package.__file__ or "").parent.name for package in (jobs, checkpoint, runner)
}
_PACKAGES_ROOT = Path(runner.__file__ or "").parent.parent
_STDLIB = tuple(str(Path(sysconfig.get_paths()[name])) for name in ("stdlib", "platstdlib"))
_FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line \d+')


@dataclass(frozen=True)
class Piece:
    """Part of a traceback's text: shown as it is, or ``engine`` frames to fold."""

    text: str
    engine_frames: int = 0


def traceback_parts(text: str) -> list[Piece]:
    """``text`` in pieces, each run of engine frames above a traceback's first frame of
    the user's as one :class:`Piece` with ``engine_frames`` > 0 (a chain of exceptions
    has a traceback each)."""
    pieces: list[Piece] = []
    shown: list[str] = []
    for section in _sections(text.splitlines(keepends=True)):
        frames = _frames(section)
        leading = _leading_engine(frames)
        if leading == 0:
            shown.extend(section)
            continue
        head = frames[0][0]
        shown.extend(section[:head])
        if shown:
            pieces.append(Piece("".join(shown)))
        pieces.append(Piece("".join(section[head : frames[leading][0]]), leading))
        shown = list(section[frames[leading][0] :])
    if shown:
        pieces.append(Piece("".join(shown)))
    return pieces


def user_traceback(text: str, folded: str = "{n} engine frame(s) left out") -> str:
    """``text`` with the engine frames above the user's replaced by one line of
    ``folded`` (``{n}``: how many), indented as a frame."""
    return "".join(
        f"  [{folded.format(n=piece.engine_frames)}]\n" if piece.engine_frames else piece.text
        for piece in traceback_parts(text)
    )


def _sections(lines: list[str]) -> list[list[str]]:
    """The lines split before each ``Traceback (most recent call last):``."""
    sections: list[list[str]] = [[]]
    for line in lines:
        if line.startswith("Traceback (most recent call last):") and sections[-1]:
            sections.append([])
        sections[-1].append(line)
    return sections


def _frames(section: list[str]) -> list[tuple[int, str]]:
    """``(line number, file)`` of each frame of a section, and one past its last frame
    (the exception's first line) as ``(n, "")``."""
    found = []
    end = len(section)
    for number, line in enumerate(section):
        match = _FRAME.match(line)
        if match:
            found.append((number, match["path"]))
        elif found and not line.startswith("    "):
            end = number
            break
    return [*found, (end, "")] if found else []


def _leading_engine(frames: list[tuple[int, str]]) -> int:
    """How many frames come before the user's first; 0 if there is none of the user's
    (the traceback is then the engine's own, shown whole) or none to leave out."""
    for count, (_, path) in enumerate(frames[:-1]):
        if not (_is_engine(path) or _is_stdlib(path)):
            return count
    return 0


def _is_engine(path: str) -> bool:
    parts = re.split(r"[\\/]", path)
    for at in range(len(parts) - 1, -1, -1):
        if parts[at] in ENGINE_PACKAGES:
            return _PACKAGES_ROOT.joinpath(*parts[at:]).is_file()
    return False


def _is_stdlib(path: str) -> bool:
    return path.startswith(_STDLIB) and "site-packages" not in path
