"""The checkpoint coalescer the runner's TaskControl and the ChunkEnvironment harness share:
at most one write per interval, offers coalesced to the newest, a flush of what is
unwritten. Time on a FakeClock; the owners' own tests
(tests/runner/worker/tasks/test_task_control.py, tests/jobs/test_chunk_environment.py) check that
each writes as the coalescer says."""

from __future__ import annotations

import pytest

from checkpoint.clock import FakeClock
from checkpoint.coalescing import CheckpointCoalescer
from checkpoint.records import Progress


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_write_is_due_once_an_interval_has_passed_since_the_claim(clock: FakeClock):
    coalescer = CheckpointCoalescer(clock, 5.0)

    assert coalescer.offer(1) is False
    clock.advance(4.9)
    assert coalescer.offer(2) is False
    clock.advance(0.1)
    assert coalescer.offer(3) is True  # exactly one interval: due
    assert coalescer.due


def test_offers_are_coalesced_to_the_newest_until_it_is_written(clock: FakeClock):
    coalescer = CheckpointCoalescer(clock, 5.0)
    for state in ({"row": 1}, {"row": 2}, {"row": 3}):
        coalescer.offer(state)

    assert coalescer.unwritten and coalescer.newest == {"row": 3}

    coalescer.wrote()

    assert not coalescer.unwritten
    with pytest.raises(LookupError, match="no unwritten checkpoint state"):
        _ = coalescer.newest


def test_a_falsy_state_is_a_state_to_write(clock: FakeClock):
    coalescer = CheckpointCoalescer(clock, 5.0)
    coalescer.offer(None)
    assert coalescer.unwritten and coalescer.newest is None


def test_each_write_starts_the_next_interval(clock: FakeClock):
    coalescer = CheckpointCoalescer(clock, 5.0)
    clock.advance(5)
    assert coalescer.offer(1) is True
    coalescer.wrote()

    clock.advance(3)
    assert coalescer.offer(2) is False  # 3 s since the write, not 8 since the claim
    clock.advance(2)
    assert coalescer.offer(3) is True


def test_a_write_of_other_fields_starts_the_interval_and_keeps_the_state(clock: FakeClock):
    # Such as a publication or a refresh after a renewal with nothing offered since
    coalescer = CheckpointCoalescer(clock, 5.0)
    coalescer.offer(1, Progress(0.5))
    clock.advance(5)

    coalescer.wrote(state=False)

    assert not coalescer.due
    assert coalescer.unwritten and coalescer.newest == 1
    assert coalescer.progress_written is None


def test_restart_counts_the_interval_from_the_claim(clock: FakeClock):
    coalescer = CheckpointCoalescer(clock, 5.0)
    clock.advance(60)  # built long before the attempt ran

    coalescer.restart()

    assert coalescer.offer(1) is False
    clock.advance(5)
    assert coalescer.due


def test_a_failed_write_keeps_the_state_and_is_due_again_an_interval_later(clock: FakeClock):
    coalescer = CheckpointCoalescer(clock, 5.0)
    clock.advance(5)
    assert coalescer.offer("s") is True

    coalescer.postpone()  # the store was busy

    assert coalescer.unwritten and coalescer.newest == "s" and not coalescer.due
    clock.advance(5)
    assert coalescer.due


def test_a_zero_interval_makes_every_offer_due(clock: FakeClock):
    coalescer = CheckpointCoalescer(clock, 0)
    assert coalescer.offer(1) is True
    coalescer.wrote()
    assert coalescer.offer(2) is True


def test_progress_said_is_kept_until_said_again_and_goes_with_the_next_state(
    clock: FakeClock,
):
    coalescer = CheckpointCoalescer(clock, 5.0)
    assert coalescer.progress is None and coalescer.unwritten_progress() is None

    coalescer.offer(1, Progress(0.1, 1, 10))
    coalescer.offer(2)  # None: nothing new said, the last stands
    assert coalescer.progress == Progress(0.1, 1, 10)
    assert coalescer.unwritten_progress() == Progress(0.1, 1, 10)

    coalescer.wrote()
    assert coalescer.progress_written == Progress(0.1, 1, 10)
    assert coalescer.unwritten_progress() is None  # written with the state

    coalescer.offer(3, Progress(0.1, 1, 10))  # said again, unchanged
    assert coalescer.unwritten_progress() is None
    coalescer.offer(4, Progress(0.4, 4, 10))
    assert coalescer.unwritten_progress() == Progress(0.4, 4, 10)
