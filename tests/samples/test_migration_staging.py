"""The migration sample's staging: blobs copied to local files, cut at line ends.

No Spark here: what a cut must keep is bytes and lines. That Spark reads the same rows
from the pieces as from the whole file is checked in ``test_migration_sample.py``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError
from checkpoint.storage import Storage
from jobs.spark.settings import SparkSettings
from jobs.testing import run_job
from samples.migration import layout
from samples.migration.job import MigrateOrders
from samples.migration.layout import (
    MigrationParams,
    StagingUnreachable,
    check_staging,
    copy_blob,
    pieces_per_file,
    staged_inputs,
)

CONTAINER = "orders-v1"


@pytest.fixture
def storage(tmp_path: Path):
    with open_storage(str(tmp_path / "store")) as opened:
        opened.blobs.create_container(CONTAINER)
        yield opened


@pytest.fixture
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads and pieces of a few hundred bytes, so small blobs cross many of both."""
    monkeypatch.setattr(layout, "STAGE_READ_BYTES", 257)
    monkeypatch.setattr(layout, "MIN_PIECE_BYTES", 100)


@pytest.mark.parametrize(
    ("files", "parallelism", "pieces"),
    [
        (1, 1, 1),
        (3, 1, 1),
        (1, 2, 2),
        (2, 2, 1),
        (3, 2, 2),
        (4, 2, 1),
        (3, 8, 8),
        (6, 8, 4),
        (12, 8, 2),
        (16, 8, 1),
    ],
)
def test_pieces_per_file_makes_a_multiple_of_the_parallelism(
    files: int, parallelism: int, pieces: int
):
    assert pieces_per_file(files, parallelism) == pieces
    assert (files * pieces) % parallelism == 0


@pytest.mark.parametrize(("files", "parallelism"), [(0, 2), (2, 0)])
def test_pieces_per_file_refuses_nothing_to_deal(files: int, parallelism: int):
    with pytest.raises(ValueError, match=">= 1"):
        pieces_per_file(files, parallelism)


def test_a_blob_cut_in_pieces_keeps_every_byte_and_every_line(
    storage: Storage, tmp_path: Path, small_reads: None
):
    rng = random.Random(5)
    for trial in range(200):
        # Given a blob of lines of any length (some longer than a read), with or
        # without a last newline, sometimes empty
        lines = [b"x" * rng.randint(0, 600) for _ in range(rng.randint(0, 30))]
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        storage.blobs.put(CONTAINER, "b.jsonl", data)
        pieces = rng.randint(1, 6)

        # When it is copied in pieces
        copied = copy_blob(storage, CONTAINER, "b.jsonl", tmp_path / f"{trial}.jsonl", pieces)

        # Then the pieces joined are the blob, every piece but the last ends a line,
        # none is empty (unless the blob is), and there are no more than asked
        found = [path.read_bytes() for path in copied]
        assert b"".join(found) == data, trial
        assert all(piece.endswith(b"\n") for piece in found[:-1]), trial
        assert all(found) or found == [b""], trial
        assert 1 <= len(copied) <= max(1, min(pieces, len(data) // layout.MIN_PIECE_BYTES))


def test_pieces_are_about_equal(storage: Storage, tmp_path: Path, small_reads: None):
    # Given a blob of many short lines
    data = b"".join(b'{"order_id": "%d"}\n' % n for n in range(2_000))
    storage.blobs.put(CONTAINER, "b.jsonl", data)

    # When it is cut in 3
    copied = copy_blob(storage, CONTAINER, "b.jsonl", tmp_path / "b.jsonl", 3)

    # Then each piece is within a line of a third, named after the target
    sizes = [path.stat().st_size for path in copied]
    assert [path.name for path in copied] == ["b.0.jsonl", "b.1.jsonl", "b.2.jsonl"]
    assert max(sizes) - min(sizes) <= 2 * len(b'{"order_id": "1999"}\n')


def test_a_small_blob_is_not_cut(storage: Storage, tmp_path: Path):
    # Given a blob under the smallest piece
    storage.blobs.put(CONTAINER, "b.jsonl", b'{"order_id": "1"}\n' * 100)

    # When it is copied in 4 pieces
    copied = copy_blob(storage, CONTAINER, "b.jsonl", tmp_path / "b.jsonl", 4)

    # Then it is one whole copy
    assert copied == [tmp_path / "b.jsonl"]
    assert copied[0].read_bytes() == b'{"order_id": "1"}\n' * 100


def test_staged_inputs_cut_a_batch_for_its_parallelism_and_clean_up(
    storage: Storage, tmp_path: Path, small_reads: None
):
    # Given three blobs of a batch, on a session of parallelism 2
    blobs = {
        f"export/{n}.jsonl": b"".join(b"line %d of %d\n" % (i, n) for i in range(300))
        for n in range(3)
    }
    for name, data in blobs.items():
        storage.blobs.put(CONTAINER, name, data)
    params = MigrationParams.of({"output": str(tmp_path / "out"), "scratch": str(tmp_path)})

    # When the batch is staged
    with staged_inputs(storage, params, sorted(blobs), parallelism=2) as paths:
        # Then each blob is two pieces: six files, each blob's pieces its bytes in order
        assert len(paths) == 6
        for number, name in enumerate(sorted(blobs)):
            mine = sorted(path for path in paths if Path(path).name.startswith(f"{number:05d}-"))
            assert b"".join(Path(path).read_bytes() for path in mine) == blobs[name]
        folder = Path(paths[0]).parent
    # and nothing is left once the batch is done
    assert not folder.exists()


def test_staged_inputs_read_in_place_are_not_cut(storage: Storage, tmp_path: Path):
    params = MigrationParams.of(
        {
            "output": "abfss://out@acct.dfs.core.windows.net/v2",
            "spark_input": "abfss://orders-v1@acct.dfs.core.windows.net/",
        }
    )
    with staged_inputs(storage, params, ["export/a.jsonl"], parallelism=4) as paths:
        assert paths == ["abfss://orders-v1@acct.dfs.core.windows.net/export/a.jsonl"]


# --------------------------------------------------------------------------- staging


@pytest.mark.parametrize(
    "params, refused",
    [
        ({}, True),  # the system's temp folder, on this worker's disk
        ({"scratch": "/mnt/scratch"}, True),  # a folder, not said to be shared
        ({"scratch": "/mnt/scratch", "scratch_shared": True}, False),
        ({"scratch": "file:///mnt/scratch", "scratch_shared": True}, False),
        ({"spark_input": "abfss://v1@acct.dfs.core.windows.net/"}, False),  # read in place
    ],
)
def test_staging_on_a_remote_needs_a_shared_scratch(params, refused):
    settings = MigrationParams.of({"output": "/mnt/out", **params})
    remote = SparkSettings(remote="sc://connect:15002")

    if refused:
        with pytest.raises(StagingUnreachable, match="sc://connect:15002"):
            check_staging(settings, remote)
    else:
        check_staging(settings, remote)
    check_staging(settings, SparkSettings(master="local[2]"))  # local: always readable


def test_a_scratch_url_must_be_a_file_url():
    with pytest.raises(ConfigurationError, match="spark_input"):
        MigrationParams.of({"output": "/o", "scratch": "abfss://x@y.dfs.core.windows.net/s"})
    with pytest.raises(ConfigurationError, match="scratch_shared"):
        MigrationParams.of({"output": "/o", "scratch": "/s", "scratch_shared": "yes"})


def test_staged_files_can_be_handed_to_spark_as_file_uris(storage: Storage, tmp_path: Path):
    storage.blobs.create_container("orders-v1")
    storage.blobs.put("orders-v1", "export/a.jsonl", b'{"x": 1}\n')
    scratch = (tmp_path / "shared").as_uri()  # a file:// URL works as a scratch too
    params = MigrationParams.of({"output": "/o", "scratch": scratch, "scratch_shared": True})

    with staged_inputs(storage, params, ["export/a.jsonl"], as_uris=True) as paths:
        assert [path.startswith((tmp_path / "shared").as_uri() + "/") for path in paths] == [True]
        assert Path(paths[0].removeprefix("file://")).read_bytes() == b'{"x": 1}\n'


def test_a_job_on_a_remote_with_unshared_staging_fails_at_planning(monkeypatch, tmp_path):
    # Given workers that are Spark Connect clients, and params that stage to local temp
    monkeypatch.setenv("RUNNER_SPARK_REMOTE", "sc://spark-connect:15002")
    monkeypatch.delenv("RUNNER_SPARK_MASTER", raising=False)

    # When the job runs (planning checks before it lists a blob or builds a session)
    run = run_job(MigrateOrders, {"output": str(tmp_path / "out"), "storage": str(tmp_path)})

    # Then planning fails once, not retried, and the job says why; no chunk was queued
    assert run.state == "failed" and run.total is None and not run.chunks
    assert run.planning is not None and run.planning.attempt == 1
    assert run.planning.state == "poisoned"
    assert "StagingUnreachable" in (run.error or "")
    assert "sc://spark-connect:15002" in (run.error or "")
    assert "scratch_shared" in (run.error or "")
