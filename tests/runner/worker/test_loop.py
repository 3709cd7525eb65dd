"""The worker loop's own decisions (runner/worker/loop.py), in this process on the embedded
store and the real clock: here, when a burst worker may stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoint.backends import open_storage
from jobs import manage
from jobs.chunk import Chunk
from jobs.job import ChunkedJob
from jobs.submit import submit
from runner.worker.loop import WorkerLoop, WorkerSettings

#: How long another consumer keeps the ended job's message hidden.
HIDDEN_SECONDS = 1


class Noop(ChunkedJob):
    queue = "loop-burst"

    def split(self, params: dict[str, Any]) -> Any:
        return [{}]

    def process(self, chunk: Chunk) -> Any:
        return None


def test_a_burst_worker_waits_for_a_hidden_message_of_an_ended_job(tmp_path: Path):
    # Given a cancelled job whose planning message another consumer holds for a moment
    storage = open_storage(str(tmp_path / "store"))
    try:
        job_id = submit(Noop, {}, storage=storage)
        manage.cancel(job_id, "not wanted", storage=storage)
        (held,) = storage.queues.receive(Noop.queue, visibility_seconds=HIDDEN_SECONDS)

        # When a burst worker runs: every job has ended, but the queue is not empty
        exit_code = WorkerLoop(storage, [Noop], WorkerSettings(burst=True)).run()

        # Then it stopped only once the message had come back and been dropped unrun
        assert exit_code == 0
        assert storage.queues.approximate_length(Noop.queue) == 0
        assert held.id  # the message it waited for was real
    finally:
        storage.close()
