"""The chaos run's own judgement: fences parsed from worker logs, and who fenced whom."""

from __future__ import annotations

from tests.chaos.analysis import Fence, count_items, judge, log_time, parse_fences

JOB = "e2e-x-chaos-20261125-1"
_AT = "WARNING [MainProcess] runner.worker.tasks:"
LOG = "\n".join(
    [
        f"2026-11-25 13:08:22,636 {_AT} chunk 5 of {JOB} stopped: lease lost (task record of "
        "chunk 5 changed: fenced)",
        "2026-11-25 13:08:23,058 WARNING [MainProcess] runner.worker.tasks.chunk_finisher: "
        f"chunk 7 of {JOB} finished but fenced: chunk record changed before it was marked "
        "done (...)",
        f"2026-11-25 13:08:24,000 {_AT} chunk 8 of {JOB}: finished but fenced (renewal refused: x)",
        f"2026-11-25 13:08:25,000 {_AT} chunk 9 of other-job stopped: lease lost (x)",
        "2026-11-25 13:08:26,000 INFO [MainProcess] runner.worker.tasks: "
        f"chunk 3 of {JOB}: already done",
    ]
)


def _fence(chunk: int, at: float, pid: int = 1, cause: str = "record changed") -> Fence:
    return Fence(chunk, pid, at, "lease lost", cause, "")


def _start(chunk: int, attempt: int, at: float, pid: int) -> dict:
    return {"chunk": chunk, "attempt": attempt, "at": at, "pid": pid}


def test_parses_the_three_fence_lines_of_this_job_only():
    fences = parse_fences(LOG, JOB, pid=42)

    assert [(f.chunk, f.how, f.cause) for f in fences] == [
        (5, "lease lost", "record changed"),
        (7, "finished but fenced", "record changed"),
        (8, "finished but fenced", "renewal refused"),
    ]
    assert fences[0].at == log_time("2026-11-25 13:08:22,636") and fences[0].pid == 42


def test_judges_taken_over_own_paused_and_gaps():
    starts = [
        _start(1, 1, 10.0, pid=1),
        _start(1, 2, 14.0, pid=2),  # taken over before the fence
        _start(2, 1, 10.0, pid=1),
        _start(2, 2, 30.0, pid=2),  # next claim after: own
        _start(3, 1, 10.0, pid=1),
        _start(3, 3, 30.0, pid=2),  # attempt 2 never started
        _start(4, 1, 10.0, pid=3),  # fenced after its worker's pause
    ]
    judged = judge(
        [_fence(1, 15.0), _fence(2, 15.0), _fence(3, 15.0), _fence(4, 25.0, pid=3)],
        starts,
        pauses=[(3, 12.0, 24.0)],
    )

    assert [f.chunk for f in judged.taken_over] == [1]
    assert [f.chunk for f in judged.own] == [2, 3]
    assert [f.chunk for f in judged.own_with_gap] == [3]
    assert [f.chunk for f in judged.paused] == [4]


def test_a_lease_of_its_own_running_out_is_a_lapse_not_a_self_fence():
    starts = [_start(5, 1, 10.0, pid=1), _start(6, 1, 10.0, pid=1)]
    judged = judge(
        [_fence(5, 15.0, cause="lease ran out"), _fence(6, 15.0, cause="renewals failed")],
        starts,
        pauses=[],
    )
    assert [f.chunk for f in judged.lapsed] == [5, 6] and not judged.own


def test_a_pause_before_the_attempt_began_excuses_nothing():
    judged = judge([_fence(4, 25.0)], [_start(4, 1, 20.0, pid=1)], pauses=[(1, 12.0, 14.0)])
    assert [f.chunk for f in judged.own] == [4] and not judged.paused


def test_counts_lost_and_reapplied_items(tmp_path):
    sink = tmp_path / "sink"
    sink.mkdir()
    for name in ("0000-0000", "0000-0001", "0001-0000"):
        (sink / name).touch()
    applies = [
        {"chunk": 0, "item": 0, "new": True},
        {"chunk": 0, "item": 0, "new": False},
        {"chunk": 0, "item": 0, "new": False},
        {"chunk": 0, "item": 1, "new": True},
    ]

    items = count_items(tmp_path, chunks=2, items=2, applies=applies)

    assert (items.expected, items.lost) == (4, 1)
    assert (items.applied_more_than_once, items.extra_applications) == (1, 2)
