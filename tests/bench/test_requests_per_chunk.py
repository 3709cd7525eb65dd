"""Keeps the requests-per-chunk benchmark (tests/bench/requests_per_chunk.py) honest: its
HTTP classification, its windowed meter, the entity-size formula, and a small job on
each backend whose two counts (protocol calls, HTTP requests) must agree."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from runner.worker.loop import WorkerSettings
from tests import azurite as azurite_process
from tests.bench.chunk_jobs import Trivial
from tests.bench.request_tally import OperationTally, Window, Wire, classify, is_start_up
from tests.bench.requests_per_chunk import (
    BUDGET_SIZES,
    REQUESTS_PER_CHUNK_BUDGET,
    Counted,
    Results,
    budget_line,
    by_the_chunk,
    entity_bytes,
    fixed_per_job,
    operations,
    parse_args,
    per_chunk,
    per_second,
    report,
    run_job,
    wire_per_chunk,
)

Q = "http://127.0.0.1:41001/devstoreaccount1"
T = "http://127.0.0.1:41002/devstoreaccount1"
B = "http://127.0.0.1:41000/devstoreaccount1"


@pytest.mark.parametrize(
    ("method", "url", "body", "expected"),
    [
        (
            "GET",
            f"{Q}/jobs/messages?numofmessages=32&visibilitytimeout=30",
            None,
            Wire("queue receive"),
        ),
        ("GET", f"{Q}/jobs/messages?numofmessages=1&peekonly=true", None, Wire("queue peek")),
        ("POST", f"{Q}/jobs/messages?messagettl=-1", b"<QueueMessage/>", Wire("queue send")),
        (
            "PUT",
            f"{Q}/jobs/messages/abc?popreceipt=x&visibilitytimeout=4",
            None,
            Wire("queue update"),
        ),
        ("DELETE", f"{Q}/jobs/messages/abc?popreceipt=x", None, Wire("queue delete")),
        ("GET", f"{Q}/jobs?comp=metadata", None, Wire("queue properties")),
        ("PUT", f"{Q}/jobs", None, Wire("create (queue or container)")),
        (
            "GET",
            f"{T}/runnertasks(PartitionKey='j1~03',RowKey='c000000000007')",
            None,
            Wire("table get", "shard", "j1~03"),
        ),
        (
            "PATCH",
            f"{T}/runnerjobs(PartitionKey='jobs',RowKey='j1')",
            b"{}",
            Wire("table merge/upsert", "catalogue", "jobs"),
        ),
        (
            "PATCH",
            f"{T}/runnerworkers(PartitionKey='workers',RowKey='w1')",
            b"{}",
            Wire("table merge/upsert", "heartbeats", "workers"),
        ),
        (
            "PUT",
            f"{T}/runnertasks(PartitionKey='j1~ctl',RowKey='plan')",
            b"{}",
            Wire("table replace/upsert", "control", "j1~ctl"),
        ),
        (
            "GET",
            f"{T}/runnertasks()?$filter=PartitionKey%20eq%20'j1~park'",
            None,
            Wire("table query", "park", "j1~park"),
        ),
        ("POST", f"{T}/runnertasks", b"{}", Wire("table insert")),
        ("POST", f"{T}/Tables", b"{}", Wire("table create")),
        (
            "POST",
            f"{T}/$batch",
            b"--b\r\nPATCH http://h/devstoreaccount1/runnertasks(PartitionKey='j1~15',RowKey='c1')",
            Wire("table batch", "shard", "j1~15"),
        ),
        ("PUT", f"{B}/runner-data/j1/chunk/3/state-v1", b"x", Wire("blob put")),
        ("GET", f"{B}/runner-data/j1/chunk/3/state-v1", None, Wire("blob get")),
        (
            "GET",
            "https://acct.queue.core.windows.net/jobs/messages?numofmessages=1",
            None,
            Wire("queue receive"),
        ),
        (
            "GET",
            "https://acct.table.core.windows.net/runnerjobs(PartitionKey='jobs',RowKey='j')",
            None,
            Wire("table get", "catalogue", "jobs"),
        ),
    ],
)
def test_each_request_is_named_by_its_kind_and_partition(
    method: str, url: str, body: bytes | None, expected: Wire
):
    assert classify(method, url, body) == expected


def test_only_requests_started_inside_the_window_count_and_follow_ups_apart():
    window = Window()
    tally = OperationTally(window)
    tally.request("queue_receive", "ok", 0.0)  # before the window opened
    window.open()
    tally.request("queue_receive", "ok", 0.0)
    tally.request("record_merge", "refused", 0.0)
    tally.request("record_merge", "retried", None)
    tally.request("record_get", "ok", 60.0)  # started a minute before the window
    window.close()
    time.sleep(0.01)
    tally.request("queue_delete", "ok", 0.0)  # after it closed

    assert tally.calls == {"queue_receive": 1, "record_merge": 1}
    assert tally.not_ok == {"record_merge refused": 1, "record_merge retried": 1}


def test_start_up_calls_are_told_apart_from_the_work():
    assert is_start_up("queue_create_queue") and is_start_up("table create")
    assert not is_start_up("queue_receive") and not is_start_up("record_merge")


def test_the_entity_size_follows_azures_formula():
    properties = {"s": "xy", "n": 1, "big": 2**40, "b": b"abc", "f": 0.5, "t": True}
    expected = (
        4
        + 2 * len("pkrk")
        + (8 + 2 + 4 + 2 * 2)  # string
        + (8 + 2 + 4)  # Int32
        + (8 + 6 + 8)  # Int64
        + (8 + 2 + 4 + 3)  # binary
        + (8 + 2 + 8)  # double
        + (8 + 2 + 1)  # bool
    )
    assert entity_bytes("pk", "rk", properties) == expected


class Wired(Trivial):
    """The trivial job on a queue of its own (the session's Azurite is shared)."""

    queue = "bench-requests-wired"


def test_a_job_counted_on_the_wire_sends_one_request_per_message(
    azurite: azurite_process.Azurite,
):
    chunks = 40
    counted = run_job(
        azurite.connection_string,
        Wired,
        {"chunks": chunks},
        chunks,
        WorkerSettings(burst=True),
        on_wire=True,
    )

    assert counted.http is not None
    kinds = counted.http.by_kind()
    # Planning sends one message per chunk (one send_many call), submit the plan
    # message and completion the finalize message, and the first chunk's message moves
    # to the resume queue (a copy sent, the original deleted: until a chunk of the type
    # has been timed, docs/semantics.md §20): every message is one HTTP request.
    assert kinds["queue send"] == chunks + 3
    assert counted.operations["queue_send"] == 3 and counted.operations["queue_send_many"] >= 1
    # Each chunk's message is deleted once, whether alone or among a delete_many (and
    # the moved one's original too).
    assert kinds["queue delete"] == chunks + 3
    # Every chunk is claimed by one conditional write to its shard partition.
    assert counted.operations["record_merge"] >= chunks
    assert counted.http.by_partition()["shard"] >= chunks
    assert counted.record_bytes > 0 and "state" in counted.record_properties


def test_an_embedded_job_is_counted_by_operation_only(tmp_path: Path):
    chunks = 40
    counted = run_job(
        str(tmp_path / "store"),
        Trivial,
        {"chunks": chunks},
        chunks,
        WorkerSettings(burst=True),
        on_wire=False,
    )

    assert counted.http is None
    assert counted.operations["record_merge"] >= chunks
    assert counted.operations["queue_send"] == 3  # plan, finalize, the first chunk's move
    assert counted.seconds > 0


def _counted(chunks: int, merges: int, seconds: float = 1.0) -> Counted:
    calls = Counter({"record_merge": merges, "queue_create_queue": 4})
    return Counted(chunks, seconds, calls, Counter())


def test_per_chunk_is_the_slope_between_two_sizes_and_the_rest_is_fixed():
    results = Results()
    results.sizes[("embedded", "trivial")] = (10, 30)
    results.sizes[("embedded", "long")] = (2, 4)
    for merges_small, merges_big in ((15, 35), (16, 36), (14, 34)):
        results.add("embedded", "trivial-10", _counted(10, merges_small))
        results.add("embedded", "trivial-30", _counted(30, merges_big))
    results.add("embedded", "long-2", _counted(2, 20))
    results.add("embedded", "long-4", _counted(4, 32))
    results.idle["embedded"] = [_counted(0, 6, seconds=3.0)]

    assert per_chunk(results, "embedded", "trivial", operations) == {"record_merge": 1.0}
    assert fixed_per_job(results, "embedded", "trivial", operations) == {"record_merge": 5.0}
    assert per_chunk(results, "embedded", "long", operations) == {"record_merge": 6.0}
    assert per_second(results, "embedded", operations) == {"record_merge": 2.0}
    # Creating queues and tables is start-up, in no per-chunk figure.
    args = parse_args(["--backend", "embedded", "--runs", "3"])
    text = "\n".join(report(results, args, "Load: -"))
    assert "| record_merge | 1.000 | 6.000 | 2.000 |" in text
    assert "queue_create_queue" not in text


class Budgeted(Trivial):
    """The trivial job on a queue of its own, for the budget."""

    queue = "bench-requests-budget"


def test_a_trivial_chunk_stays_within_its_request_budget(azurite: azurite_process.Azurite):
    # Given the trivial job at two sizes past a feed window, one worker of the defaults,
    # counted again once if over: a few requests are made by the second (receives, job
    # reads), and a machine loaded 10x over its cores once made 3.62 (3.33 at 4x); a
    # request added per chunk is over both times
    def counted() -> tuple[float, str]:
        small, big = (
            run_job(
                azurite.connection_string,
                Budgeted,
                {"chunks": chunks},
                chunks,
                WorkerSettings(burst=True),
                on_wire=True,
            )
            for chunks in BUDGET_SIZES
        )
        span = BUDGET_SIZES[1] - BUDGET_SIZES[0]
        kinds = by_the_chunk(big)
        kinds.subtract(by_the_chunk(small))
        each = ", ".join(f"{kind} {count / span:.3f}" for kind, count in sorted(kinds.items()))
        return wire_per_chunk(small, big), each

    per_chunk, each = counted()
    if per_chunk > REQUESTS_PER_CHUNK_BUDGET:
        per_chunk, each = min((per_chunk, each), counted())

    # Then each further chunk costs no more HTTP requests than the budget allows (a
    # change that adds one raises REQUESTS_PER_CHUNK_BUDGET, saying why)
    assert 3.0 <= per_chunk <= REQUESTS_PER_CHUNK_BUDGET, f"{budget_line(per_chunk)}: {each}"


def test_the_budget_line_says_pass_or_over():
    assert budget_line(REQUESTS_PER_CHUNK_BUDGET).endswith("**PASS**")
    assert budget_line(REQUESTS_PER_CHUNK_BUDGET + 0.01).endswith("**OVER**")
