"""The checkpoint throttle the runner's TaskControl and the ChunkEnvironment harness share:
at most one write per interval, offers coalesced to the newest, a flush of what is
unwritten. Time on a FakeClock; the owners' own tests (tests/runner/worker/test_task_control.py,
tests/jobs/test_chunk_environment.py) check that each writes as the throttle says."""

from __future__ import annotations

import pytest

from checkpoint.clock import FakeClock
from checkpoint.records import Progress
from checkpoint.throttle import CheckpointThrottle


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_write_is_due_once_an_interval_has_passed_since_the_claim(clock: FakeClock):
    throttle = CheckpointThrottle(clock, 5.0)

    assert throttle.offer(1) is False
    clock.advance(4.9)
    assert throttle.offer(2) is False
    clock.advance(0.1)
    assert throttle.offer(3) is True  # exactly one interval: due
    assert throttle.due


def test_offers_are_coalesced_to_the_newest_until_it_is_written(clock: FakeClock):
    throttle = CheckpointThrottle(clock, 5.0)
    for state in ({"row": 1}, {"row": 2}, {"row": 3}):
        throttle.offer(state)

    assert throttle.unwritten and throttle.newest == {"row": 3}

    throttle.wrote()

    assert not throttle.unwritten
    with pytest.raises(LookupError, match="no unwritten checkpoint state"):
        _ = throttle.newest


def test_a_falsy_state_is_a_state_to_write(clock: FakeClock):
    throttle = CheckpointThrottle(clock, 5.0)
    throttle.offer(None)
    assert throttle.unwritten and throttle.newest is None


def test_each_write_starts_the_next_interval(clock: FakeClock):
    throttle = CheckpointThrottle(clock, 5.0)
    clock.advance(5)
    assert throttle.offer(1) is True
    throttle.wrote()

    clock.advance(3)
    assert throttle.offer(2) is False  # 3 s since the write, not 8 since the claim
    clock.advance(2)
    assert throttle.offer(3) is True


def test_a_write_of_other_fields_starts_the_interval_and_keeps_the_state(clock: FakeClock):
    # Such as a publication or a refresh after a renewal with nothing offered since
    throttle = CheckpointThrottle(clock, 5.0)
    throttle.offer(1, Progress(0.5))
    clock.advance(5)

    throttle.wrote(state=False)

    assert not throttle.due
    assert throttle.unwritten and throttle.newest == 1
    assert throttle.progress_written is None


def test_restart_counts_the_interval_from_the_claim(clock: FakeClock):
    throttle = CheckpointThrottle(clock, 5.0)
    clock.advance(60)  # built long before the attempt ran

    throttle.restart()

    assert throttle.offer(1) is False
    clock.advance(5)
    assert throttle.due


def test_a_failed_write_keeps_the_state_and_is_due_again_an_interval_later(clock: FakeClock):
    throttle = CheckpointThrottle(clock, 5.0)
    clock.advance(5)
    assert throttle.offer("s") is True

    throttle.postpone()  # the store was busy

    assert throttle.unwritten and throttle.newest == "s" and not throttle.due
    clock.advance(5)
    assert throttle.due


def test_a_zero_interval_makes_every_offer_due(clock: FakeClock):
    throttle = CheckpointThrottle(clock, 0)
    assert throttle.offer(1) is True
    throttle.wrote()
    assert throttle.offer(2) is True


def test_progress_said_is_kept_until_said_again_and_goes_with_the_next_state(
    clock: FakeClock,
):
    throttle = CheckpointThrottle(clock, 5.0)
    assert throttle.progress is None and throttle.unwritten_progress() is None

    throttle.offer(1, Progress(0.1, 1, 10))
    throttle.offer(2)  # None: nothing new said, the last stands
    assert throttle.progress == Progress(0.1, 1, 10)
    assert throttle.unwritten_progress() == Progress(0.1, 1, 10)

    throttle.wrote()
    assert throttle.progress_written == Progress(0.1, 1, 10)
    assert throttle.unwritten_progress() is None  # written with the state

    throttle.offer(3, Progress(0.1, 1, 10))  # said again, unchanged
    assert throttle.unwritten_progress() is None
    throttle.offer(4, Progress(0.4, 4, 10))
    assert throttle.unwritten_progress() == Progress(0.4, 4, 10)
