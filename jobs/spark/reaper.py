"""Cut short what an earlier attempt of a chunk left running on a Spark Connect server.

A Spark Connect operation outlives its client: a worker SIGKILLed mid-action leaves its
action running on the cluster until the server finds it abandoned (minutes by default,
docs/spark.md). So before an attempt that took a chunk over runs Spark work of its own,
it joins the session the previous attempt recorded with its claim (a second, low-level
client of that session: this process's own session is left alone) and:

- interrupts the previous **attempt's** operations, by the tag every operation of an
  attempt carries (:func:`claim_tag`). Only that: a worker process has one session for
  all its chunks, and a worker that is alive (it lost this chunk's lease to storage
  trouble, or handed it back on pause) goes on running its other chunks in it;
- if the previous owner is **gone** by its heartbeat, interrupts every operation of the
  session and then releases it: the server closes the session and refuses its later
  calls (``INVALID_HANDLE.SESSION_CLOSED``), a fence at the engine for a worker that
  was only stalled. Such a worker, once awake, hands its chunks back (not a failure)
  and builds a new session (:mod:`jobs.spark.job`);
- waits, at most :data:`REAP_WAIT_SECONDS`, until none of those operations still runs,
  asking the server (``GetStatus``: an interrupted operation is running until its
  execution thread has cancelled its Spark jobs).

One INFO line says what was interrupted and how long it took. A server out of reach
only costs a warning: the attempt goes on, its output fenced per attempt
(:mod:`jobs.spark.chunk_output`); the reaper saves the cluster's cores, not correctness.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from checkpoint.clock import Clock, SystemClock
from jobs.chunk import Chunk, Takeover
from jobs.spark.session import connect_remote, connect_session_text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Longest wait for the interrupted operations to end; past it the attempt goes on.
REAP_WAIT_SECONDS = 30.0
#: How often the server is asked whether they still run.
REAP_POLL_SECONDS = 0.5
#: Deadline of each call to the server (the client's own default is 10 minutes).
REAP_CALL_SECONDS = 10.0
#: Every operation of an attempt carries this prefix and the attempt's claim token.
CLAIM_TAG_PREFIX = "chunkrunner-claim-"
#: The server's error for a call in a session it closed (released, or expired).
SESSION_CLOSED = "INVALID_HANDLE.SESSION_CLOSED"
#: The server's error for an operation interrupted before it ended.
OPERATION_CANCELED = "OPERATION_CANCELED"
#: How long a worker whose operation was cancelled by someone else watches for its
#: session's release (a reaper releases it one poll after the cancel, plus two calls).
RELEASE_GRACE_SECONDS = 10.0
#: A runtime conf every session has: reading it asks the server about the session.
_PROBE_CONF = "spark.sql.session.timeZone"
#: How many attempts' claims :func:`prepare_attempt` remembers having prepared.
_PREPARED_MAX = 4096

_prepared_lock = threading.Lock()
_prepared: OrderedDict[str, None] = OrderedDict()


def claim_tag(claim: str) -> str:
    """The operation tag of every Spark Connect operation the attempt ``claim`` starts."""
    return f"{CLAIM_TAG_PREFIX}{claim}"


def is_session_closed(error: BaseException | None) -> bool:
    """True if ``error`` (or one of its causes) is the server refusing a closed session."""
    return _mentions(error, SESSION_CLOSED)


def session_released(
    spark: Any,
    error: BaseException,
    *,
    clock: Clock | None = None,
    grace_seconds: float = RELEASE_GRACE_SECONDS,
) -> bool:
    """True if ``error``, raised by Spark work in the Connect session ``spark``, came of
    the session being closed on the server.

    An operation running when a reaper takes its worker for gone fails as cancelled
    (``OPERATION_CANCELED``) a moment *before* the reaper releases the session (it
    waits for its interrupted operations to end first, one poll). So on such an error
    (one the chunk's own job group did not ask for) the server is asked (a config call)
    whether it still knows the session, for up to ``grace_seconds``."""
    if is_session_closed(error):
        return True
    if not _mentions(error, OPERATION_CANCELED):
        return False
    clock = clock or SystemClock()
    deadline = clock.monotonic() + grace_seconds
    while True:
        try:
            spark.conf.get(_PROBE_CONF)
        except Exception as probe:  # noqa: BLE001 - only its kind matters
            return is_session_closed(probe)
        if clock.monotonic() >= deadline:
            return False
        clock.sleep(REAP_POLL_SECONDS)


def _mentions(error: BaseException | None, error_class: str) -> bool:
    seen = 0
    while error is not None and seen < 10:
        if error_class in str(error):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


@dataclass(frozen=True)
class ConnectSession:
    """A Spark Connect session as an attempt recorded it with its claim.

    Attributes:
        endpoint: the server's ``host:port``.
        session_id: the session's id (a UUID).
        user_id: the user it was opened as ("" for none); part of the session's key.
    """

    endpoint: str
    session_id: str
    user_id: str

    @classmethod
    def from_text(cls, text: str) -> ConnectSession:
        """Parse :func:`jobs.spark.session.connect_session_text`'s JSON.

        Raises:
            ValueError: it is not such a record.
        """
        try:
            data = json.loads(text)
        except ValueError as bad:
            raise ValueError(f"not a recorded Connect session: {text!r}") from bad
        found = data if isinstance(data, dict) else {}
        values = [found.get(key) for key in ("endpoint", "session_id", "user_id")]
        strings = [value for value in values if isinstance(value, str)]
        if len(strings) != 3 or not strings[0] or not strings[1]:
            raise ValueError(f"not a recorded Connect session: {text!r}")
        return cls(*strings)

    def url(self, remote: str) -> str:
        """``remote`` (our own connection string) pointed at this session: its endpoint,
        session and user, with the rest of ``remote``'s parameters (a token, TLS) kept."""
        _, _, tail = remote.removeprefix("sc://").partition("/")
        kept = [
            part
            for part in tail.lstrip(";").split(";")
            if part and part.split("=", 1)[0] not in ("session_id", "user_id")
        ]
        params = [*kept, f"session_id={self.session_id}", f"user_id={self.user_id}"]
        return f"sc://{self.endpoint}/;" + ";".join(params)


class JoinedSession(Protocol):
    """What the reaper asks of a session it joined (pyspark's low-level client)."""

    def interrupt_tag(self, tag: str) -> list[str]:
        """Interrupt the session's operations carrying ``tag``; their ids."""
        ...

    def interrupt_all(self) -> list[str]:
        """Interrupt every operation of the session; their ids."""
        ...

    def running(self, operation_ids: Sequence[str]) -> list[str]:
        """Which of ``operation_ids`` (every operation of the session if empty) still run."""
        ...

    def release(self) -> None:
        """Close the session on the server (its later calls are refused)."""
        ...

    def close(self) -> None:
        """Close this client's channel (the session is left as it is)."""
        ...


@dataclass(frozen=True)
class Reaped:
    """What :func:`reap` did.

    Attributes:
        session_id: the session it joined.
        interrupted: the operations it interrupted.
        released: True if it released the session.
        still_running: operations still running when it stopped waiting (the bound was
            reached, or the chunk had to stop); empty if none.
        seconds: from joining to done.
        gone: True if the session was already closed on the server (nothing to reap).
    """

    session_id: str
    interrupted: tuple[str, ...]
    released: bool
    still_running: tuple[str, ...]
    seconds: float
    gone: bool = False


def reap(
    takeover: Takeover,
    remote: str,
    *,
    own_session_id: str | None = None,
    what: str = "the chunk",
    join: Callable[[str], JoinedSession] | None = None,
    clock: Clock | None = None,
    wait_seconds: float = REAP_WAIT_SECONDS,
    poll_seconds: float = REAP_POLL_SECONDS,
    stop: Callable[[], bool] = lambda: False,
) -> Reaped | None:
    """Cut short the Spark Connect work of the attempt ``takeover`` describes.

    Args:
        takeover: ``chunk.taken_over``.
        remote: this worker's own Spark Connect URL (its parameters are kept).
        own_session_id: this process's session: never released, whatever the record.
        what: names the chunk in the log lines.
        join: opens a client of a session given its URL (pyspark's by default).
        clock: measures the wait (the system clock if None).
        wait_seconds: the longest wait for the interrupted operations to end.
        poll_seconds: how often to ask.
        stop: ends the wait early when true (the chunk must stop).

    Returns:
        What was done, or None if nothing could be (no session recorded, an unreadable
        record, the server out of reach: a warning says which).
    """
    if takeover.spark_session is None:
        return None
    try:
        session = ConnectSession.from_text(takeover.spark_session)
    except ValueError as bad:
        log.warning("%s: not reaping the previous attempt: %s", what, bad)
        return None
    clock = clock or SystemClock()
    # Release (and interrupt everything) only for a worker that is gone: an alive one
    # runs its other chunks in the same session.
    release = takeover.owner_gone and session.session_id != own_session_id
    started = clock.monotonic()
    try:
        joined = (join or join_session)(session.url(remote))
    except Exception as error:  # noqa: BLE001 - any failure to connect: go on
        _unreachable(what, session, error)
        return None
    try:
        if release:
            interrupted = tuple(joined.interrupt_all())
        else:
            interrupted = tuple(joined.interrupt_tag(claim_tag(takeover.claim)))
        waited_on = () if release else interrupted
        still: tuple[str, ...] = ()
        if release or interrupted:
            still = _wait(joined, waited_on, clock, started + wait_seconds, poll_seconds, stop)
        if release:
            joined.release()
    except Exception as error:  # noqa: BLE001 - the server's or the network's: go on
        if is_session_closed(error):
            log.info(
                "%s: the previous attempt's Spark Connect session %s is closed already: "
                "nothing to reap",
                what,
                session.session_id,
            )
            return Reaped(session.session_id, (), False, (), clock.monotonic() - started, True)
        _unreachable(what, session, error)
        return None
    finally:
        _close(joined)
    reaped = Reaped(session.session_id, interrupted, release, still, clock.monotonic() - started)
    _log_reaped(what, takeover, reaped)
    return reaped


def _wait(
    joined: JoinedSession,
    operation_ids: Sequence[str],
    clock: Clock,
    deadline: float,
    poll_seconds: float,
    stop: Callable[[], bool],
) -> tuple[str, ...]:
    """Poll until none of ``operation_ids`` (all of the session's if empty) runs, the
    deadline passes or ``stop`` says so; what still ran at the last look."""
    while True:
        running = tuple(joined.running(operation_ids))
        now = clock.monotonic()
        if not running or now >= deadline or stop():
            return running
        clock.sleep(min(poll_seconds, deadline - now))


def _log_reaped(what: str, takeover: Takeover, reaped: Reaped) -> None:
    whose = (
        f"every operation of session {reaped.session_id} (worker {takeover.owner} gone), "
        "and released the session"
        if reaped.released
        else f"{claim_tag(takeover.claim)} in session {reaped.session_id}"
    )
    log.info(
        "%s: reaped the previous attempt: interrupted %d operation(s) %s in %.1f s%s",
        what,
        len(reaped.interrupted),
        whose,
        reaped.seconds,
        f"; still running: {', '.join(reaped.still_running)}" if reaped.still_running else "",
    )
    if reaped.still_running:
        log.warning(
            "%s: %d operation(s) of the previous attempt still ran after %.1f s; going on",
            what,
            len(reaped.still_running),
            reaped.seconds,
        )


def _unreachable(what: str, session: ConnectSession, error: BaseException) -> None:
    log.warning(
        "%s: could not reap the previous attempt's Spark Connect session %s at %s (%s); "
        "going on: its output is fenced, its operations run until the server drops them",
        what,
        session.session_id,
        session.endpoint,
        error,
    )


def _close(joined: JoinedSession) -> None:
    try:
        joined.close()
    except Exception as error:  # noqa: BLE001 - closing a channel is best effort
        log.debug("closing the reaper's client failed: %s", error)


# --------------------------------------------------------------------------- the hook


def prepare_attempt(spark: SparkSession, chunk: Chunk) -> Reaped | None:
    """Before an attempt's first Spark work in a Connect session: record the session
    with the claim (if the claim could not, the process having no session then), and
    reap the attempt the chunk was taken over from. Once per attempt (by its claim).

    Raises:
        LeaseLost: recording the session found the chunk no longer this attempt's.
    """
    with _prepared_lock:
        if chunk.claim in _prepared:
            return None
        _prepared[chunk.claim] = None
        while len(_prepared) > _PREPARED_MAX:
            _prepared.popitem(last=False)
    own_id = str(getattr(spark, "session_id", ""))
    own = connect_session_text()
    if own is not None and json.loads(own)["session_id"] == own_id:
        chunk.record_spark_session(own)
    takeover = chunk.taken_over
    if takeover is None or takeover.spark_session is None:
        return None
    what = f"chunk {chunk.index} of {chunk.job_id}"
    remote = connect_remote()
    if remote is None:
        log.warning(
            "%s: not reaping the previous attempt: this process has no Spark "
            "Connect session of its own to take the server's address from",
            what,
        )
        return None
    return reap(takeover, remote, own_session_id=own_id, what=what, stop=lambda: chunk.stopping)


# --------------------------------------------------------------------------- pyspark's client


def join_session(url: str) -> JoinedSession:
    """A low-level pyspark client of the session ``url`` names, failing fast: a few
    quick retries and :data:`REAP_CALL_SECONDS` per call, not the defaults' minutes.

    Never ``SparkSession.builder``: that would replace this process's default session."""
    from pyspark.sql.connect.client import SparkConnectClient
    from pyspark.sql.connect.client.core import RpcDeadlines

    deadline = REAP_CALL_SECONDS
    client = SparkConnectClient(
        url,
        retry_policy={"max_retries": 2, "initial_backoff": 200, "max_backoff": 1000},
        rpc_deadlines=RpcDeadlines(
            interrupt=deadline, release_session=deadline, get_status=deadline
        ),
    )
    return _ClientSession(client)


class _ClientSession:
    """:class:`JoinedSession` over pyspark's ``SparkConnectClient``."""

    def __init__(self, client: Any):
        self._client = client

    def interrupt_tag(self, tag: str) -> list[str]:
        return list(self._client.interrupt_tag(tag) or [])

    def interrupt_all(self) -> list[str]:
        return list(self._client.interrupt_all() or [])

    def running(self, operation_ids: Sequence[str]) -> list[str]:
        from pyspark.sql.connect.proto import base_pb2

        state = base_pb2.GetStatusResponse.OperationStatus
        # A pyspark method still marked private in 4.3 (the GetStatus RPC is new).
        found = self._client._get_operation_statuses(list(operation_ids) or None)
        return [
            status.operation_id
            for status in found.operation_statuses
            if status.state == state.OPERATION_STATE_RUNNING
        ]

    def release(self) -> None:
        self._client.release_session()

    def close(self) -> None:
        self._client.close()
