"""What a signal handler may do: hand its work to a thread of its own.

Python runs a signal handler in the main thread, between two of its bytecodes, so the
handler may interrupt the main thread *while it holds a lock*. ``threading.Event`` keeps
its flag under a plain (not re-entrant) lock, and ``Event.wait`` holds that lock for a
moment on the way in and on the way out: a handler calling ``set`` on the event the
main thread is waiting on can land in that moment and wait for the lock forever, on
itself (seen: ``runner status --watch`` hung after Ctrl-C, its stack in ``Event.set``).
Anything a handler does beyond setting a plain attribute goes through :func:`off_signal`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def off_signal(action: Callable[[], None], name: str = "signal") -> None:
    """Run ``action`` on a new daemon thread, at once; for a signal handler, whose own
    thread may hold the locks ``action`` takes."""
    threading.Thread(target=action, name=name, daemon=True).start()
