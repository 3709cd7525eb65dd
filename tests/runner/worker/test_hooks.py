"""The hook chain: each point calls the concerns overriding it, in order; the rest are
no-ops."""

from __future__ import annotations

from checkpoint.records import TaskKind
from runner.worker.hooks import POINTS, HookChain, Hooks


class Told(Hooks):
    def __init__(self, name: str, heard: list[str]):
        self.name, self.heard = name, heard

    def failed(self, job_type: str, kind: TaskKind) -> None:
        self.heard.append(f"{self.name} failed {job_type} {kind}")


class ToldToo(Told):
    def poisoned(self, job_type: str, kind: TaskKind) -> None:
        self.heard.append(f"{self.name} poisoned {job_type} {kind}")


def test_a_point_calls_each_concern_overriding_it_in_order() -> None:
    heard: list[str] = []
    chain = HookChain(Told("a", heard), Hooks(), ToldToo("b", heard))

    chain.failed("T", "chunk")
    chain.poisoned("T", "plan")

    assert heard == ["a failed T chunk", "b failed T chunk", "b poisoned T plan"]


def test_a_point_no_concern_overrides_is_the_base_no_op() -> None:
    chain = HookChain(Told("a", []))

    assert "poisoned" not in vars(chain)  # the class's no-op, not a bound concern
    chain.handed_back("T", "chunk")  # nothing to tell, nothing raised


def test_one_concern_at_a_point_is_called_straight() -> None:
    # The path pays no hop through the chain for a point one concern hooks.
    heard: list[str] = []
    only = Told("a", heard)

    assert HookChain(only).failed == only.failed


def test_every_point_is_a_method_of_the_base() -> None:
    assert all(callable(getattr(Hooks, point)) for point in POINTS)
