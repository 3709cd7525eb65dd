"""The migration pipeline's steps other than Spark's: stage, verify, publish.

No Spark: the transform's part is a small manifest written here, as ``MigrateOrders``'
finalize writes it (the batches with the blobs they read and the rows read, the
outputs with their commit markers). The whole pipeline, Spark included, runs in
``test_migration_sample.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkpoint.backends import open_storage
from checkpoint.storage import Storage
from jobs import ChunkFailed
from jobs.spark import COMMIT_MARKER
from jobs.testing import ChunkEnvironment, CrashAt, run_job
from samples.migration import generate as gen
from samples.migration.job import inputs_of
from samples.migration.layout import MigrationParams, get_json, put_json
from samples.migration.pipeline import STEPS, migration_pipeline
from samples.migration.publish import PublishManifest
from samples.migration.reconcile import VerifyAgainstSource, batches_to_check
from samples.migration.stage import STAGING_CONTAINER, FileFacts, StageExport

RESULTS = "orders-v2"
STAGE_JOB, TRANSFORM_JOB, VERIFY_JOB = "p-stage", "p-transform", "p-verify"
#: A broken line a legacy job wrote into the export after it was staged.
PLANTED = b'{"order_id": "ORD-9", "amount": "$-"\n'


@pytest.fixture
def store(tmp_path: Path) -> str:
    """Where the blobs are (each test's jobs run on run_job's own store)."""
    return str(tmp_path / "blobs")


@pytest.fixture
def made(store: str) -> gen.Generated:
    with open_storage(store) as storage:
        return gen.generate(storage, 900, 3)


def stage_params(store: str, **more: Any) -> dict[str, Any]:
    return {"staging_prefix": "p/", "storage": store, "results_container": RESULTS, **more}


# --------------------------------------------------------------------------- stage


def test_stage_copies_every_blob_and_resumes_at_the_next_one(store: str, made: gen.Generated):
    # Given three source blobs in one chunk, and a worker that dies after the 2nd copy
    params = stage_params(store)

    # When the stage step runs
    run = run_job(StageExport, params, crash=CrashAt(chunk=0, checkpoint=2), job_id=STAGE_JOB)

    # Then the next attempt went on at the third blob, not copying the first two again
    run.assert_done()
    crashed, resumed = run.chunks[0].calls
    assert crashed.outcome == "crashed" and len(resumed.started_from) == 2
    assert [entry["source"] for entry in resumed.checkpoints[-1]] == list(made.names)
    # And every copy is its source, byte for byte, with the facts in the manifest
    with open_storage(store) as storage:
        manifest = get_json(storage, RESULTS, f"{STAGE_JOB}/manifest.json")
        for entry in manifest["files"]:
            data = storage.blobs.get(made.container, entry["source"])
            assert storage.blobs.get(STAGING_CONTAINER, entry["staged"]) == data
            assert entry["staged"] == "p/" + entry["source"]
            assert FileFacts(entry["size"], entry["lines"], entry["sha256"]) == FileFacts.of(data)
    assert sum(entry["lines"] for entry in manifest["files"]) == made.rows


def test_file_facts_count_the_lines_spark_reads():
    # Given text with a blank line and a last line without its newline
    facts = FileFacts.of(b'{"a": 1}\n\n  \n{"a": 2}\n{"a"')

    # Then the blank lines are not counted (Spark's JSON reader skips them), the last is
    assert (facts.size, facts.lines) == (26, 3)
    assert facts.describe().startswith("3 lines, 26 bytes, sha256 ")


# --------------------------------------------------------------------------- verify


def staged_and_transformed(store: str, tmp_path: Path) -> dict[str, Any]:
    """Run the stage step, then write what the transform would have: one batch per blob
    (in chunks of two blobs), each with its rows read and two committed outputs."""
    run_job(StageExport, stage_params(store), job_id=STAGE_JOB).assert_done()
    with open_storage(store) as storage:
        staged = get_json(storage, RESULTS, f"{STAGE_JOB}/manifest.json")
        inputs, outputs = [], []
        for number, entry in enumerate(staged["files"]):
            chunk, batch = divmod(number, 2)
            inputs.append(
                {
                    "chunk": chunk,
                    "batch": batch,
                    "files": [entry["staged"]],
                    "rows_in": entry["lines"],
                }
            )
            for kind, rows in (("orders", entry["lines"] // 2), ("rejects", 3)):
                path = tmp_path / "out" / f"{chunk}-{batch}-{kind}"
                commit(path, rows, str(1000 + number))
                outputs.append(
                    {
                        "chunk": chunk,
                        "batch": batch,
                        "kind": kind,
                        "path": str(path),
                        "rows": rows,
                        "checksum": str(1000 + number),
                        "attempt": "1",
                    }
                )
        manifest = {
            "job_id": TRANSFORM_JOB,
            "format": "parquet",
            "inputs": inputs,
            "outputs": outputs,
        }
        put_json(storage, RESULTS, f"{TRANSFORM_JOB}/manifest.json", manifest)
        return manifest


def commit(path: Path, rows: int, checksum: str) -> None:
    """A commit marker as ``jobs.spark.write_chunk_output`` leaves it."""
    path.mkdir(parents=True, exist_ok=True)
    marker = {"rows": rows, "checksum": checksum, "format": "parquet", "attempt": "1", "path": ""}
    (path / COMMIT_MARKER).write_text(json.dumps(marker))


def verify_params(store: str, **more: Any) -> dict[str, Any]:
    return {
        "stage_job": STAGE_JOB,
        "transform_job": TRANSFORM_JOB,
        "results_container": RESULTS,
        "storage": store,
        "batches_per_chunk": 1,
        **more,
    }


def test_verify_passes_a_migration_that_accounts_for_its_source(
    store: str, made: gen.Generated, tmp_path: Path
):
    # Given a staged export and a transform that read every line of it
    staged_and_transformed(store, tmp_path)

    # When the verify step runs, a chunk per batch
    run = run_job(VerifyAgainstSource, verify_params(store), job_id=VERIFY_JOB)

    # Then it passes, with a verdict of what it checked
    run.assert_done()
    assert run.total == 3
    with open_storage(store) as storage:
        verdict = get_json(storage, RESULTS, f"{VERIFY_JOB}/verdict.json")
    assert verdict == {
        "job_id": VERIFY_JOB,
        "stage_job": STAGE_JOB,
        "transform_job": TRANSFORM_JOB,
        "chunks": 3,
        "batches": 3,
        "files": 3,
        "source_lines": made.rows,
        "rows_in": made.rows,
        "outputs_checked": 6,
        "differences": 0,
    }


def plant(storage: Storage, container: str, name: str) -> bytes:
    """Add a broken line to a source blob; its bytes before."""
    before = storage.blobs.get(container, name)
    storage.blobs.put(container, name, before + PLANTED)
    return before


def test_a_source_changed_after_staging_fails_only_its_chunks_without_retry(
    store: str, made: gen.Generated, tmp_path: Path
):
    # Given a staged export and its transform, then a line added to one source blob
    staged_and_transformed(store, tmp_path)
    with open_storage(store) as storage:
        plant(storage, made.container, made.names[1])

    # When the verify step runs
    run = run_job(VerifyAgainstSource, verify_params(store), job_id=VERIFY_JOB)

    # Then that blob's chunk is poisoned at its first attempt, naming what differs, and
    # the others passed; the job failed at its end, without a verdict
    assert run.state == "failed"
    assert [chunk.state for chunk in run.chunks] == ["done", "poisoned", "done"]
    (call,) = run.chunks[1].calls
    message = str(call.error)
    assert message.startswith("1 difference(s) from the source: export/orders-0001.jsonl: ")
    lines = made.rows // 3
    assert f"the source has {lines + 1:,} lines" in message
    assert f"the staged copy the transform read has {lines:,} lines" in message
    assert run.finalize is None


def test_a_verify_chunk_passes_once_its_source_is_put_right(
    store: str, made: gen.Generated, tmp_path: Path
):
    # Given a source blob changed after staging, and the verify chunk of its batch
    transformed = staged_and_transformed(store, tmp_path)
    with open_storage(store) as storage:
        staged = get_json(storage, RESULTS, f"{STAGE_JOB}/manifest.json")
        before = plant(storage, made.container, made.names[2])
    batch = list(batches_to_check(staged, transformed))[2]
    payload = {"source_container": made.container, "batches": [batch]}
    env = ChunkEnvironment(VerifyAgainstSource, params=verify_params(store), payload=payload)

    # When it runs, it fails, not to be retried
    with pytest.raises(ChunkFailed) as failed:
        env.run()
    assert failed.value.retry is False

    # When the source is put back as it was staged, the same chunk passes
    with open_storage(store) as storage:
        storage.blobs.put(made.container, made.names[2], before)
    assert env.next_attempt().run()["source_lines"] == batch["rows_in"]


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        ("rows_in", "transform chunk 0 batch 1: 300 source lines, 299 rows read"),
        ("marker", "the marker says 150 rows, checksum 1001; the manifest 150, 7"),
        ("written", "transform chunk 0 batch 1: 453 rows written from 300 read"),
        ("unstaged", "p/export/stray.jsonl: read by transform chunk 0 batch 1, not copied by"),
        ("no marker", "0-1-orders: no commit marker"),
    ],
)
def test_verify_lists_what_the_transform_published_wrong(
    store: str, made: gen.Generated, tmp_path: Path, spoil: str, expected: str
):
    # Given a transform whose manifest or output is wrong for one batch
    transformed = staged_and_transformed(store, tmp_path)
    with open_storage(store) as storage:
        staged = get_json(storage, RESULTS, f"{STAGE_JOB}/manifest.json")
    batch = list(batches_to_check(staged, transformed))[1]
    orders = batch["outputs"][0]
    if spoil == "rows_in":
        batch["rows_in"] -= 1
    elif spoil == "marker":
        orders["checksum"] = "7"
    elif spoil == "written":
        orders["rows"] = 450
        commit(Path(orders["path"]), 450, orders["checksum"])
    elif spoil == "unstaged":
        batch["files"].append({"staged": "p/export/stray.jsonl"})
    else:
        (Path(orders["path"]) / COMMIT_MARKER).unlink()
    payload = {"source_container": made.container, "batches": [batch]}
    env = ChunkEnvironment(VerifyAgainstSource, params=verify_params(store), payload=payload)

    # When its verify chunk runs, Then it fails naming the difference
    with pytest.raises(ChunkFailed, match="difference") as failed:
        env.run()
    assert expected in str(failed.value)


def test_a_source_blob_added_after_staging_stops_the_pipeline(
    store: str, made: gen.Generated, tmp_path: Path
):
    # Given a staged export and its transform, then a new blob in the source
    staged_and_transformed(store, tmp_path)
    with open_storage(store) as storage:
        storage.blobs.put(made.container, "export/orders-late.jsonl", PLANTED)

    # When the verify step runs
    run = run_job(VerifyAgainstSource, verify_params(store), job_id=VERIFY_JOB)

    # Then every chunk passed, and its finalize stopped the pipeline, naming the blob
    assert [chunk.state for chunk in run.chunks] == ["done"] * 3
    assert run.state == "failed"
    assert run.error is not None and "export/orders-late.jsonl: in the source, never staged" in (
        run.error
    )


# --------------------------------------------------------------------------- publish


def publish_inputs(store: str) -> None:
    """The transform's manifest and summary and verify's verdict, as publish reads them."""
    with open_storage(store) as storage:
        put_json(
            storage,
            RESULTS,
            f"{TRANSFORM_JOB}/manifest.json",
            {
                "format": "parquet",
                "inputs": [],
                "outputs": [
                    {
                        "chunk": 0,
                        "batch": 0,
                        "kind": "orders",
                        "path": "/o",
                        "rows": 5,
                        "checksum": "9",
                        "attempt": "2",
                    }
                ],
            },
        )
        summary = {
            "rows_in": 9,
            "rows_out": 5,
            "rows_rejected": 1,
            "checksum": "9",
            "rejects_checksum": "4",
            "chunks": 1,
        }
        put_json(storage, RESULTS, f"{TRANSFORM_JOB}/summary.json", summary)
        verdict = {"files": 1, "source_lines": 9, "outputs_checked": 1, "differences": 0}
        put_json(storage, RESULTS, f"{VERIFY_JOB}/verdict.json", verdict)


def publish_params(store: str) -> dict[str, Any]:
    return {
        "pipeline": "p",
        "transform_job": TRANSFORM_JOB,
        "verify_job": VERIFY_JOB,
        "results_container": RESULTS,
        "storage": store,
    }


def test_publish_writes_the_manifest_once(store: str):
    # Given what the transform and verify steps wrote
    publish_inputs(store)

    # When the publish step runs, and its finalize runs again (a worker died after the write)
    run = run_job(PublishManifest, publish_params(store), crash=CrashAt.finalizing(checkpoint=None))

    # Then it ended done, with one manifest of what was published and verified
    run.assert_done()
    assert run.total == 0 and run.finalize is not None and len(run.finalize.calls) == 2
    with open_storage(store) as storage:
        published = get_json(storage, RESULTS, "p/manifest.json")
    assert published == {
        "pipeline": "p",
        "format": "parquet",
        "transform_job": TRANSFORM_JOB,
        "verify_job": VERIFY_JOB,
        "rows_in": 9,
        "rows_out": 5,
        "rows_rejected": 1,
        "checksum": "9",
        "rejects_checksum": "4",
        "verified": {"files": 1, "source_lines": 9, "outputs_checked": 1},
        "outputs": [{"kind": "orders", "path": "/o", "rows": 5, "checksum": "9"}],
    }


def test_publish_never_replaces_another_manifest(store: str):
    # Given another manifest published under the pipeline's name
    publish_inputs(store)
    with open_storage(store) as storage:
        put_json(storage, RESULTS, "p/manifest.json", {"pipeline": "p", "outputs": []})

    # When the publish step runs, Then it fails at once, leaving it as it was
    run = run_job(PublishManifest, publish_params(store))
    assert run.state == "failed"
    assert run.finalize is not None and len(run.finalize.calls) == 1
    assert "holds another manifest already; not replaced" in str(run.finalize.calls[0].error)
    with open_storage(store) as storage:
        assert get_json(storage, RESULTS, "p/manifest.json") == {"pipeline": "p", "outputs": []}


# --------------------------------------------------------------------------- the pipeline


def test_the_pipeline_runs_its_steps_in_order_on_the_staged_copy():
    # When the pipeline is declared
    run = migration_pipeline("orders-1", {"output": "/out", "files_per_batch": 2})

    # Then its four steps run one after the other, the transform on the staged copy
    assert [step.name for step in run.steps] == list(STEPS)
    assert [step.after for step in run.steps] == [
        (),
        ("orders-1-stage",),
        ("orders-1-transform",),
        ("orders-1-verify",),
    ]
    stage, transform, verify, publish = (step.params for step in run.steps)
    assert MigrationParams.of(transform).input_container == STAGING_CONTAINER
    assert transform["input_prefix"] == stage["staging_prefix"] + stage["source_prefix"]
    assert (verify["stage_job"], verify["transform_job"]) == (
        "orders-1-stage",
        "orders-1-transform",
    )
    assert (publish["pipeline"], publish["verify_job"]) == ("orders-1", "orders-1-verify")


def test_the_transform_lists_each_batch_with_the_blobs_it_read():
    # Given a chunk's result of three blobs in batches of two
    result = {"files": ["a", "b", "c"], "rows_in_by_batch": [10, 4]}

    # Then the manifest's inputs name each batch's blobs and rows read
    settings = MigrationParams.of({"output": "/out", "files_per_batch": 2})
    assert inputs_of(settings, 3, result) == [
        {"chunk": 3, "batch": 0, "files": ["a", "b"], "rows_in": 10},
        {"chunk": 3, "batch": 1, "files": ["c"], "rows_in": 4},
    ]
