"""The batch-migration sample end to end, at a small size, on both backends.

One demo run per backend (shared by the assertions below, Spark being slow to start;
Azurite's second chunk is one file, :data:`SIZES`): generate dirty v1 orders into the
blob store, submit the pipeline (stage -> transform -> verify -> publish), two ``runner
start`` workers, one SIGKILLed while it holds a transform chunk with a checkpoint, a
replacement started, the chunk resumed from its checkpoint, the pipeline done, then the
published output checked against a one-shot plain Spark run of the same transform. The
embedded run takes the ``--bad-rows`` path as well (source blobs spoiled once staged:
verify fails, publish blocked; fixed, redriven, done), which adds only a few seconds of
cheap steps; Azurite's takes the default one. A few transform checks run on the same
session.

PySpark is imported at the top on purpose: without the ``spark`` extra this module fails
to collect instead of silently skipping.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyspark  # noqa: F401  - a missing spark extra must fail here, never skip
import pytest
from pyspark.sql import functions as F

from checkpoint.backends import open_storage
from jobs.spark import (
    ATTEMPTS_DIR,
    COMMIT_MARKER,
    content_checksum,
    read_commit,
)
from jobs.testing import ChunkEnvironment
from samples.migration import generate as gen
from samples.migration import layout
from samples.migration.demo import DemoOptions, DemoResult, run_demo
from samples.migration.demo_watch import progress_line
from samples.migration.job import MigrateOrders, new_tally, tallied
from samples.migration.layout import MigrationParams, staged_inputs
from samples.migration.processes import Runner
from samples.migration.transform import (
    REASONS,
    judge,
    latest_orders,
    outputs,
    read_orders_v1,
    rejected,
)
from tests.backends import BACKENDS
from tests.jobs.spark_jobs import spark_jobs

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

#: Small, but with every kind of dirt, several batches per chunk (so a worker can be
#: caught between two checkpoints) and two chunks.
ROWS = 16_000
FILES = 8
FILES_PER_CHUNK = 4
#: Azurite's run: the same first chunk (files of the same size, so the same batches to
#: catch a worker between), a second chunk of one file. The embedded run has already
#: shown the Spark side at full size; this one shows the same run on Azure Storage's
#: queues, leases and blobs, with three batches less Spark work.
SIZES = {"embedded": (ROWS, FILES), "azurite": (ROWS * 5 // FILES, 5)}


@pytest.fixture
def spark(local_spark: Any) -> Any:
    """The run's one local session (tests/conftest.py); the demo's verification finds it."""
    return local_spark


@pytest.fixture(scope="module", params=BACKENDS)
def demo(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DemoResult, list[str], Path]:
    """One whole demo run on the backend; its result, its printed lines and its folder."""
    storage = None
    if request.param == "azurite":
        storage = request.getfixturevalue("azurite").connection_string
    workdir = tmp_path_factory.mktemp(f"migration-{request.param}")
    rows, files = SIZES[request.param]
    bad_rows = request.param == "embedded"
    options = DemoOptions(
        storage, rows, files, FILES_PER_CHUNK, timeout_seconds=600, bad_rows=bad_rows
    )
    said: list[str] = []
    try:
        result = run_demo(options, workdir, say=said.append)
    except BaseException:
        print("\n".join(said))  # what it did so far, and the workers' log tails
        raise
    return result, said, workdir


# --------------------------------------------------------------------------- end to end


def test_chunked_migration_equals_the_one_shot_run(demo: tuple[DemoResult, list[str], Path]):
    result, said, _ = demo
    verdict = result.verdict
    # Then the pipeline is done, and what it published agrees with the one-shot run, row
    # counts and content checksums, for orders and rejects alike
    assert result.pipeline_state == "done" and result.ok, "\n".join(said)
    assert verdict.chunked == verdict.one_shot == verdict.summary
    assert "VERDICT: the chunked, crash-resumed migration equals the one-shot run" in said


def test_verify_checked_every_line_and_publish_wrote_the_transforms_outputs(
    demo: tuple[DemoResult, list[str], Path],
):
    result, said, _ = demo
    checked, published = result.checked, result.published
    assert checked is not None and published is not None
    # Then verify read every source blob and found the lines the transform read ...
    assert checked["differences"] == 0
    assert checked["files"] == len(result.generated.names) == checked["batches"]
    assert checked["source_lines"] == checked["rows_in"] == result.generated.rows
    assert checked["outputs_checked"] == 2 * len(result.generated.names)
    # ... and publish listed exactly the transform's outputs, with its totals
    strip = [
        {k: e[k] for k in ("kind", "path", "rows", "checksum")} for e in result.manifest["outputs"]
    ]
    assert published["outputs"] == strip
    assert published["rows_out"] == result.summary["rows_out"]
    assert any(line.startswith("   verify: ") and "0 differences" in line for line in said)


def test_bad_rows_fail_verify_block_publish_and_only_their_chunks_run_again(
    demo: tuple[DemoResult, list[str], Path],
):
    result, said, _ = demo
    bad = result.bad_rows
    if result.generated.rows != ROWS:  # Azurite's run: the default path, nothing planted
        assert bad is None and "--bad-rows" not in "\n".join(said)
        return
    assert bad is not None, "\n".join(said)
    # Then verify failed on the chunks of the two spoiled blobs, naming them ...
    assert bad.planted is not None and bad.differences is not None, "\n".join(said)
    assert bad.verify_error is not None and "2 chunk(s) poisoned" in bad.verify_error
    spoiled = sorted(bad.planted.before)
    assert [
        name for message in bad.differences.values() for name in spoiled if name in message
    ] == spoiled
    # ... publish was blocked by it, not run
    assert bad.publish_state == "blocked"
    assert bad.publish_blocked is not None and "step verify failed" in bad.publish_blocked
    # ... and after the fix and the redrive only those chunks ran again, of all the
    # chunks a rerun from scratch would run
    again = bad.run_again
    assert again is not None and bad.only_what_differed_ran
    assert again.count == 2 < again.from_scratch
    assert again.total == {"stage": 2, "transform": 2, "verify": 4, "publish": 0}


def test_counts_are_what_the_generator_made(demo: tuple[DemoResult, list[str], Path]):
    # Then the transform kept and rejected exactly what the generator knows it wrote
    # (an independent check: the one-shot run shares the transform's mistakes)
    result, _, _ = demo
    made, summary = result.generated, result.summary
    assert (made.rows, len(made.names)) in SIZES.values()
    assert summary["rows_in"] == made.rows
    assert summary["chunks"] == 2  # the killed chunk and another, which starts afresh
    assert summary["rows_out"] == made.orders
    assert summary["rows_rejected"] == made.rejects > 0
    assert summary["duplicates_dropped"] > 0
    assert (
        set(summary["rejected_by_reason"])
        <= set(REASONS)
        == {
            "malformed_line",
            *(
                f"{how}_{name}"
                for how in ("missing", "bad")
                for name in ("order_id", "order_date", "updated_at", "amount")
            ),
        }
    )


def test_killed_chunk_resumed_from_its_checkpoint(demo: tuple[DemoResult, list[str], Path]):
    result, said, _ = demo
    crash = result.crash
    # Then a worker was killed holding a chunk past its first checkpoint ...
    assert crash is not None, "\n".join(said)
    assert 1 <= crash.batch < crash.of
    assert result.exit_codes[crash.worker] == -9
    assert all(code == 0 for name, code in result.exit_codes.items() if name != crash.worker)
    # ... and a later attempt went on from there (the killer may have raced one more
    # checkpoint, never fewer), without redoing the batches before it
    (line,) = [chunk for chunk in result.summary["per_chunk"] if chunk["index"] == crash.chunk]
    assert line["attempt"] >= 2
    assert crash.batch <= line["resumed_at_batch"] <= line["of"]
    others = [chunk for chunk in result.summary["per_chunk"] if chunk["index"] != crash.chunk]
    assert all(chunk["resumed_at_batch"] == 0 for chunk in others)


def test_progress_says_which_chunks_wait_for_a_worker(tmp_path: Path):
    # Given two chunks with a checkpoint, one of them held by a worker that is gone
    runner = Runner(storage="embedded:unused", logs=tmp_path)
    status = {
        "state": "running",
        "planning_done": True,
        "chunks": {"total": 6, "done": 2, "failed": 0},
        "running": [
            {
                "index": 0,
                "worker": "vm:101:aa",
                "attempt": 1,
                "lease_expired": True,
                "progress": {"batch": 1, "of": 4},
            },
            {
                "index": 3,
                "worker": "vm:102:bb",
                "attempt": 2,
                "lease_expired": False,
                "progress": {"batch": 2, "of": 4},
            },
        ],
    }
    # Then the line does not show the dead worker still running its chunk
    assert progress_line(runner, status) == (
        "running: chunks 2/6 done; running #3 on vm:102:bb batch 2/4 (attempt 2); "
        "waiting for a worker #0 at batch 1/4 (the lease of vm:101:aa ran out, attempt 1)"
    )


def test_every_batch_output_is_committed_once(demo: tuple[DemoResult, list[str], Path], spark: Any):
    result, _, workdir = demo
    outputs = result.manifest["outputs"]
    # Then the manifest lists orders and rejects of every batch (one file per batch),
    # each as its published attempt's marker names it ...
    assert len(outputs) == 2 * len(result.generated.names)
    assert all(read_commit(entry["path"]).attempt == entry["attempt"] for entry in outputs)
    # ... and nothing else sits in the job's output: the killed attempt's batch went to
    # a directory of its own, swept by finalize
    root = workdir / "output" / result.job_id
    on_disk = {str(path.parent) for path in root.rglob(COMMIT_MARKER)}
    assert on_disk == {entry["path"] for entry in outputs}
    assert {path.parent for path in root.rglob("*.parquet")} <= {Path(p) for p in on_disk}
    assert not list(root.rglob(ATTEMPTS_DIR))
    # so a plain read of the job's output gives exactly the published rows
    orders = spark.read.parquet(str(root / "chunk-*" / "orders" / "batch-*"))
    assert orders.count() == result.summary["rows_out"]


# --------------------------------------------------------------------------- one chunk

#: Spark jobs a batch may run: its two writes. The orders write is three under adaptive
#: execution (fill the cache, the shuffle's map side, the write); the rejects write one.
#: The cache-filling count by reason and the read-backs took six more.
JOBS_PER_BATCH = 4


def test_a_batch_is_its_two_writes_and_counts_what_it_judged(spark: Any, tmp_path: Path):
    # Given a chunk of two input files, one per batch
    store = str(tmp_path / "store")
    with open_storage(store) as storage:
        made = gen.generate(storage, 4_000, 2)
    params = {
        "output": str(tmp_path / "out"),
        "storage": store,
        "input_container": made.container,
        "scratch": str(tmp_path / "scratch"),
    }
    env = ChunkEnvironment(
        MigrateOrders, params=params, payload={"files": made.names, "bytes": 0}, job_id="one-chunk"
    )

    # When the chunk runs
    jobs = spark_jobs(spark, env.run)

    # Then it ran no Spark job but its writes, and checkpointed after each batch
    assert jobs <= JOBS_PER_BATCH * len(made.names)
    assert [state["batch"] for state in env.durable] == [1, 2]
    # and its totals are those of the same transform over the same files, counted apart
    with (
        open_storage(store) as storage,
        staged_inputs(storage, MigrationParams.of(params), made.names) as paths,
    ):
        judged = judge(read_orders_v1(spark, paths))
        counted = judged.groupBy("reason").count().collect()
        by_reason = {row["reason"]: row["count"] for row in counted}
        migrated = outputs(judged)
        expected = {
            "checksum": content_checksum(migrated.orders),
            "rejects_checksum": content_checksum(migrated.rejects),
        }
    result = env.result
    assert (result["rows_in"], result["rows_out"], result["rows_rejected"]) == (
        made.rows,
        made.orders,
        made.rejects,
    )
    assert result["reasons"] == {reason: n for reason, n in by_reason.items() if reason}
    assert {key: result[key] for key in expected} == expected


def test_a_batch_cut_in_pieces_migrates_to_the_same_rows(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given generated v1 files, with every kind of dirt, staged whole and staged cut in
    # pieces (pieces of a few KiB, so these small files are cut too)
    monkeypatch.setattr(layout, "MIN_PIECE_BYTES", 4096)
    store = str(tmp_path / "store")
    with open_storage(store) as storage:
        made = gen.generate(storage, 4_000, 2)
        params = MigrationParams.of(
            {"output": str(tmp_path / "out"), "storage": store, "input_container": made.container}
        )
        names = list(made.names)
        with (
            staged_inputs(storage, params, names) as whole,
            staged_inputs(storage, params, names, parallelism=3) as cut,
        ):
            # When each is migrated
            expected = outputs(judge(read_orders_v1(spark, whole)))
            found = outputs(judge(read_orders_v1(spark, cut)))

            # Then the pieces are more files, and both outputs are the same rows
            assert (len(whole), len(cut)) == (2, 6)
            for kind in ("orders", "rejects"):
                want, got = getattr(expected, kind), getattr(found, kind)
                assert got.count() == want.count() > 0
                assert content_checksum(got) == content_checksum(want)


def few_judged_rows(spark: Any, tmp_path: Path) -> Any:
    """Five v1 lines judged: two versions of order 1, and one each of three reject
    reasons (an order id that does not parse, a missing date, a truncated line)."""
    path = tmp_path / "few.jsonl"
    path.write_text(
        '{"order_id": "1", "order_date": "2023-04-05", "updated_at": "1680690120", "amount": "1"}\n'
        '{"order_id": "1", "order_date": "2023-04-05", "updated_at": "1680690999", "amount": "2"}\n'
        '{"order_id": "x", "order_date": "2023-04-05", "updated_at": "1680690120", "amount": "1"}\n'
        '{"order_id": "2", "order_date": "", "updated_at": "1680690120", "amount": "1"}\n'
        '{"order_id": "3", "order_date": "2023-04-05", "updated_at": "1680690120", "amou\n'
    )
    return judge(read_orders_v1(spark, [str(path)]))


def test_latest_orders_counts_every_judged_row_it_groups(spark: Any, tmp_path: Path):
    # Given judged rows: valid ones, rejected ones, and rows whose order id is null
    judged = few_judged_rows(spark, tmp_path)
    rows_in = new_tally()

    # When the latest orders are computed with a rows-in count
    counted = latest_orders(judged, rows_in).collect()

    # Then every judged row was counted, valid or not, and the result is unchanged
    assert rows_in.get == {"rows_in": 5}
    assert counted == latest_orders(judged).collect()
    assert [(row["order_id"], str(row["amount"])) for row in counted] == [(1, "2.00")]


def test_latest_orders_of_no_rows_counts_zero(spark: Any, tmp_path: Path):
    # Given an empty v1 file
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    judged = judge(read_orders_v1(spark, [str(path)]))
    rows_in = new_tally()

    # When its latest orders are computed with a rows-in count
    counted = latest_orders(judged, rows_in).collect()

    # Then nothing came out and the count is 0, not null
    assert counted == []
    assert rows_in.get == {"rows_in": 0}


def test_tallied_counts_the_rejects_by_reason(spark: Any, tmp_path: Path):
    # Given the rejects of judged rows with several reasons
    rejects = rejected(few_judged_rows(spark, tmp_path))
    tally = new_tally()

    # When an action reads them through the tally
    read = tallied(rejects, tally).count()

    # Then each reason was counted (absent ones as 0), adding up to the rows read
    assert read == 3
    assert tally.get == {
        **dict.fromkeys(REASONS, 0),
        "bad_order_id": 1,
        "missing_order_date": 1,
        "malformed_line": 1,
    }


def test_generated_data_is_deterministic_and_partitioned_by_key(tmp_path: Path):
    # Given the same size and seed generated twice
    with open_storage(str(tmp_path / "a")) as first, open_storage(str(tmp_path / "b")) as second:
        made = gen.generate(first, 3_000, 3, seed=7)
        again = gen.generate(second, 3_000, 3, seed=7)
        blobs = {name: first.blobs.get(made.container, name) for name in made.names}
        # Then the bytes are the same
        assert made == again
        assert blobs == {name: second.blobs.get(made.container, name) for name in made.names}
    # And every version of an order sits in one file, the one its key maps to
    files_of: dict[int, set[int]] = defaultdict(set)
    for number, name in enumerate(made.names):
        for line in blobs[name].decode().splitlines():
            if '"order_id": ' in line and line.endswith("}"):  # not truncated
                key = line.split('"order_id": ', 1)[1].split(",", 1)[0].strip('"')
                if key.removeprefix("ORD-").isdigit():  # not a spoiled id
                    files_of[int(key.removeprefix("ORD-"))].add(number)
    assert len(files_of) > 2_000
    assert all(found == {key % 3} for key, found in files_of.items())


def test_every_v1_format_of_an_order_types_to_the_same_v2_row(spark: Any, tmp_path: Path):
    # Given one order version written in every format the legacy export used
    updated_at = datetime(2023, 4, 6, 22, 30, 15, tzinfo=UTC)
    version = gen._Version(
        order_id=1234,
        customer_id=42,
        day=(date(2023, 4, 5) - gen.FIRST_DAY).days,
        updated_at=int(updated_at.timestamp()) - gen.FIRST_EPOCH,
        cents=123_456,
        currency="EUR",
        status="cancelled",
    )
    rng = random.Random(3)
    lines: set[str] = set()
    while len(lines) < 300:
        line, valid = gen._render(rng, version)
        if valid and '"status": null' not in line:  # a missing status is "unknown"
            lines.add(line)
    path = tmp_path / "one-order.jsonl"
    path.write_text("".join(sorted(lines)))
    # When each line is typed (before deduplication merges them)
    judged = judge(read_orders_v1(spark, [str(path)]))
    typed = judged.select(
        "order_id",
        "customer_id",
        "order_date",
        F.col("updated_at").cast("long"),
        F.col("amount").cast("string"),
        "currency",
        "status",
        "reason",
    )
    # Then every line gives the same, correctly typed, valid row
    assert {tuple(row) for row in typed.collect()} == {
        (
            1234,
            42,
            date(2023, 4, 5),
            int(updated_at.timestamp()),
            "1234.56",
            "EUR",
            "cancelled",
            None,
        )
    }
