"""How long each job type's chunks take on this worker, smoothed: what decides whether a
claimed chunk's message moves to the resume queue (:mod:`runner.worker.tasks.resume`)."""

from __future__ import annotations

import threading

#: Weight of the newest chunk's time in the smoothed time (as the prefetch's).
SMOOTHING = 0.2


class ChunkTimes:
    """Each job type's smoothed seconds per chunk (thread-safe: chunk slots report)."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def observe(self, job_type: str, seconds: float) -> None:
        """A chunk of ``job_type`` ran for ``seconds`` (whatever its outcome)."""
        with self._lock:
            last = self._seconds.get(job_type)
            self._seconds[job_type] = (
                seconds if last is None else last + SMOOTHING * (seconds - last)
            )

    def seconds(self, job_type: str) -> float | None:
        """The smoothed time, or None before the first chunk of the type ended here."""
        with self._lock:
            return self._seconds.get(job_type)
