"""``python -m tests.chaos.run``: a chaos run and its fault-free twin, reported.

Runs the plan without faults first (the same seeded kills and stop), then with them,
prints a table and writes it to a section of ``--output`` (RELIABILITY.md: the machine,
the command, the date). Exits 1 if a correctness target fails in either run (items
lost, finalize not exactly once, a worker exit, a chunk fenced by its own write,
re-applications over the bound, or the job not completing in time); time against the
fault-free run is reported, not judged. ``make chaos`` runs the four target runs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from tests.bench.report import machine_line, write_section
from tests.chaos.chaos import FLOOR_SECONDS, STOP_LEASES, ChaosPlan, RunResult, run_once
from tests.chaos.chaos_job import Chaos

HEADING = (
    "# Reliability\n\nFigures from `make chaos` (`python -m tests.chaos.run`): a job whose "
    "every item's effect is counted in an idempotent sink, on real worker processes with "
    "SIGKILLs, a SIGSTOP past the lease and injected storage faults. Each section says its "
    "machine and command.\n\n"
    "Targets: no item lost (every item's sink file exists); finalize run exactly once; no "
    "worker exit other than the kills (a non-zero exit code); no chunk fenced by its own "
    "write (a fenced or lease-lost stop, from the worker logs, with no other claim of that "
    "chunk started before it, the paused worker's own chunk excepted; a stop because the "
    "worker's own lease ran out, its renewals unanswered, is reported apart, not judged: "
    "the lease doing its job); re-applied items at "
    "most one checkpoint interval of items per kill or stop; completion within 2x the same "
    "run without faults (reported, not judged). `make test` runs a small version "
    "(tests/chaos/test_chaos.py).\n"
)


def title(plan: ChaosPlan) -> str:
    if plan.outage_seconds:
        return (
            f"Outage, {plan.backend}: every storage request {plan.outage_mode} for "
            f"{plan.outage_seconds:g} s"
        )
    return (
        f"Chaos, {plan.backend}: {plan.busy:.0%} busy + {plan.ambiguous:.0%} ambiguous"
        f" + {plan.delayed:.0%} delayed"
    )


def _ratio(plain: RunResult, faulty: RunResult) -> str:
    if plain.seconds and faulty.seconds:
        return f"{faulty.seconds / plain.seconds:.2f}x"
    return "n/a"


def _learned(*runs: RunResult) -> str:
    """What the workers learned, per run: ``"20 s learned"``, ``"20 s and 40 s learned"``."""
    said = [f"{run.learned_lease_seconds or FLOOR_SECONDS} s" for run in runs]
    return " and ".join(said) + " learned"


def report(plan: ChaosPlan, plain: RunResult, faulty: RunResult, command: str) -> list[str]:
    """The Markdown lines of one section."""
    low, high = plan.delay_seconds
    where = (
        "the runner's `RUNNER_FAULTS` wrapper in each worker (storage-protocol layer)"
        if plan.backend == "embedded"
        else "a fault proxy on loopback in front of each Azurite service"
    )
    lines = [
        machine_line(),
        "",
        f"Command: `{command}`",
        "",
        f"{plan.items:,} items in {plan.chunks} chunks, {plan.workers} workers (`runner start "
        f"--burst`), the adaptive lease from {FLOOR_SECONDS} s ({_learned(plain, faulty)} "
        f"by the end), checkpoint every "
        f"{Chaos.checkpoint_interval_seconds} s, {plan.item_seconds * 1000:g} ms per item; "
        f"{plan.kills} SIGKILL(s) (each worker replaced) and {plan.stops} SIGSTOP(s) of "
        f"{STOP_LEASES * FLOOR_SECONDS:g} s at seeded times (seed {plan.seed}). Faults "
        f"per storage request, from {where}: {plan.busy:.0%} busy (503, not applied), "
        f"{plan.ambiguous:.0%} ambiguous (applied, then the answer lost), {plan.delayed:.0%} "
        f"delayed ({low:g}-{high:g} s).",
        "",
        "| | target | without faults | with faults |",
        "| --- | --- | --- | --- |",
    ]
    for (what, target, plain_value, plain_ok), (_, _, value, ok) in zip(
        plain.targets(), faulty.targets(), strict=True
    ):
        lines.append(f"| {what} | {target} | {_mark(plain_value, plain_ok)} | {_mark(value, ok)} |")
    lines += [
        f"| time to completion | <= 2x without faults | {_seconds(plain)} | {_seconds(faulty)} "
        f"({_ratio(plain, faulty)}) |",
        f"| kills, stops made | {plan.kills}, {plan.stops} | {plain.kills}, {plain.stops} | "
        f"{faulty.kills}, {faulty.stops} |",
        f"| storage requests | | {_requests(plain)} | {_requests(faulty)} |",
        f"| faults injected | | {_faults(plain)} | {_faults(faulty)} |",
        "",
    ]
    for label, run in (("Without faults", plain), ("With faults", faulty)):
        lines += details(label, run)
    return lines


def report_outage(plan: ChaosPlan, run: RunResult, command: str) -> list[str]:
    """The Markdown lines of an outage run's section (no fault-free twin: the outage is
    the run's one fault, and what it must not cost is judged on its own)."""
    where = (
        "in each worker's `RUNNER_FAULTS` wrapper (announced in a file the driver writes)"
        if plan.backend == "embedded"
        else "at the fault proxies on loopback in front of every Azurite service"
    )
    reset = "" if plan.backend == "embedded" else " (connections reset)"
    what = (
        f"refused at once{reset}"
        if plan.outage_mode == "refused"
        else f"left unanswered until the store's return, then failed{reset}"
    )
    lines = [
        machine_line(),
        "",
        f"Command: `{command}`",
        "",
        f"{plan.items:,} items in {plan.chunks} chunks, {plan.workers} workers (`runner start "
        f"--burst`), the adaptive lease from {FLOOR_SECONDS} s ({_learned(run)} by the "
        f"end), checkpoint every "
        f"{Chaos.checkpoint_interval_seconds} s, {plan.item_seconds * 1000:g} ms per item; "
        f"{plan.kills} SIGKILL(s), {plan.stops} SIGSTOP(s). {plan.outage_after:.1f} s after "
        f"the first chunk started, every storage request of the workers was {what} for "
        f"{plan.outage_seconds:g} s, {where}; nothing was applied meanwhile. Going on: the "
        "first item applied for the first time after the store's return.",
        "",
        "| | target | with the outage |",
        "| --- | --- | --- |",
    ]
    lines += [
        f"| {what} | {target} | {_mark(value, ok)} |" for what, target, value, ok in run.targets()
    ]
    lines += [
        f"| time to completion | (reported) | {_seconds(run)} |",
        f"| storage requests | | {_requests(run)} |",
        f"| faults injected | | {_faults(run)} |",
        "",
    ]
    return lines + details("With the outage", run)


def _mark(value: str, ok: bool) -> str:
    return value if ok else f"**{value}** (missed)"


def _seconds(run: RunResult) -> str:
    return f"{run.seconds:.1f} s" if run.seconds is not None else "did not complete"


def _requests(run: RunResult) -> str:
    top = ", ".join(f"{name} {count:,}" for name, count in run.requests.most_common(4))
    return f"{sum(run.requests.values()):,} ({top})" if run.requests else "0"


def _faults(run: RunResult) -> str:
    return ", ".join(f"{kind} {count:,}" for kind, count in sorted(run.faults.items())) or "0"


def details(label: str, run: RunResult) -> list[str]:
    fences = run.fences
    lines = [
        f"{label}: {len(fences.all)} fenced stop(s): {len(fences.taken_over)} taken over "
        f"by another claim, {len(fences.paused)} of the paused worker, {len(fences.own)} "
        f"by the worker's own write, {len(fences.lapsed)} by its own lease running out"
    ]
    if fences.own:
        causes = ", ".join(f"{cause} {n}" for cause, n in fences.causes(fences.own).items())
        lines[-1] += f" ({causes}; {len(fences.own_with_gap)} followed by a claim never started)"
    lines[-1] += "."
    if run.items:
        lines[-1] += f" {run.items.applications:,} applications of {run.items.expected:,} items."
    lines += [f"{label}: {note}." for note in run.notes + run.unexpected_exits]
    return [line + "  " for line in lines[:-1]] + lines[-1:] + [""]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__)
    parser.add_argument("--backend", choices=["embedded", "azurite"], default="embedded")
    parser.add_argument("--items", type=int, default=6000)
    parser.add_argument("--chunks", type=int, default=60)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--stops", type=int, default=1)
    parser.add_argument("--busy", type=float, default=0.05)
    parser.add_argument("--ambiguous", type=float, default=0.03)
    parser.add_argument("--delayed", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--item-seconds", type=float, default=0.012)
    parser.add_argument(
        "--deadline", type=float, default=None, help="seconds before a run counts as not completing"
    )
    parser.add_argument(
        "--outage",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="an outage run: every storage request of the workers fails "
        "this long mid-run (no fault-free twin)",
    )
    parser.add_argument("--outage-mode", choices=["refused", "hanging"], default="refused")
    parser.add_argument(
        "--outage-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="when the outage starts, after the first chunk starts "
        "(default: 30 %% of the work's estimate)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep the runs' files here")
    parser.add_argument("--output", type=Path, default=None, help="e.g. RELIABILITY.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = ChaosPlan(
        args.backend,
        args.items,
        args.chunks,
        args.workers,
        args.kills,
        args.stops,
        args.busy,
        args.ambiguous,
        args.delayed,
        seed=args.seed,
        item_seconds=args.item_seconds,
        deadline_seconds=args.deadline,
        outage_seconds=args.outage,
        outage_mode=args.outage_mode,
        outage_after_seconds=args.outage_after,
    )
    command = "python -m tests.chaos.run " + shlex.join(argv if argv is not None else sys.argv[1:])
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="chaos-"))
    print(f"{title(plan)} (files in {workdir})", flush=True)
    if plan.outage_seconds:
        return _outage_main(plan, workdir, command, args.output)
    print("without faults ...", flush=True)
    plain = run_once(plan.without_faults(), workdir / "without-faults")
    print("with faults ...", flush=True)
    faulty = run_once(plan, workdir / "with-faults")
    lines = report(plan, plain, faulty, command)
    print("\n".join(lines))
    if args.output:
        write_section(args.output, title(plan), lines, heading=HEADING)
    met = all(ok for run in (plain, faulty) for *_, ok in run.targets())
    print("all correctness targets met" if met else "CORRECTNESS TARGETS MISSED", flush=True)
    return 0 if met else 1


def _outage_main(plan: ChaosPlan, workdir: Path, command: str, output: Path | None) -> int:
    run = run_once(plan, workdir / "with-outage")
    lines = report_outage(plan, run, command)
    print("\n".join(lines))
    if output:
        write_section(output, title(plan), lines, heading=HEADING)
    met = all(ok for *_, ok in run.targets())
    print("all correctness targets met" if met else "CORRECTNESS TARGETS MISSED", flush=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
