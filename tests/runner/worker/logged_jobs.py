"""A job that logs from its own code, for the log format tests
(tests/runner/worker/observing/test_logs.py)."""

from __future__ import annotations

import logging
from typing import Any

from jobs import Chunk, ChunkedJob

log = logging.getLogger("tests.runner.worker.logged_jobs")


class Chatty(ChunkedJob):
    """Says hello from each chunk, with an extra field, and checkpoints half-way."""

    queue = "chatty"

    def split(self, params: Any) -> Any:
        return range(params["chunks"])

    def process(self, chunk: Chunk) -> int:
        log.info("hello from chunk %d", chunk.index, extra={"row": chunk.index * 10})
        chunk.checkpoint(1, progress=0.5)
        return chunk.index
