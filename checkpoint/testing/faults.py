"""Storage that misbehaves on purpose: a wrapper at the storage-protocol layer.

:class:`FaultyStorage` wraps any :class:`~checkpoint.storage.Storage` and, per call, as a
:class:`FaultPlan` decides, does one of three things a real storage service does:

- ``busy``: raise :class:`~checkpoint.errors.Throttled` (503 ServerBusy) *without* applying;
- ``ambiguous``: apply the call, then raise :class:`~checkpoint.errors.Unavailable` as a lost
  connection does: the write happened, the caller was told it did not;
- ``delay``: wait, then apply;

and, while an :class:`Outage` is on (the store down: every call for a stretch of
time), one of two things a store that is down does:

- ``refused``: raise :class:`~checkpoint.errors.Unavailable` at once, not applied (the
  connection refused);
- ``hanging``: wait until the outage ends, then raise it, not applied (no answer, the
  connection dropped when the store comes back).

An ambiguous fault on a call the Azure SDK retries by itself (GET, PUT, DELETE, HEAD:
azure-core retries a lost connection only for those) is shown as Azure shows it: the
call is applied, then made again, and the caller gets the second answer (an update's
stale pop receipt, a delete's 404). Only POST and MERGE (insert, send, batch, merge,
create table) reach the caller as the ambiguous error itself. So the embedded backend
under this wrapper fails the way Azure does behind a connection-dropping proxy.

Use it in tests (:class:`ScriptedFaults` fails exactly the calls named) and in chaos runs
(:class:`RandomFaults`, seeded; ``RUNNER_FAULTS`` turns it on for ``runner start``, see
:func:`parse_fault_spec`).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from checkpoint.errors import ConfigurationError, Throttled, Unavailable
from checkpoint.storage import Storage

FaultKind = Literal["busy", "ambiguous", "delay", "refused", "hanging"]
OutageMode = Literal["refused", "hanging"]
OUTAGE_MODES: tuple[OutageMode, ...] = ("refused", "hanging")

#: The HTTP verb each protocol method is sent with on Azure (what decides whether the
#: SDK retries a lost connection itself). Batches, inserts, sends and table creation
#: are POST; merges are MERGE/PATCH; the rest are retried by the SDK.
SDK_RETRIED: frozenset[tuple[str, str]] = frozenset(
    {
        ("queues", "create_queue"),
        ("queues", "delete_queue"),
        ("queues", "list_queues"),
        ("queues", "receive"),
        ("queues", "update"),
        ("queues", "delete"),
        ("queues", "delete_many"),
        ("queues", "peek"),
        ("queues", "approximate_length"),
        ("records", "delete_table"),
        ("records", "get"),
        ("records", "replace"),
        ("records", "delete"),
        ("records", "query"),
        ("blobs", "create_container"),
        ("blobs", "delete_container"),
        ("blobs", "put"),
        ("blobs", "get"),
        ("blobs", "info"),
        ("blobs", "delete"),
        ("blobs", "list"),
    }
)
#: Calls that return an iterator: a fault is raised when iteration starts.
_ITERATORS = frozenset({("records", "query"), ("blobs", "list")})
#: How often (seconds) a process looks at its outage file (a stat; read when changed).
OUTAGE_LOOKUP_SECONDS = 0.2
_PUBLIC = {
    "queues": (
        "create_queue delete_queue list_queues send send_many receive update delete "
        "delete_many peek approximate_length"
    ).split(),
    "records": (
        "create_table delete_table get insert replace merge upsert delete query batch"
    ).split(),
    "blobs": "create_container delete_container put get info delete list".split(),
}


@dataclass(frozen=True)
class Fault:
    """What to do to one call; ``seconds`` is the wait of a ``delay``."""

    kind: FaultKind
    seconds: float = 0.0


class FaultPlan(Protocol):
    """Decides the fate of each call (thread-safe: workers call from many threads)."""

    def decide(self, service: str, method: str) -> Fault | None: ...


@dataclass(frozen=True)
class Outage:
    """The store down from ``start`` (Unix time, shared by every process) for
    ``seconds``, each call ``refused`` or ``hanging`` meanwhile; over by itself."""

    start: float
    seconds: float
    mode: OutageMode = "refused"

    def __post_init__(self) -> None:
        if self.seconds < 0 or self.mode not in OUTAGE_MODES:
            raise ConfigurationError(
                f"an outage needs seconds >= 0 and a mode of {', '.join(OUTAGE_MODES)}; "
                f"got {self.seconds!r} s, {self.mode!r}"
            )

    @property
    def end(self) -> float:
        return self.start + self.seconds

    def fault(self, now: float) -> Fault | None:
        """This call's fault at Unix time ``now``: None outside the outage."""
        if not self.start <= now < self.end:
            return None
        return Fault(self.mode, self.end - now if self.mode == "hanging" else 0.0)

    def write(self, path: Path) -> None:
        """Announce the outage in ``path`` (written aside and renamed: read whole)."""
        scratch = path.with_name(f".{path.name}.tmp")
        scratch.write_text(
            json.dumps({"start": self.start, "seconds": self.seconds, "mode": self.mode})
        )
        scratch.replace(path)

    @classmethod
    def read(cls, path: Path) -> Outage | None:
        """The outage announced in ``path``, None while there is none (or none readable:
        a chaos run goes on without it rather than stop every call)."""
        try:
            found = json.loads(path.read_text())
            return cls(float(found["start"]), float(found["seconds"]), found["mode"])
        except (OSError, ValueError, KeyError, TypeError, ConfigurationError):
            return None


class OutageFile:
    """The outage announced in a file another process writes when the outage starts
    (``outage_file=`` of ``RUNNER_FAULTS``), looked up at most every
    :data:`OUTAGE_LOOKUP_SECONDS` (the file is read only when it changed)."""

    def __init__(self, path: Path, now: Callable[[], float] = time.time):
        self.path = path
        self._now = now
        self._lock = threading.Lock()
        self._looked_at = float("-inf")
        self._seen: tuple[int, int] | None = None
        self._outage: Outage | None = None

    def fault(self) -> Fault | None:
        now = self._now()
        with self._lock:
            if now - self._looked_at >= OUTAGE_LOOKUP_SECONDS:
                self._looked_at = now
                self._look()
            outage = self._outage
        return outage.fault(now) if outage is not None else None

    def _look(self) -> None:
        try:
            stat = self.path.stat()
        except OSError:
            self._seen, self._outage = None, None
            return
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            self._seen, self._outage = seen, Outage.read(self.path)


@dataclass
class RandomFaults:
    """Each call independently: busy, ambiguous or delayed with the given chances.

    Args:
        seed: makes a run repeatable (per process; threads interleave as they do).
        busy, ambiguous, delayed: chances in [0, 1] per call; their sum at most 1.
        delay_seconds: a delay's length is drawn uniformly from this range.
        outage: where an outage is announced (every call fails while it is on).
    """

    seed: int = 0
    busy: float = 0.0
    ambiguous: float = 0.0
    delayed: float = 0.0
    delay_seconds: tuple[float, float] = (0.3, 1.5)
    outage: OutageFile | None = None
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for name in ("busy", "ambiguous", "delayed"):
            chance = getattr(self, name)
            if not 0.0 <= chance <= 1.0:
                raise ConfigurationError(f"fault chance {name}={chance!r} is not in [0, 1]")
        if self.busy + self.ambiguous + self.delayed > 1.0:
            raise ConfigurationError("fault chances add up to more than 1")
        low, high = self.delay_seconds
        if not 0.0 <= low <= high:
            raise ConfigurationError(f"delay range {self.delay_seconds!r} is not low <= high")
        self._rng = random.Random(self.seed)

    def decide(self, service: str, method: str) -> Fault | None:
        if self.outage is not None:
            down = self.outage.fault()
            if down is not None:
                return down
        with self._lock:
            roll = self._rng.random()
            if roll < self.busy:
                return Fault("busy")
            if roll < self.busy + self.ambiguous:
                return Fault("ambiguous")
            if roll < self.busy + self.ambiguous + self.delayed:
                return Fault("delay", self._rng.uniform(*self.delay_seconds))
        return None


class ScriptedFaults:
    """Fail exactly the calls named, in order: each entry applies to the next call of
    its ``service.method`` (e.g. ``("records.merge", "ambiguous")``), once."""

    def __init__(self, *script: tuple[str, FaultKind] | tuple[str, FaultKind, float]):
        self._lock = threading.Lock()
        self._script: list[tuple[str, Fault]] = []
        for entry in script:
            self.add(*entry)

    def add(self, call: str, kind: FaultKind, seconds: float = 0.0) -> None:
        """Fail the next ``call`` (``"service.method"``) not yet claimed by an entry."""
        service, _, method = call.partition(".")
        if method not in _PUBLIC.get(service, ()):
            raise ValueError(f"no storage call {call!r}")
        with self._lock:
            self._script.append((call, Fault(kind, seconds)))

    @property
    def pending(self) -> list[str]:
        """Calls still waiting for their fault (a test asserts this ends empty)."""
        with self._lock:
            return [call for call, _ in self._script]

    def decide(self, service: str, method: str) -> Fault | None:
        name = f"{service}.{method}"
        with self._lock:
            for position, (call, fault) in enumerate(self._script):
                if call == name:
                    del self._script[position]
                    return fault
        return None


@dataclass
class FaultCounts:
    """What a :class:`FaultyStorage` saw: calls by ``service.method``, faults by kind."""

    calls: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, call: str, fault: Fault | None) -> None:
        with self._lock:
            self.calls[call] += 1
            if fault is not None:
                self.faults[fault.kind] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"calls": dict(self.calls), "faults": dict(self.faults)}


class _Faulty:
    """One service of the wrapped storage, every public call passed through the plan."""

    def __init__(
        self,
        service: str,
        inner: Any,
        plan: FaultPlan,
        counts: FaultCounts,
        sleep: Callable[[float], None],
    ):
        self._service, self._inner, self._plan = service, inner, plan
        self._counts, self._sleep = counts, sleep

    def __getattr__(self, method: str) -> Any:
        target = getattr(self._inner, method)
        if method not in _PUBLIC[self._service]:
            return target
        key = (self._service, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            fault = self._plan.decide(*key)
            self._counts.count(f"{self._service}.{method}", fault)
            if key in _ITERATORS:
                return self._iterate(fault, key, lambda: target(*args, **kwargs))
            return self._apply(fault, key, lambda: target(*args, **kwargs))

        return call

    def _apply(self, fault: Fault | None, key: tuple[str, str], run: Callable[[], Any]) -> Any:
        what = f"{key[0]}.{key[1]}"
        if fault is None:
            return run()
        if fault.kind == "busy":
            raise Throttled(f"{what}: ServerBusy (HTTP 503) [injected]", code="ServerBusy")
        if fault.kind == "delay":
            self._sleep(fault.seconds)
            return run()
        if fault.kind in OUTAGE_MODES:
            self._sleep(fault.seconds)  # 0 for refused; until the end for hanging
            raise Unavailable(
                f"{what}: storage unreachable, connection {fault.kind} (outage) [injected]",
                code="ServiceRequestError",
            )
        first_error: BaseException | None = None
        try:
            run()
        except Exception as error:  # the first try's own answer is lost with the connection
            first_error = error
        if key in SDK_RETRIED:
            return run()  # the SDK sends it again; the caller sees the second answer
        raise Unavailable(
            f"{what}: lost the connection to storage after sending [injected]",
            code="ServiceResponseError",
        ) from first_error

    def _iterate(
        self, fault: Fault | None, key: tuple[str, str], run: Callable[[], Iterator[Any]]
    ) -> Iterator[Any]:
        if fault is not None and fault.kind == "ambiguous":
            fault = None  # a read applied and lost is just read again by the SDK
        return iter(list(self._apply(fault, key, lambda: list(run()))))


class FaultyStorage:
    """Build a :class:`Storage` whose calls pass through ``plan``.

    Args:
        storage: the real storage (embedded or Azure).
        plan: decides each call's fault.
        sleep: how a ``delay`` waits (a :class:`~checkpoint.clock.FakeClock`'s ``sleep`` in
            tests, so nothing really sleeps).
    """

    def __init__(
        self,
        storage: Storage,
        plan: FaultPlan,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.counts = FaultCounts()
        self.inner = storage
        self.storage = Storage(
            queues=_Faulty("queues", storage.queues, plan, self.counts, sleep),
            records=_Faulty("records", storage.records, plan, self.counts, sleep),
            blobs=_Faulty("blobs", storage.blobs, plan, self.counts, sleep),
            description=f"{storage.description} (with injected faults)",
            closer=storage.close,
        )


def parse_fault_spec(spec: str) -> RandomFaults:
    """``RUNNER_FAULTS`` text to a plan: ``busy=0.05,ambiguous=0.03,delayed=0.05,seed=7``
    (``delay=0.3-1.5`` sets the delay range in seconds; ``outage_file=PATH`` where an
    outage is announced, :meth:`Outage.write`). Raises ConfigurationError."""
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, text = part.partition("=")
        try:
            if not sep:
                raise ValueError
            if name == "seed":
                values["seed"] = int(text)
            elif name == "delay":
                low, _, high = text.partition("-")
                values["delay_seconds"] = (float(low), float(high or low))
            elif name in ("busy", "ambiguous", "delayed"):
                values[name] = float(text)
            elif name == "outage_file" and text:
                values["outage"] = OutageFile(Path(text))
            else:
                raise ValueError
        except ValueError:
            raise ConfigurationError(
                f"RUNNER_FAULTS: cannot read {part!r}; expected busy=, ambiguous=, delayed= "
                "(chances 0-1), delay=LOW-HIGH (seconds), seed=N and outage_file=PATH, "
                "comma-separated"
            ) from None
    return RandomFaults(**values)
