"""``ChunkedJob`` as users write it: defaults, the queue name, checks made at class
definition, and ``Chunk``'s checkpoint / stop protocol against a recording control."""

from __future__ import annotations

import sys
import textwrap
from typing import Any

import pytest

from checkpoint.errors import JobNotFound, LeaseLost
from checkpoint.layout import POISON_SUFFIX, REJECTED_SUFFIX
from checkpoint.records import Progress
from jobs.backoff import Backoff
from jobs.chunk import Chunk
from jobs.errors import ChunkStopped, JobDefinitionError
from jobs.job import ChunkedJob, kebab_case
from jobs.registry import load_job_class


class MigrateOrders(ChunkedJob):
    def split(self, params: Any) -> Any:
        return []

    def process(self, chunk: Chunk) -> Any:
        return None


class Unfinished(ChunkedJob):
    """A base class of the user's may leave process to its subclasses: defined, not run."""

    def split(self, params: Any) -> Any:
        return []


class Tuned(ChunkedJob):
    queue = "tuned-queue"
    lease_seconds = 2
    max_attempts = 1
    checkpoint_interval_seconds = 0
    max_chunk_seconds = 0.5
    backoff = Backoff(first_seconds=1, max_seconds=2)


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "queue"),
    [
        ("MigrateOrders", "migrate-orders"),
        ("HTTPImport2", "http-import2"),
        ("ABCJob", "abc-job"),
        ("lower", "lower"),
        ("My_Job", "my-job"),
        ("Job2Go", "job2-go"),
        ("S3Export", "s3-export"),
    ],
)
def test_kebab_case(name, queue):
    assert kebab_case(name) == queue


def test_defaults():
    assert MigrateOrders.queue == "migrate-orders"
    assert MigrateOrders.poison_queue() == "migrate-orders" + POISON_SUFFIX
    assert MigrateOrders.lease_seconds is None  # sized by the workers
    assert MigrateOrders.lease_bounds == (10, 600)
    assert MigrateOrders.max_attempts == 5
    assert MigrateOrders.checkpoint_interval_seconds == 5
    assert MigrateOrders.max_chunk_seconds is None
    assert isinstance(MigrateOrders.backoff, Backoff)


def test_overrides_are_kept():
    assert Tuned.queue == "tuned-queue"
    assert Tuned.poison_queue() == "tuned-queue-poison"
    assert (Tuned.lease_seconds, Tuned.max_attempts) == (2, 1)
    assert Tuned.max_chunk_seconds == 0.5


def test_job_type_is_module_and_qualified_name():
    assert MigrateOrders.job_type() == f"{__name__}:MigrateOrders"

    class Inner(ChunkedJob):
        pass

    assert Inner.job_type().endswith(":test_job_type_is_module_and_qualified_name.<locals>.Inner")


def test_a_subclass_gets_its_own_queue_unless_it_names_one():
    class Base(ChunkedJob):
        queue = "shared-base"

    class Child(Base):
        pass

    class Sibling(Base):
        queue = "shared-base"

    assert Child.queue == "child"
    assert Sibling.queue == "shared-base"


def test_longest_queue_name_leaves_room_for_the_poison_suffix():
    class Long(ChunkedJob):
        queue = "q" * (63 - len(POISON_SUFFIX))

    assert len(Long.poison_queue()) == 63
    with pytest.raises(JobDefinitionError, match="queue"):

        class TooLong(ChunkedJob):
            queue = "q" * (64 - len(POISON_SUFFIX))


def test_a_type_taking_submissions_leaves_room_for_its_rejected_queue():
    # Given the longest queue a type with an intake may have
    class Taking(ChunkedJob):
        queue = "q" * (63 - len(REJECTED_SUFFIX))
        intake = True

    # Then its intake queues are <queue>-intake and <queue>-intake-rejected, of 63
    assert Taking.intake_queue() == Taking.queue + "-intake"
    assert Taking.rejected_queue() == Taking.queue + "-intake-rejected"
    assert len(Taking.rejected_queue()) == 63
    # and one character more is refused, naming the suffix it leaves room for
    with pytest.raises(JobDefinitionError, match="room is left for '-intake-rejected'"):

        class TooLong(ChunkedJob):
            queue = "q" * (64 - len(REJECTED_SUFFIX))
            intake = True


@pytest.mark.parametrize(
    "queue", ["ab", "Upper-Case", "under_score", "double--hyphen", "-lead", "trail-", 7]
)
def test_bad_queue_names_are_refused_at_class_definition(queue):
    with pytest.raises(JobDefinitionError, match=r"queue = .*set `queue = \.\.\.`"):
        type("Bad", (ChunkedJob,), {"queue": queue})


def test_a_class_name_too_short_for_a_queue_asks_for_one():
    with pytest.raises(JobDefinitionError, match="queue"):

        class Ab(ChunkedJob):
            pass


# --------------------------------------------------------------------------- several queues


def test_one_queue_is_the_queue_itself_and_several_are_numbered():
    class One(MigrateOrders):
        queue = "orders"

    class Four(MigrateOrders):
        queue = "orders"
        queues = 4

    assert One.chunk_queues() == ("orders",)
    assert One.poison_queues() == ("orders-poison",)
    assert Four.chunk_queues() == ("orders-0", "orders-1", "orders-2", "orders-3")
    assert Four.poison_queues() == tuple(f"orders-{n}-poison" for n in range(4))
    # Blocks of 32 consecutive chunks dealt round-robin (checkpoint.layout.QUEUE_BLOCK)
    assert [Four.chunk_queue(i) for i in (0, 31, 32, 95, 96, 128)] == [
        "orders-0",
        "orders-0",
        "orders-1",
        "orders-2",
        "orders-3",
        "orders-0",
    ]
    assert {One.chunk_queue(i) for i in range(200)} == {"orders"}


@pytest.mark.parametrize("queues", [0, 65, True, 2.0, "4", None])
def test_a_queue_count_that_is_not_1_to_64_is_refused_in_one_line(queues):
    with pytest.raises(JobDefinitionError) as refused:
        type("Spread", (MigrateOrders,), {"queues": queues})
    assert str(refused.value) == (
        f"Spread.queues must be a whole number of queues from 1 to 64, not {queues!r}"
    )


def test_the_longest_queue_name_leaves_room_for_the_last_numbered_poison_queue():
    # '<queue>-63-poison' is 10 characters past the name: 53 are left for it
    fits: type[ChunkedJob] = type("Fits", (MigrateOrders,), {"queue": "q" * 53, "queues": 64})
    assert len(fits.poison_queues()[-1]) == 63
    with pytest.raises(JobDefinitionError) as refused:
        type("Long", (MigrateOrders,), {"queue": "q" * 54, "queues": 64})
    assert "use 3-53 lowercase letters" in str(refused.value)
    assert "room is left for '-63-poison'" in str(refused.value)
    # The same name fits one queue, and nine (one digit fewer)
    type("One", (MigrateOrders,), {"queue": "q" * 54})
    type("Nine", (MigrateOrders,), {"queue": "q" * 54, "queues": 9})


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("lease_seconds", 0, "lease_seconds"),
        ("lease_seconds", 604_801, "lease_seconds"),
        ("lease_seconds", 2.5, "lease_seconds"),
        ("lease_seconds", True, "lease_seconds"),
        ("lease_seconds", "30", "lease_seconds"),
        ("lease_bounds", 10, r"lease_bounds must be \(lowest, highest\) seconds"),
        ("lease_bounds", (10,), r"lease_bounds must be \(lowest, highest\) seconds"),
        ("lease_bounds", (0, 600), r"lease_bounds\[0\]"),
        ("lease_bounds", (20, 10), r"lease_bounds\[1\]"),
        ("lease_bounds", (10, 604_801), r"lease_bounds\[1\]"),
        ("lease_bounds", (10.5, 600), r"lease_bounds\[0\]"),
        ("max_attempts", 0, "max_attempts"),
        ("max_attempts", False, "max_attempts"),
        ("max_attempts", 2.0, "max_attempts"),
        ("feed_window", 0, "feed_window"),
        ("feed_window", 64.0, "feed_window"),
        ("checkpoint_interval_seconds", -1, "checkpoint_interval_seconds"),
        ("checkpoint_interval_seconds", "5", "checkpoint_interval_seconds"),
        ("checkpoint_interval_seconds", True, "checkpoint_interval_seconds"),
        ("max_chunk_seconds", 0, "max_chunk_seconds"),
        ("max_chunk_seconds", -5, "max_chunk_seconds"),
        ("max_chunk_seconds", True, "max_chunk_seconds"),
        ("backoff", {"first_seconds": 1}, "backoff"),
        ("resume_first", "yes", "resume_first must be True or False"),
        ("intake", 1, "intake must be True or False"),
        ("rate_limit", "200", r"rate_limit must be a count per unit, like '200/s'"),
        ("rate_limit", "0/s", "rate_limit"),
        ("rate_limit", 200, "rate_limit"),
        ("max_running", 0, "max_running must be a whole number >= 1"),
        ("max_running", 2.0, "max_running"),
        ("limits", ["orders-db"], r"limits must map resource names to rates"),
        ("limits", {"orders-db": "fast"}, r"limits\['orders-db'\] must be a count per unit"),
        ("limits", {"orders/db": "5/s"}, r"resource name 'orders/db' is not valid"),
        ("limits", {"bad-settings": "5/s"}, r"the queue's own name holds rate_limit"),
    ],
)
def test_bad_settings_are_refused_at_class_definition(setting, value, says):
    with pytest.raises(JobDefinitionError, match=says):
        type("BadSettings", (ChunkedJob,), {setting: value})


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("lease_seconds", 1),
        ("lease_seconds", 604_800),
        ("lease_seconds", None),
        ("lease_bounds", (1, 1)),
        ("lease_bounds", (5, 604_800)),
        ("checkpoint_interval_seconds", 0),
        ("checkpoint_interval_seconds", 0.25),
        ("max_chunk_seconds", 0.1),
        ("max_chunk_seconds", 3600),
        ("rate_limit", "1/h"),
        ("rate_limit", "6000/min"),
        ("max_running", 1),
        ("limits", {"orders-db": "50/s", "crm.api": "2.5/s"}),
        ("feed_window", 1),
    ],
)
def test_edge_settings_are_accepted(setting, value):
    cls = type("EdgeSettings", (ChunkedJob,), {setting: value})
    assert getattr(cls, setting) == value


def test_definition_errors_are_type_errors_too():
    assert issubclass(JobDefinitionError, TypeError)


# --------------------------------------------------------------------------- methods


def test_split_and_process_must_be_written():
    job = type("Bare", (ChunkedJob,), {})()
    with pytest.raises(NotImplementedError, match="Bare.split"):
        job.split({})
    with pytest.raises(NotImplementedError, match="Bare.process"):
        job.process(
            Chunk(
                job_id="j",
                index=0,
                payload=None,
                params=None,
                state=None,
                attempt=1,
                control=RecordingControl(),
            )
        )


def test_finalize_is_optional():
    assert MigrateOrders().finalize({}, None) is None  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Chunk


class RecordingControl:
    """A ChunkControl that records calls and raises what it is told to."""

    def __init__(self, raise_on_check: BaseException | None = None, stopping: bool = False):
        self.calls: list[tuple[str, Any]] = []
        self.progress: list[Progress | None] = []
        self.raise_on_check = raise_on_check
        self._stopping = stopping

    def offer(self, state: Any, progress: Progress | None = None) -> None:
        self.calls.append(("offer", state))
        self.progress.append(progress)

    def raise_if_stopped(self) -> None:
        self.calls.append(("check", None))
        if self.raise_on_check is not None:
            raise self.raise_on_check

    @property
    def stopping(self) -> bool:
        return self._stopping


def _chunk(control: RecordingControl, state: Any = None) -> Chunk:
    return Chunk(
        job_id="job-1",
        index=4,
        payload={"first": 0},
        params={"rows": 10},
        state=state,
        attempt=2,
        control=control,
    )


def test_chunk_exposes_what_process_needs():
    chunk = _chunk(RecordingControl(), state=7)
    assert (chunk.job_id, chunk.index, chunk.attempt) == ("job-1", 4, 2)
    assert chunk.payload == {"first": 0} and chunk.params == {"rows": 10}
    assert chunk.state == 7
    assert repr(chunk) == "Chunk(job_id='job-1', index=4, attempt=2)"


def test_checkpoint_offers_then_checks_and_keeps_the_newest_state():
    control = RecordingControl()
    chunk = _chunk(control)
    chunk.checkpoint(1)
    chunk.checkpoint({"row": 2})
    assert control.calls == [("offer", 1), ("check", None), ("offer", {"row": 2}), ("check", None)]
    assert chunk.state == {"row": 2}


@pytest.mark.parametrize("error", [LeaseLost("gone"), ChunkStopped("stopping")])
def test_checkpoint_is_the_cancellation_point(error):
    control = RecordingControl(raise_on_check=error)
    chunk = _chunk(control)
    with pytest.raises(type(error)):
        chunk.checkpoint(3)
    # The state was offered (so it can be flushed) before the stop was raised
    assert control.calls == [("offer", 3), ("check", None)]
    assert chunk.state == 3


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (0, Progress(0.0)),
        (0.25, Progress(0.25)),
        (1, Progress(1.0)),
        ((430, 1000), Progress(0.43, 430, 1000)),
        ([3, 4], Progress(0.75, 3, 4)),
        ((1.5, 6.0), Progress(0.25, 1.5, 6.0)),
        ((0, 5), Progress(0.0, 0, 5)),
    ],
)
def test_checkpoint_takes_progress_as_a_fraction_or_a_count(given, said):
    control = RecordingControl()
    _chunk(control).checkpoint("s", progress=given)
    assert control.progress == [said]
    assert control.calls == [("offer", "s"), ("check", None)]


@pytest.mark.parametrize(
    "bad",
    [
        -0.1,
        1.01,
        float("nan"),
        float("inf"),
        True,
        "50%",
        (5, 4),
        (1, 0),
        (-1, 4),
        (1, 2, 3),
        (1, None),
        {"done": 1, "total": 2},
        (float("nan"), 2),
    ],
)
def test_a_bad_progress_is_one_clear_error_and_nothing_is_offered(bad):
    control = RecordingControl()
    chunk = _chunk(control, state="before")
    rule = r"progress must be a fraction from 0 to 1, or \(done, total\) with 0 <= done <= "
    with pytest.raises(ValueError, match=rule + r"total and total > 0, not "):
        chunk.checkpoint("after", progress=bad)
    assert control.calls == [] and chunk.state == "before"


def test_checkpoint_without_progress_offers_none():
    control = RecordingControl()
    _chunk(control).checkpoint(1)
    assert control.progress == [None]


def test_stopping_flag_comes_from_the_control():
    assert _chunk(RecordingControl(stopping=True)).stopping is True
    assert _chunk(RecordingControl()).stopping is False


# --------------------------------------------------------------------------- registry


def test_load_job_class_by_module_and_name():
    assert load_job_class(f"{__name__}:MigrateOrders") is MigrateOrders


def test_load_job_class_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "userjobs_for_registry_test.py").write_text(
        textwrap.dedent(
            """
            from jobs import job

            class Local(job.ChunkedJob):
                queue = "local-jobs"

                def split(self, params):
                    return []

                def process(self, chunk):
                    return None
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        cls = load_job_class("userjobs_for_registry_test:Local")
    finally:
        sys.modules.pop("userjobs_for_registry_test", None)
    assert cls.queue == "local-jobs"


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("no_colon", "module:Class"),
        (":Cls", "module:Class"),
        ("mod:", "module:Class"),
        ("no_such_module_xyz:Job", "cannot import"),
        (f"{__name__}:Missing", "has no"),
        (f"{__name__}:RecordingControl", "not a ChunkedJob subclass"),
        (f"{__name__}:_chunk", "not a ChunkedJob subclass"),
    ],
)
def test_load_job_class_says_what_is_wrong(path, says):
    with pytest.raises(JobNotFound, match=says):
        load_job_class(path)


def test_load_job_class_refuses_a_class_that_could_only_fail_at_run_time():
    with pytest.raises(
        JobDefinitionError,
        match=r"^Unfinished \(.*test_job_class.py line \d+\) "
        r"defines no process\(\)",
    ):
        load_job_class(f"{__name__}:Unfinished")
