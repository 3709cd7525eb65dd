"""A folder this process can read but not write, made for real even when the tests run
as root.

Root ignores mode bits, so taking the write bits away is not enough there: for the
block, this process also takes the effective uid and gid of ``nobody`` (``seteuid``,
undone at the end; the kernel then checks files as for that user and drops root's
capabilities until it is undone). Files and folders keep root as their owner, so
``nobody`` may read them (mode 0o444 / 0o555) and write none. Run as another user, the
mode bits alone do it. A read-only bind mount or ``chattr +i`` would need capabilities
a container seldom has; this needs only the ``setuid`` one every root process has.

Under ``nobody`` a module not imported yet cannot be imported when the interpreter
lives under a folder only root may enter (``/root/.pyenv``): run what is tested once
before the block, writable, so that everything it imports is imported already.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The ``nobody`` user and group of Debian and most Linux distributions.
NOBODY_UID = NOBODY_GID = 65534


@contextmanager
def reachable_folder() -> Iterator[Path]:
    """A fresh folder that ``nobody`` can reach (pytest's tmp_path is under a folder
    only its owner may enter), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="chunkrunner-ro-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def unwritable(*folders: Path) -> Iterator[None]:
    """For the block, ``folders`` and everything in them can be read, not written."""
    paths = [path for folder in folders for path in (folder, *folder.rglob("*"))]
    modes = {path: stat.S_IMODE(path.stat().st_mode) for path in paths}
    for path, mode in modes.items():
        path.chmod(mode & ~0o222)
    try:
        if os.geteuid() == 0:
            os.setegid(NOBODY_GID)
            os.seteuid(NOBODY_UID)
            try:
                yield
            finally:
                os.seteuid(0)
                os.setegid(0)
        else:
            yield
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
