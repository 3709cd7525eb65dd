"""A job's ``split`` and ``finalize`` run in a test as planning and finalize run them,
without a store: what ``ChunkEnvironment.plan`` and ``ChunkEnvironment.finalize`` do
(:mod:`jobs.chunk_environment`). Values travel through msgpack as in production.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from checkpoint import codec
from checkpoint.codec import round_trip
from jobs.job import ChunkedJob
from jobs.summary import JobSummary


def run_split(
    new_job: Callable[[], ChunkedJob], params: Any, check_deterministic: bool = True
) -> list[Any]:
    """Run ``split`` of a job ``new_job()`` makes, as planning does, and return the chunk
    payloads it yields.

    Args:
        new_job: makes the job to run (called once per run of ``split``).
        params: the job's parameters, as stored (after a msgpack round trip).
        check_deterministic: run ``split`` twice and require the same payloads, as
            resumed planning relies on (it skips the payloads already enqueued).

    Returns:
        The payloads, each as ``process`` will see it (after a msgpack round trip).

    Raises:
        CodecError: a payload is not msgpack-able; the message names its index.
        AssertionError: ``split`` yielded different payloads the second time.
    """
    job = new_job()
    encoded = _split_encoded(job, params)
    if check_deterministic and _split_encoded(new_job(), params) != encoded:
        raise AssertionError(
            f"{type(job).__qualname__}.split is not deterministic: a second run "
            "yielded other payloads, so resumed planning would lose or repeat chunks"
        )
    return [codec.decode(data, "chunk payload") for data in encoded]


def _split_encoded(job: ChunkedJob, params: Any) -> list[bytes]:
    return [
        codec.encode(payload, f"payload {index} of split")
        for index, payload in enumerate(job.split(params))
    ]


def run_finalize(
    new_job: Callable[[], ChunkedJob],
    job_id: str,
    params: Any,
    results: Sequence[Any] | Mapping[int, Any],
    outputs: Sequence[tuple[int, dict[str, Any]]] = (),
) -> Any:
    """Run ``finalize`` of a job ``new_job()`` makes, with a summary of a job whose
    chunks are all done.

    Args:
        new_job: makes the job to run.
        job_id: ``summary.job_id``.
        params: the job's parameters, as stored (after a msgpack round trip).
        results: the chunks' results: a sequence (index = position) or a mapping
            from index to result. ``summary.total`` and ``summary.done`` are its length.
        outputs: ``(index, published outputs by name)`` of the chunks that published.

    Returns:
        What ``finalize`` returned.
    """
    items = results.items() if isinstance(results, Mapping) else enumerate(results)
    stored = sorted((index, round_trip(result, "chunk result")) for index, result in items)

    def read_results() -> Iterator[tuple[int, Any]]:
        return iter(stored)

    summary = JobSummary(
        job_id, len(stored), len(stored), read_results, _outputs=lambda: iter(outputs)
    )
    return new_job().finalize(params, summary)
