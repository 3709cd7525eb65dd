"""The chunk-engine benchmark still runs: its quick mode's pieces on the embedded store.

Tiny jobs, embedded only. Nothing here asserts a time: only that every run reached its
end and that the counted storage calls add up.
"""

from __future__ import annotations

from pathlib import Path

from checkpoint import layout
from checkpoint.backends import open_storage
from runner.worker.loop import WorkerSettings
from tests.bench import chunks, throughput

CHUNKS = 24


def test_in_process_run_counts_the_calls_of_every_chunk(tmp_path: Path) -> None:
    # Given a trivial job of 24 chunks, submitted
    with open_storage(str(tmp_path / "store")) as storage:
        throughput.submit_trivial(storage, CHUNKS)

        # When one worker loop plans and processes it
        measured = throughput.run_in_process(storage, CHUNKS, WorkerSettings(burst=True))

    # Then, counted up to the job being done: every chunk message sent at planning (in
    # one call) and finalize's alone, every chunk's deleted (in groups) and planning's
    # alone, each chunk claimed and marked done, the done marks in groups
    calls = measured.calls
    assert measured.seconds > 0 and measured.chunks == CHUNKS
    assert calls["queues.send_many messages"] == CHUNKS
    assert calls["queues.send_many"] == 1
    # The finalize message, and the copy of each chunk moved to the resume queue: the
    # first chunk only (it moves until a chunk of the type has been timed, and these
    # are quick: docs/semantics.md §20), whose original is then deleted alone
    moved = calls["queues.send"] - 1
    assert moved == 1
    assert calls["queues.delete_many messages"] == CHUNKS
    assert 1 <= calls["queues.delete_many"] <= CHUNKS
    assert calls["queues.delete"] == 1 + moved  # planning's (finalize's is after "done")
    assert calls["records.merge"] >= CHUNKS  # claims, without reading the records first
    # no record read per chunk: the job record and counters as the job completes, and
    # the 16 counters for finalize's summary, whatever the job's size
    assert calls.get("records.get", 0) <= 2 * layout.SHARDS
    assert 1 <= calls["records.batch"] <= CHUNKS + 1  # + planning's insert
    assert 1 <= calls["queues.receive"] <= 2 * CHUNKS


def test_planning_alone_then_processing_alone(tmp_path: Path) -> None:
    with open_storage(str(tmp_path / "store")) as storage:
        throughput.submit_trivial(storage, CHUNKS)
        planning = throughput.plan_only(storage, CHUNKS)
        processing = throughput.run_in_process(
            storage, CHUNKS, WorkerSettings(concurrency=2, prefetch=4, burst=True)
        )
    # Planning sent the chunk messages and nothing else ran; processing sent none
    assert planning.calls["queues.send_many messages"] == CHUNKS
    assert "queues.delete" in planning.calls  # the plan message, once planning ended
    assert planning.calls["queues.delete"] == 1
    assert "queues.delete_many" not in planning.calls
    # The finalize message, and a copy in the resume queue of each chunk started before
    # the first one ended (two slots: one or two; docs/semantics.md §20)
    assert 1 + 1 <= processing.calls["queues.send"] <= 1 + 2
    assert "queues.send_many" not in processing.calls
    # finalize's comes after "done"
    assert processing.calls["queues.delete_many messages"] == CHUNKS


def test_quick_mode_writes_the_section(tmp_path: Path) -> None:
    # Given the quick mode on the embedded store only, with tiny jobs
    output = tmp_path / "BENCHMARKS.md"

    # When it runs (1 and 2 worker processes, then a SIGKILL and resume)
    results = chunks.main(
        ["--quick", "--backend", "embedded", "--embedded-chunks", "16", "--output", str(output)]
    )

    # Then each figure came from a finished run, and the section says how it was made
    assert len(results.end_to_end) == len(chunks.QUICK_SETTINGS["embedded"])
    for runs in results.end_to_end.values():
        # (with two processes, one may run finalize and end the window while the other
        # still deletes its last chunks' messages: those fall outside it)
        assert all(0 < run.calls["queues.delete_many messages"] <= 16 for run in runs)
    (resumed,) = results.resume["embedded"]
    assert resumed.kill_to_resume > 0
    text = output.read_text()
    assert text.count("## Chunk engine") == 1
    for heading in (
        "Targets",
        "Trivial-chunk throughput",
        "Storage calls per chunk",
        "SIGKILL to resume",
        "Planning a million chunks",
    ):
        assert f"### {heading}" in text
    assert "start-up cost is left out" in text and "Machine:" in text
    # and planning was measured at both quick sizes, each run to its end
    assert sorted(results.planning_memory) == list(chunks.QUICK_PLANNING_SIZES)
    for size, runs in results.planning_memory.items():
        assert all(run.chunks == size and run.seconds > 0 for run in runs)
        assert all(0 < run.rss_before_mib <= run.rss_peak_mib for run in runs)
    assert "planning memory bounded" in text
