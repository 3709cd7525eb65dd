"""One chaos run: the chaos job on real ``runner start`` workers, with SIGKILLs, a SIGSTOP
past the lease, and storage faults, then what happened, counted.

Storage faults come from the workers' ``RUNNER_FAULTS`` wrapper on the embedded backend
and from :class:`~tests.chaos.proxy.FaultProxy` (one per service) in front of Azurite.
An outage (every storage request of the workers refused, or hanging, for a stretch of
time mid-run) is started by the driver: on Azurite every proxy goes down; on the
embedded store the driver announces it in a file each worker's wrapper looks at
(:class:`~checkpoint.testing.faults.OutageFile`). Either ends by itself.
The harness itself (submit, watching the job) talks to storage directly, unfaulted.
Kills and the stop come at seeded times after the first chunk starts, the same for a
run with and without faults. Every wait is bounded: a run that does not end is reported
as such, never waited for without end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from checkpoint.errors import StorageError
from checkpoint.lease_book import LeaseBook
from checkpoint.testing.faults import Outage
from runner.worker.leases.learned import LearnedLease
from runner.worker.supervisor import FAULTS_ENV, FAULTS_REPORT_ENV
from tests import azurite as azurite_process
from tests.chaos import analysis
from tests.chaos.chaos_job import Chaos
from tests.chaos.proxy import FaultChances, FaultProxy
from tests.e2e.harness import Cluster
from tests.e2e.processes import Worker

JOBS_MODULE = "tests.chaos.chaos_job"
#: The lease the workers start from (Chaos's lease is adaptive: its lower bound).
FLOOR_SECONDS = Chaos.lease_bounds[0]
#: A SIGSTOPped worker stays stopped this many leases of the floor: well past its lease
#: until the workers learn from it.
STOP_LEASES = 1.5
#: Workers (``--burst``) should be gone this soon after the job ended, plus two leases
#: of what the workers learned: a burst worker exits once the queue is empty, and a done
#: chunk's message whose delete failed stays there, invisible, until its lease ends.
EXIT_GRACE_SECONDS = 60.0
#: After the store's return, the job must go on (a new item applied) within this many
#: leases.
RESUME_LEASES = 2
#: Where the driver announces an outage to embedded workers (in the run's directory).
OUTAGE_FILE = "outage"


@dataclass(frozen=True)
class ChaosPlan:
    """What one run does. Fault chances are per storage request."""

    backend: str = "embedded"
    items: int = 6000
    chunks: int = 60
    workers: int = 3
    kills: int = 2
    stops: int = 1
    busy: float = 0.05
    ambiguous: float = 0.03
    delayed: float = 0.05
    delay_seconds: tuple[float, float] = (0.3, 1.5)
    seed: int = 1
    item_seconds: float = 0.012
    deadline_seconds: float | None = None
    #: An outage this long (0: none), ``refused`` or ``hanging``, starting this many
    #: seconds after the first chunk starts (None: at 30 % of the work's estimate).
    outage_seconds: float = 0.0
    outage_mode: str = "refused"
    outage_after_seconds: float | None = None

    @property
    def items_per_chunk(self) -> int:
        return self.items // self.chunks

    @property
    def estimate_seconds(self) -> float:
        """The work itself, spread over the workers (no storage time)."""
        return self.chunks * self.items_per_chunk * self.item_seconds / self.workers

    @property
    def deadline(self) -> float:
        return self.deadline_seconds or max(180.0, 15 * self.estimate_seconds) + self.outage_seconds

    @property
    def faulty(self) -> bool:
        return self.busy + self.ambiguous + self.delayed > 0 or self.outage_seconds > 0

    @property
    def outage_after(self) -> float:
        if self.outage_after_seconds is not None:
            return self.outage_after_seconds
        return 0.3 * self.estimate_seconds

    def without_faults(self) -> ChaosPlan:
        return dataclasses.replace(self, busy=0.0, ambiguous=0.0, delayed=0.0, outage_seconds=0.0)

    def duplicate_bound(self, interruptions: int) -> int:
        """Re-applications allowed: one checkpoint interval of items per interruption."""
        return interruptions * math.ceil(Chaos.checkpoint_interval_seconds / self.item_seconds)

    def fault_spec(self, workdir: Path) -> str:
        low, high = self.delay_seconds
        spec = (
            f"busy={self.busy},ambiguous={self.ambiguous},delayed={self.delayed},"
            f"delay={low}-{high},seed={self.seed}"
        )
        if self.outage_seconds:
            spec += f",outage_file={workdir / OUTAGE_FILE}"
        return spec


@dataclass
class RunResult:
    """What one run did."""

    plan: ChaosPlan
    job_state: str = "not submitted"
    seconds: float | None = None
    items: analysis.Items | None = None
    finalize_runs: int = 0
    unexpected_exits: list[str] = field(default_factory=list)
    kills: int = 0
    stops: int = 0
    fences: analysis.Fences = field(default_factory=analysis.Fences)
    requests: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    #: The outage made, as Unix times (None: none was made).
    outage: Outage | None = None
    #: Workers (not killed) that were not running when the outage ended.
    down_after_outage: list[str] = field(default_factory=list)
    #: Seconds from the store's return to the first new item applied (None: none was).
    resumed_after: float | None = None
    #: The lease the workers had learned by the end (None: nothing learned, the floor).
    learned_lease_seconds: int | None = None

    @property
    def resume_bound_seconds(self) -> float:
        """Two leases, of the longest the workers gave: the lease learned by the end (it
        shrinks by at most 10 % a minute, so that is within a step of the run's longest)."""
        return RESUME_LEASES * max(FLOOR_SECONDS, self.learned_lease_seconds or 0)

    @property
    def completed(self) -> bool:
        return self.seconds is not None

    def targets(self) -> list[tuple[str, str, str, bool]]:
        """The correctness targets: (what, target, value, met)."""
        items = self.items or analysis.Items(0, -1, 0, 0, 0)
        bound = self.plan.duplicate_bound(self.kills + self.stops)
        finished = (
            "yes"
            if self.completed
            else (f"no: did not complete in {self.plan.deadline:.0f} s (job {self.job_state})")
        )
        targets = [
            ("job completed", "yes", finished, self.completed),
            ("items lost", "0", str(items.lost), items.lost == 0),
            ("finalize runs", "1", str(self.finalize_runs), self.finalize_runs == 1),
            (
                "worker exits (other than the kills)",
                "0",
                str(len(self.unexpected_exits)),
                not self.unexpected_exits,
            ),
        ]
        reapplied = f"{items.applied_more_than_once} ({items.extra_applications})"
        # The worker's own lease running out is the lease doing its job: never judged.
        lapsed_count = str(len(self.fences.lapsed))
        lapsed = ("chunks stopped by their own lease running out", "(reported)", lapsed_count, True)
        if not self.plan.outage_seconds:
            return targets + [
                (
                    "chunks fenced by their own write",
                    "0",
                    str(len(self.fences.own)),
                    not self.fences.own,
                ),
                lapsed,
                (
                    "re-applied items (extra applications)",
                    f"<= {bound}",
                    reapplied,
                    items.extra_applications <= bound,
                ),
            ]
        # Every lease runs out in an outage longer than a lease: chunks stop fenced by
        # their own lapse and redo the items applied since their last durable state.
        # Reported, not judged: what an outage must not cost is what is judged.
        made = self.outage is not None
        resumed = self.resumed_after
        bound_seconds = self.resume_bound_seconds
        return targets + [
            ("outage made", "yes", "yes" if made else "no", made),
            (
                "workers running when the store came back",
                "all",
                "all" if not self.down_after_outage else ", ".join(self.down_after_outage),
                made and not self.down_after_outage,
            ),
            (
                "job going on after the store's return (first new item)",
                f"<= {bound_seconds:g} s ({RESUME_LEASES} leases)",
                f"{resumed:.1f} s" if resumed is not None else "never",
                resumed is not None and resumed <= bound_seconds,
            ),
            ("chunks fenced by their own write", "(reported)", str(len(self.fences.own)), True),
            lapsed,
            ("re-applied items (extra applications)", "(reported)", reapplied, True),
        ]


def run_once(
    plan: ChaosPlan, workdir: Path, server: azurite_process.Azurite | None = None, log=print
) -> RunResult:
    """Run ``plan`` in ``workdir`` (created); on Azurite, ``server`` or a private one."""
    workdir.mkdir(parents=True)
    result = RunResult(plan)
    with contextlib.ExitStack() as stack:
        proxies: list[FaultProxy] = []
        env: dict[str, str] = {}
        if plan.backend == "azurite":
            if server is None:
                server = stack.enter_context(azurite_process.start())
            chances = FaultChances(plan.busy, plan.ambiguous, plan.delayed, plan.delay_seconds)
            for number, port in enumerate((server.blob_port, server.queue_port, server.table_port)):
                proxies.append(FaultProxy(port, chances, seed=plan.seed * 10 + number).start())
                stack.callback(proxies[-1].stop)
            direct = server.connection_string
            worker_storage = azurite_process.connection_string(*(p.port for p in proxies))
        else:
            direct = worker_storage = str(workdir / "store")
            env = {FAULTS_ENV: plan.fault_spec(workdir), FAULTS_REPORT_ENV: str(workdir / "faults")}
        cluster = Cluster(plan.backend, direct, workdir, uuid.uuid4().hex[:8], JOBS_MODULE)
        stack.callback(cluster.close)
        driver = _Run(plan, cluster, worker_storage, env, result, log, proxies)
        driver.drive()
        _count(driver, proxies)
    return result


class _Run:
    """Drives the workers of one run: start, kill and replace, stop and continue."""

    def __init__(
        self,
        plan: ChaosPlan,
        cluster: Cluster,
        storage: str,
        env: dict[str, str],
        result: RunResult,
        log,
        proxies: list[FaultProxy],
    ):
        self.plan, self.cluster, self.storage, self.env = plan, cluster, storage, env
        self.result, self.log, self.proxies = result, log, proxies
        self.rng = random.Random(plan.seed + 1)
        self.killed: set[int] = set()
        self.paused: dict[int, float] = {}  # pid -> wall time stopped
        self.pauses: list[tuple[int, float, float]] = []
        self.job_id = ""

    def start_worker(self) -> Worker:
        return self.cluster.start(
            "Chaos", "--log-level", "INFO", burst=True, env=self.env, storage=self.storage
        )

    def schedule(self) -> list[tuple[float, str]]:
        rng, span = random.Random(self.plan.seed), self.plan.estimate_seconds
        events = [(rng.uniform(0.1, 0.6) * span, "kill") for _ in range(self.plan.kills)]
        events += [(rng.uniform(0.1, 0.5) * span, "stop") for _ in range(self.plan.stops)]
        if self.plan.outage_seconds:
            events.append((self.plan.outage_after, "outage"))
            events.append((self.plan.outage_after + self.plan.outage_seconds, "outage over"))
        return sorted(events)

    def drive(self) -> None:
        plan, cluster = self.plan, self.cluster
        params = cluster.params(
            chunks=plan.chunks, items=plan.items_per_chunk, item_seconds=plan.item_seconds
        )
        # What an earlier run on this store learned is forgotten: each run starts at the floor.
        cluster.store.ensure()
        LeaseBook(cluster.store.storage.records).forget(Chaos.job_type(), cluster.store.budget())
        self.job_id = cluster.submit("Chaos", params)
        submitted = time.monotonic()
        deadline = submitted + plan.deadline
        for _ in range(plan.workers):
            self.start_worker()
        try:
            began = self._first_start(deadline)
            events = [(began + offset, what) for offset, what in self.schedule()]
            self._watch(events, submitted, deadline)
        finally:
            for pid in list(self.paused):
                self._continue(pid)
        self._wait_exits()

    def _first_start(self, deadline: float) -> float:
        while time.monotonic() < deadline and not self.cluster.events("start"):
            time.sleep(0.05)
        return time.monotonic()

    def _watch(self, events: list[tuple[float, str]], submitted: float, deadline: float) -> None:
        state, checked = "", 0.0
        while time.monotonic() < deadline:
            now = time.monotonic()
            while events and events[0][0] <= now:
                self._act(events.pop(0)[1], now, events)
            if now - checked >= 0.25:
                checked = now
                with contextlib.suppress(StorageError):
                    state = self.cluster.job_state(self.job_id)
                self.result.job_state = state
                if state in ("done", "failed"):
                    self.result.seconds = time.monotonic() - submitted
                    skipped = [
                        what for _, what in events if what not in ("continue", "outage over")
                    ]
                    if skipped:
                        self.result.notes.append(f"job ended before: {', '.join(skipped)}")
                    return
            time.sleep(0.02)

    def _act(self, what: str, now: float, events: list[tuple[float, str]]) -> None:
        live = [
            w
            for w in self.cluster.workers
            if w.alive() and w.pid not in self.paused and w.pid not in self.killed
        ]
        if what == "continue":
            self._continue(min(self.paused, key=self.paused.__getitem__))
            return
        if what == "outage":
            self._outage()
            return
        if what == "outage over":
            self.result.down_after_outage = [
                w.name for w in self.cluster.workers if w.pid not in self.killed and not w.alive()
            ]
            return
        if not live:
            self.result.notes.append(f"{what} skipped: no running worker")
            return
        worker = self.rng.choice(live)
        if what == "kill":
            worker.kill_all()
            self.killed.add(worker.pid)
            self.result.kills += 1
            self.log(f"  SIGKILL {worker.name} (pid {worker.pid}); starting a replacement")
            self.start_worker()
        else:
            self.paused[worker.pid] = self.cluster.pause(worker)
            self.result.stops += 1
            seconds = STOP_LEASES * FLOOR_SECONDS
            self.log(f"  SIGSTOP {worker.name} (pid {worker.pid}) for {seconds:g} s")
            events.append((now + seconds, "continue"))
            events.sort()

    def _outage(self) -> None:
        plan = self.plan
        outage = Outage(time.time(), plan.outage_seconds, plan.outage_mode)  # type: ignore[arg-type]
        for proxy in self.proxies:
            proxy.outage(plan.outage_seconds, plan.outage_mode)
        if not self.proxies:
            outage.write(self.cluster.workdir / OUTAGE_FILE)
        self.result.outage = outage
        self.log(f"  storage down ({plan.outage_mode}) for {plan.outage_seconds:g} s")

    def _continue(self, pid: int) -> None:
        worker = self.cluster.worker_of(pid)
        stopped_at = self.paused.pop(pid)
        if worker.alive():
            worker.send(signal.SIGCONT)
        self.pauses.append((pid, stopped_at, time.time()))

    def _wait_exits(self) -> None:
        grace = EXIT_GRACE_SECONDS + 2 * (_learned_lease(self.cluster) or FLOOR_SECONDS)
        for worker in self.cluster.workers:
            if worker.pid in self.killed:
                continue
            if self.result.completed:
                with contextlib.suppress(AssertionError):
                    worker.wait_exit(grace)
            if worker.alive():
                if self.result.completed:
                    self.result.unexpected_exits.append(
                        f"{worker.name}: still running {grace:g} s after the end"
                    )
                worker.kill_all()
            elif worker.process.returncode != 0:
                self.result.unexpected_exits.append(
                    f"{worker.name}: exit {worker.process.returncode}"
                )


def _learned_lease(cluster: Cluster) -> int | None:
    """The lease the Chaos type's workers give now (None: nothing learned)."""
    row = LeaseBook(cluster.store.storage.records).read(Chaos.job_type(), cluster.store.budget())
    return None if row is None else LearnedLease.from_record(Chaos.job_type(), row).in_force


def _count(driver: _Run, proxies: list[FaultProxy]) -> None:
    plan, cluster, result = driver.plan, driver.cluster, driver.result
    events = cluster.events()
    of = {
        kind: [e for e in events if e["event"] == kind] for kind in ("start", "apply", "finalize")
    }
    result.items = analysis.count_items(
        cluster.workdir, plan.chunks, plan.items_per_chunk, of["apply"]
    )
    result.finalize_runs = len(of["finalize"])
    if result.outage is not None:
        after = [e["at"] for e in of["apply"] if e["new"] and e["at"] >= result.outage.end]
        result.resumed_after = min(after) - result.outage.end if after else None
    fences = [
        fence
        for worker in cluster.workers
        for fence in analysis.parse_fences(worker.log(), driver.job_id, worker.pid)
    ]
    result.fences = analysis.judge(fences, of["start"], driver.pauses)
    result.learned_lease_seconds = _learned_lease(cluster)
    if proxies:
        for proxy in proxies:
            counts = proxy.counts.snapshot()
            result.requests.update(counts["requests"])
            result.faults.update(counts["faults"])
        return
    for path in cluster.workdir.glob("faults.*"):
        with contextlib.suppress(OSError, ValueError):
            counts = json.loads(path.read_text())
            result.requests.update(counts["calls"])
            result.faults.update(counts["faults"])
