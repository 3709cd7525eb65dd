"""The reaper's decisions, in process: fakes for the joined session and the clock.

What it does on a real Spark Connect server (a SIGKILLed worker's action cut short, a
released session refused) is in tests/jobs/spark/test_spark_connect.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from checkpoint.clock import FakeClock
from checkpoint.errors import LeaseLost
from jobs import Chunk, ChunkStopped
from jobs.chunk import Takeover
from jobs.spark import ChunkJobGroup
from jobs.spark import job as spark_module
from jobs.spark import reaper as spark_reaper
from jobs.spark import session as spark_session
from jobs.spark.interrupt import OperationTag
from jobs.spark.reaper import (
    REAP_WAIT_SECONDS,
    ConnectSession,
    claim_tag,
    is_session_closed,
    join_session,
    prepare_attempt,
    reap,
    session_released,
)
from jobs.spark.settings import SparkSettings

SESSION = ConnectSession("10.0.0.5:15002", "7d0c3a7e-8f55-4a43-9d7e-1f2a3b4c5d6e", "alice")
RECORDED = json.dumps(SESSION.__dict__)
REMOTE = "sc://spark-connect:15002/;token=s3cret;use_ssl=true;user_id=bob"


class FakeSession:
    """A joined session: records the calls; ``running`` answers from a script."""

    def __init__(
        self,
        *,
        operations: Sequence[str] = ("op-1", "op-2"),
        running_for: int = 1,
        fail: BaseException | None = None,
    ):
        self.operations = list(operations)
        self.running_for = running_for  # how many looks still find them running
        self.fail = fail
        self.calls: list[tuple[Any, ...]] = []

    def interrupt_tag(self, tag: str) -> list[str]:
        self.calls.append(("interrupt_tag", tag))
        if self.fail is not None:
            raise self.fail
        return list(self.operations)

    def interrupt_all(self) -> list[str]:
        self.calls.append(("interrupt_all",))
        if self.fail is not None:
            raise self.fail
        return list(self.operations)

    def running(self, operation_ids: Sequence[str]) -> list[str]:
        self.calls.append(("running", tuple(operation_ids)))
        self.running_for -= 1
        return list(self.operations) if self.running_for >= 0 else []

    def release(self) -> None:
        self.calls.append(("release",))

    def close(self) -> None:
        self.calls.append(("close",))
        raise RuntimeError("closing is best effort")


def joined_by(session: FakeSession, urls: list[str] | None = None):
    def join(url: str) -> FakeSession:
        if urls is not None:
            urls.append(url)
        return session

    return join


def takeover(*, gone: bool, recorded: str | None = RECORDED) -> Takeover:
    return Takeover(owner="host:41:abcd", claim="c1a1m", spark_session=recorded, owner_gone=gone)


# --------------------------------------------------------------------------- what is reaped


def test_an_alive_owner_loses_only_the_attempts_tagged_operations(caplog):
    # Given the previous attempt's worker alive (it lost the lease, or handed it back)
    fake, urls, clock = FakeSession(), [], FakeClock()

    # When the new attempt reaps it
    with caplog.at_level(logging.INFO, logger="jobs.spark.reaper"):
        reaped = reap(
            takeover(gone=False),
            REMOTE,
            join=joined_by(fake, urls),
            clock=clock,
            what="chunk 3 of j",
        )

    # Then only the attempt's tag is interrupted, waited for, and the session kept
    assert fake.calls == [
        ("interrupt_tag", claim_tag("c1a1m")),
        ("running", ("op-1", "op-2")),
        ("running", ("op-1", "op-2")),
        ("close",),
    ]
    assert reaped is not None and not reaped.released and not reaped.gone
    assert reaped.interrupted == ("op-1", "op-2") and reaped.still_running == ()
    assert reaped.seconds == pytest.approx(0.5)  # one poll
    # joined through our URL's parameters, at the recorded endpoint, session and user
    assert urls == [
        f"sc://10.0.0.5:15002/;token=s3cret;use_ssl=true;"
        f"session_id={SESSION.session_id};user_id=alice"
    ]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert line.startswith(
        "chunk 3 of j: reaped the previous attempt: interrupted 2 "
        "operation(s) chunkrunner-claim-c1a1m in session"
    )


def test_a_gone_owners_session_is_interrupted_waited_for_and_released(caplog):
    fake = FakeSession(running_for=2)

    with caplog.at_level(logging.INFO, logger="jobs.spark.reaper"):
        reaped = reap(takeover(gone=True), REMOTE, join=joined_by(fake), clock=FakeClock())

    # every operation of the session, waited on until none runs, then the release
    assert fake.calls == [
        ("interrupt_all",),
        ("running", ()),
        ("running", ()),
        ("running", ()),
        ("release",),
        ("close",),
    ]
    assert reaped is not None and reaped.released and reaped.seconds == pytest.approx(1.0)
    assert "(worker host:41:abcd gone), and released the session" in caplog.text


def test_a_gone_owners_session_is_released_even_with_nothing_running():
    fake = FakeSession(operations=(), running_for=0)

    reaped = reap(takeover(gone=True), REMOTE, join=joined_by(fake), clock=FakeClock())

    assert fake.calls == [("interrupt_all",), ("running", ()), ("release",), ("close",)]
    assert reaped is not None and reaped.released and reaped.interrupted == ()


def test_nothing_tagged_running_means_no_wait():
    fake = FakeSession(operations=())

    reaped = reap(takeover(gone=False), REMOTE, join=joined_by(fake), clock=FakeClock())

    assert fake.calls == [("interrupt_tag", claim_tag("c1a1m")), ("close",)]
    assert reaped is not None and reaped.interrupted == ()


def test_this_processs_own_session_is_never_released():
    # A record naming our own session (this worker held the chunk before) with a
    # heartbeat misread as gone: releasing it would break every chunk we run.
    fake = FakeSession()

    reaped = reap(
        takeover(gone=True),
        REMOTE,
        own_session_id=SESSION.session_id,
        join=joined_by(fake),
        clock=FakeClock(),
    )

    assert fake.calls[0] == ("interrupt_tag", claim_tag("c1a1m"))
    assert ("release",) not in fake.calls and reaped is not None and not reaped.released


def test_the_wait_is_bounded_and_the_session_still_released(caplog):
    fake = FakeSession(running_for=10_000)  # a task that ignores the kill
    clock = FakeClock()

    with caplog.at_level(logging.INFO, logger="jobs.spark.reaper"):
        reaped = reap(
            takeover(gone=True),
            REMOTE,
            join=joined_by(fake),
            clock=clock,
            wait_seconds=3,
            poll_seconds=1,
        )

    assert reaped is not None and reaped.still_running == ("op-1", "op-2")
    assert reaped.seconds == pytest.approx(3) and reaped.released
    assert clock.sleeps == [1, 1, 1]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "the chunk: 2 operation(s) of the previous attempt still ran after 3.0 s; going on"
    ]
    assert "still running: op-1, op-2" in caplog.text


def test_the_wait_ends_when_the_chunk_must_stop():
    fake = FakeSession(running_for=10_000)

    reaped = reap(
        takeover(gone=False), REMOTE, join=joined_by(fake), clock=FakeClock(), stop=lambda: True
    )

    assert reaped is not None and reaped.still_running and reaped.seconds == 0
    assert REAP_WAIT_SECONDS > 0


# --------------------------------------------------------------------------- what is not


def test_nothing_recorded_nothing_reaped():
    def join(url: str) -> FakeSession:
        raise AssertionError("no session to join")

    assert reap(takeover(gone=True, recorded=None), REMOTE, join=join) is None


@pytest.mark.parametrize(
    "recorded",
    [
        "{not json",
        "[]",
        '{"endpoint": "h:1"}',
        '{"endpoint": "", "session_id": "s", "user_id": ""}',
    ],
)
def test_an_unreadable_record_is_named_and_skipped(recorded, caplog):
    with caplog.at_level(logging.WARNING, logger="jobs.spark.reaper"):
        assert reap(takeover(gone=True, recorded=recorded), REMOTE) is None
    assert "not a recorded Connect session" in caplog.text


def test_a_server_out_of_reach_costs_a_warning_and_the_attempt_goes_on(caplog):
    def join(url: str) -> FakeSession:
        raise OSError("connection refused")

    with caplog.at_level(logging.WARNING, logger="jobs.spark.reaper"):
        assert reap(takeover(gone=True), REMOTE, join=join) is None
    assert "could not reap" in caplog.text and "connection refused" in caplog.text


def test_a_failing_call_costs_a_warning_and_closes_the_client(caplog):
    fake = FakeSession(fail=RuntimeError("UNAVAILABLE: deadline exceeded"))

    with caplog.at_level(logging.WARNING, logger="jobs.spark.reaper"):
        assert reap(takeover(gone=True), REMOTE, join=joined_by(fake)) is None

    assert fake.calls == [("interrupt_all",), ("close",)]
    assert "going on: its output is fenced" in caplog.text


def test_a_session_closed_already_has_nothing_to_reap(caplog):
    closed = RuntimeError("wrapped")
    closed.__cause__ = RuntimeError("[INVALID_HANDLE.SESSION_CLOSED] Handle 7d0c is invalid")
    fake = FakeSession(fail=closed)

    with caplog.at_level(logging.INFO, logger="jobs.spark.reaper"):
        reaped = reap(takeover(gone=True), REMOTE, join=joined_by(fake), clock=FakeClock())

    assert reaped is not None and reaped.gone and not reaped.released
    assert "is closed already: nothing to reap" in caplog.text


def test_is_session_closed_looks_through_causes():
    inner = RuntimeError("[INVALID_HANDLE.SESSION_CLOSED] x")
    outer = ValueError("outer")
    outer.__context__ = inner
    assert is_session_closed(outer) and not is_session_closed(ValueError("other"))
    assert not is_session_closed(None)


def test_the_session_url_keeps_our_parameters_and_takes_the_recorded_identity():
    assert SESSION.url("sc://h:1") == (
        f"sc://10.0.0.5:15002/;session_id={SESSION.session_id};user_id=alice"
    )
    empty_user = ConnectSession("h:2", "s", "")
    assert empty_user.url("sc://h:1/;session_id=old") == "sc://h:2/;session_id=s;user_id="


# --------------------------------------------------------------------------- the hook


class FakeControl:
    """Enough of a ChunkControl for the hook and the job group."""

    def __init__(self, claim: str, taken_over: Takeover | None, *, lost: bool = False):
        self.claim = claim
        self.taken_over = taken_over
        self.recorded: list[str] = []
        self.lost = lost
        self.stopping = False
        self.offered: list[Any] = []

    def record_spark_session(self, session: str) -> None:
        if self.lost:
            raise LeaseLost("taken over")
        self.recorded.append(session)

    def offer(self, state: Any, progress: Any = None) -> None:
        self.offered.append(state)

    def raise_if_stopped(self) -> None:
        if self.stopping:
            raise ChunkStopped("stopping")


def a_chunk(control: FakeControl) -> Chunk:
    return Chunk(
        job_id="j", index=3, payload=None, params=None, state=None, attempt=2, control=control
    )  # type: ignore[arg-type]


class FakeConf:
    def __init__(self, closed: bool, *, closed_after: int | None = None):
        self.closed = closed
        self.closed_after = closed_after  # the probe that first finds it closed
        self.asked: list[str] = []

    def get(self, key: str) -> str:
        self.asked.append(key)
        if self.closed or (self.closed_after is not None and len(self.asked) > self.closed_after):
            raise RuntimeError("[INVALID_HANDLE.SESSION_CLOSED] Handle own-session is invalid")
        return "UTC"


class FakeConnect:
    """Looks like a Spark Connect session to ``is_connect`` (by its module)."""

    __module__ = "pyspark.sql.connect.session"

    def __init__(
        self, session_id: str = "own-session", *, fail_interrupt: bool = False, closed: bool = False
    ):
        self.session_id = session_id
        self.conf = FakeConf(closed)
        self.tags: set[str] = set()
        self.interrupted: list[str] = []
        self.fail_interrupt = fail_interrupt
        self.stopped = False
        self.is_stopped = False

    def addTag(self, tag: str) -> None:  # noqa: N802 - pyspark's names
        self.tags.add(tag)

    def removeTag(self, tag: str) -> None:  # noqa: N802
        self.tags.discard(tag)

    def getTags(self) -> set[str]:  # noqa: N802
        return set(self.tags)

    def interruptTag(self, tag: str) -> None:  # noqa: N802
        if self.fail_interrupt:
            raise RuntimeError("[INVALID_HANDLE.SESSION_CLOSED] closed")
        self.interrupted.append(tag)

    def stop(self) -> None:
        self.stopped = True
        raise RuntimeError("the server closed it already")


@pytest.fixture
def hooked(monkeypatch):
    """The hook with this process's session and remote faked, and reap recorded."""
    reaps: list[tuple[Takeover, str, dict[str, Any]]] = []
    own = json.dumps({"endpoint": "h:1", "session_id": "own-session", "user_id": "me"})
    monkeypatch.setattr(spark_reaper, "connect_session_text", lambda: own)
    monkeypatch.setattr(spark_reaper, "connect_remote", lambda: "sc://h:1")
    monkeypatch.setattr(
        spark_reaper, "reap", lambda taken, remote, **kw: reaps.append((taken, remote, kw))
    )
    return reaps, own


def test_an_attempt_records_its_session_and_reaps_once(hooked):
    reaps, own = hooked
    control = FakeControl("claim-once", takeover(gone=True))
    chunk, spark = a_chunk(control), FakeConnect()

    prepare_attempt(spark, chunk)  # type: ignore[arg-type]
    prepare_attempt(spark, chunk)  # type: ignore[arg-type]  # a second block: nothing more

    assert control.recorded == [own]
    ((taken, remote, kw),) = reaps
    assert taken is control.taken_over and remote == "sc://h:1"
    assert kw["own_session_id"] == "own-session" and kw["what"] == "chunk 3 of j"
    assert kw["stop"]() is False


def test_another_session_than_the_processs_is_not_recorded(hooked):
    reaps, _ = hooked
    control = FakeControl("claim-other", None)

    prepare_attempt(FakeConnect("someone-else"), a_chunk(control))  # type: ignore[arg-type]

    assert control.recorded == [] and reaps == []


def test_recording_on_a_lost_chunk_raises_lease_lost(hooked):
    with pytest.raises(LeaseLost):
        prepare_attempt(FakeConnect(), a_chunk(FakeControl("claim-lost", None, lost=True)))  # type: ignore[arg-type]


def test_without_a_remote_of_its_own_the_hook_warns(hooked, monkeypatch, caplog):
    reaps, _ = hooked
    monkeypatch.setattr(spark_reaper, "connect_remote", lambda: None)

    with caplog.at_level(logging.WARNING, logger="jobs.spark.reaper"):
        prepare_attempt(FakeConnect(), a_chunk(FakeControl("claim-noremote", takeover(gone=True))))  # type: ignore[arg-type]

    assert reaps == [] and "no Spark Connect session of its own" in caplog.text


def test_the_prepared_claims_are_bounded(hooked, monkeypatch):
    monkeypatch.setattr(spark_reaper, "_PREPARED_MAX", 2)
    for claim in ("bound-1", "bound-2", "bound-3"):
        prepare_attempt(FakeConnect(), a_chunk(FakeControl(claim, None)))  # type: ignore[arg-type]
    assert list(spark_reaper._prepared)[-2:] == ["bound-2", "bound-3"]
    assert "bound-1" not in spark_reaper._prepared


# --------------------------------------------------------------------------- the job group


def test_the_job_group_tags_the_attempt_and_prepares_it(monkeypatch):
    prepared: list[Chunk] = []
    monkeypatch.setattr(
        spark_module, "prepare_attempt", lambda spark, chunk: prepared.append(chunk)
    )
    spark, chunk = FakeConnect(), a_chunk(FakeControl("claim-tags", None))

    with ChunkJobGroup(spark, chunk, poll_seconds=0.01) as outer:  # type: ignore[arg-type]
        with ChunkJobGroup(spark, chunk, poll_seconds=0.01) as inner:  # type: ignore[arg-type]
            assert spark.tags == {outer.id, inner.id, "chunkrunner-claim-claim-tags"}
        assert spark.tags == {outer.id, "chunkrunner-claim-claim-tags"}  # the outer's kept
    assert spark.tags == set() and prepared == [chunk, chunk]


def test_a_closed_session_hands_the_chunk_back_and_is_rebuilt_next(monkeypatch):
    monkeypatch.setattr(spark_module, "prepare_attempt", lambda spark, chunk: None)
    noted: list[Any] = []
    monkeypatch.setattr(spark_module, "session_closed_on_server", noted.append)
    spark = FakeConnect()

    with pytest.raises(ChunkStopped, match="closed on the server") as stopped:
        with ChunkJobGroup(spark, a_chunk(FakeControl("claim-closed", None))):  # type: ignore[arg-type]
            raise RuntimeError("[INVALID_HANDLE.SESSION_CLOSED] Handle own-session is invalid")

    assert noted == [spark] and "SESSION_CLOSED" in str(stopped.value.__cause__)


def test_an_operation_cancelled_by_a_release_hands_the_chunk_back_too(monkeypatch):
    # A stalled worker's running operation fails as cancelled when a reaper releases
    # its session; the server then refuses the session, which tells the two apart.
    monkeypatch.setattr(spark_module, "prepare_attempt", lambda spark, chunk: None)
    spark = FakeConnect(closed=True)

    with pytest.raises(ChunkStopped, match="closed on the server"):
        with ChunkJobGroup(spark, a_chunk(FakeControl("claim-cancelled", None))):  # type: ignore[arg-type]
            raise RuntimeError("[OPERATION_CANCELED] Operation has been canceled.")

    assert spark.conf.asked == ["spark.sql.session.timeZone"]


def test_a_release_a_moment_after_the_cancel_is_waited_for():
    # The reaper releases one poll after the operation it interrupted ended.
    spark, clock = FakeConnect(), FakeClock()
    spark.conf.closed_after = 2
    cancelled = RuntimeError("[OPERATION_CANCELED] Operation has been canceled.")

    assert session_released(spark, cancelled, clock=clock)

    assert len(spark.conf.asked) == 3 and clock.sleeps == [0.5, 0.5]


def test_a_cancel_in_a_session_still_open_stays_the_users(monkeypatch):
    spark, clock = FakeConnect(), FakeClock()
    cancelled = RuntimeError("[OPERATION_CANCELED] someone else interrupted it")

    assert not session_released(spark, cancelled, clock=clock, grace_seconds=2)

    assert len(spark.conf.asked) == 5 and sum(clock.sleeps) == 2
    assert not session_released(spark, ZeroDivisionError(), clock=clock)
    assert len(spark.conf.asked) == 5  # other errors: the server is not asked


def test_other_errors_stay_the_users(monkeypatch):
    monkeypatch.setattr(spark_module, "prepare_attempt", lambda spark, chunk: None)
    with pytest.raises(ZeroDivisionError):
        with ChunkJobGroup(FakeConnect(), a_chunk(FakeControl("claim-user", None))):  # type: ignore[arg-type]
            raise ZeroDivisionError


def test_a_cancel_the_server_refuses_still_ends_the_block(monkeypatch):
    monkeypatch.setattr(spark_module, "prepare_attempt", lambda spark, chunk: None)
    control = FakeControl("claim-refused", None)
    spark = FakeConnect(fail_interrupt=True)
    group = ChunkJobGroup(spark, a_chunk(control), poll_seconds=0.01)  # type: ignore[arg-type]

    with pytest.raises(ChunkStopped):
        with group:
            control.stopping = True
            while not group.cancelled:
                pass

    assert group.cancelled and spark.interrupted == []


def test_operation_tag_without_an_attempt_tag():
    spark = FakeConnect()
    tag = OperationTag(spark, "t")  # type: ignore[arg-type]
    tag.enter()
    assert spark.tags == {"t"}
    tag.leave()
    assert spark.tags == set()


# --------------------------------------------------------------------------- the session


@pytest.fixture
def process_session(monkeypatch):
    """spark_session's globals holding a fake Connect session; restored after."""
    settings = SparkSettings(remote="sc://h:1")
    fake = FakeConnect()
    monkeypatch.setattr(spark_session, "_session", fake)
    monkeypatch.setattr(spark_session, "_session_settings", settings)
    monkeypatch.setattr(spark_session, "_session_closed", False)
    built: list[Any] = []

    def build(settings: SparkSettings) -> FakeConnect:
        built.append(FakeConnect("rebuilt"))
        return built[-1]

    monkeypatch.setattr(spark_session, "_build_session", build)
    return fake, settings, built


def test_a_session_the_server_closed_is_built_anew(process_session, monkeypatch):
    fake, settings, built = process_session
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    monkeypatch.setattr(spark_session, "_connect_mode_was_set", False)

    assert spark_session.connect_remote() == "sc://h:1"
    assert spark_session.spark_session(settings) is fake  # alive: kept
    assert not spark_session.session_closed_on_server(FakeConnect())  # not ours
    assert spark_session.session_closed_on_server(fake)

    again = spark_session.spark_session(settings)

    assert built == [again] and fake.stopped  # stopped (its error ignored), then rebuilt
    assert spark_session.spark_session(settings) is again


def test_stopping_a_session_the_server_closed(process_session):
    fake, _, _ = process_session
    spark_session.session_closed_on_server(fake)

    spark_session.stop_spark()

    assert fake.stopped and spark_session.connect_remote() is None


# --------------------------------------------------------------------------- pyspark's client


def test_the_pyspark_client_adapter():
    pytest.importorskip("pyspark.sql.connect.client")
    from pyspark.sql.connect.proto import base_pb2

    # Building the client connects nothing (gRPC channels are lazy).
    joined = join_session(SESSION.url("sc://127.0.0.1:1"))
    joined.close()

    state = base_pb2.GetStatusResponse.OperationStatus
    answer = base_pb2.GetStatusResponse(
        operation_statuses=[
            state(operation_id="a", state=state.OPERATION_STATE_RUNNING),
            state(operation_id="b", state=state.OPERATION_STATE_TERMINATING),
        ]
    )

    class Client:
        calls: list[Any] = []

        def interrupt_tag(self, tag: str) -> None:
            self.calls.append(tag)

        def interrupt_all(self) -> list[str]:
            return ["x"]

        def _get_operation_statuses(self, ids: list[str] | None) -> Any:
            self.calls.append(ids)
            return answer

        def release_session(self) -> None:
            self.calls.append("release")

        def close(self) -> None:
            self.calls.append("close")

    adapter = spark_reaper._ClientSession(Client())
    assert adapter.interrupt_tag("t") == [] and adapter.interrupt_all() == ["x"]
    assert adapter.running([]) == ["a"] and adapter.running(["a", "b"]) == ["a"]
    adapter.release()
    adapter.close()
    assert Client.calls == ["t", None, ["a", "b"], "release", "close"]
