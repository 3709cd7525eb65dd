"""Fenced chunk output's file steps without Spark: putting a published attempt in place
(jobs.spark.chunk_output), its files on a local disk (jobs.spark.output_files), and the sweeps.

What Spark writes is stood in for by folders with a file in them; the Spark side of the
same steps runs in tests/jobs/spark/test_spark.py and
tests/jobs/spark/test_spark_connect.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from checkpoint.errors import LeaseLost
from jobs.spark.chunk_output import (
    ATTEMPTS_DIR,
    COMMIT_MARKER,
    ChunkCommit,
    _put_in_place,
    _remove_quietly,
    attempt_path,
    finalize_outputs,
    read_commit,
    sweep_attempts,
)
from jobs.spark.output_files import LocalFiles, files_for, local_path
from jobs.summary import JobSummary


def written(path: str, rows: str) -> None:
    """What an attempt's Spark write leaves: a folder with its rows."""
    folder = local_path(path)
    folder.mkdir(parents=True)
    (folder / "part-0.parquet").write_text(rows)


def commit_of(path: str, claim: str) -> ChunkCommit:
    return ChunkCommit(rows=1, checksum="7", format="parquet", attempt=claim, path=path)


def rows_at(path: str) -> str:
    return (local_path(path) / "part-0.parquet").read_text()


def test_a_published_attempt_moves_into_place_with_its_marker(tmp_path: Path):
    path = str(tmp_path / "out" / "chunk-000001")
    written(attempt_path(path, "aaa"), "a's rows")

    _put_in_place(LocalFiles(), path, commit_of(path, "aaa"), confirm=None)

    assert rows_at(path) == "a's rows"
    assert read_commit(path) == commit_of(path, "aaa")
    assert not Path(attempt_path(path, "aaa")).exists()


def test_a_republication_moves_the_old_output_back_to_its_attempt(tmp_path: Path):
    path = str(tmp_path / "out" / "chunk-000001")
    written(attempt_path(path, "aaa"), "a's rows")
    _put_in_place(LocalFiles(), path, commit_of(path, "aaa"), confirm=None)
    written(attempt_path(path, "bbb"), "b's rows")
    confirmed: list[bool] = []
    confirm = lambda: confirmed.append(True)  # noqa: E731 - a stand-in for the fenced check

    _put_in_place(LocalFiles(), path, commit_of(path, "bbb"), confirm=confirm)

    assert confirmed == [True]  # the chunk was checked to be still ours before
    assert rows_at(path) == "b's rows" and read_commit(path) == commit_of(path, "bbb")
    assert rows_at(attempt_path(path, "aaa")) == "a's rows"  # where finalize can find it


def test_an_attempt_that_lost_the_chunk_moves_nothing_aside(tmp_path: Path):
    path = str(tmp_path / "out" / "chunk-000001")
    written(path, "the newer publication")
    written(attempt_path(path, "old"), "a stalled attempt's rows")

    def lost() -> None:
        raise LeaseLost("another worker took over the chunk")

    with pytest.raises(LeaseLost):
        _put_in_place(LocalFiles(), path, commit_of(path, "old"), confirm=lost)

    assert rows_at(path) == "the newer publication"


def test_output_without_a_marker_is_moved_aside_under_a_name_of_its_own(tmp_path: Path):
    path = str(tmp_path / "out" / "chunk-000001")
    written(path, "unmarked")
    written(attempt_path(path, "replaced"), "an earlier unmarked output")
    written(attempt_path(path, "ccc"), "c's rows")

    _put_in_place(LocalFiles(), path, commit_of(path, "ccc"), confirm=None)

    assert rows_at(path) == "c's rows"
    aside = sorted(p.name for p in (tmp_path / "out" / ATTEMPTS_DIR).iterdir())
    assert aside[0] == "chunk-000001.replaced" and aside[1].startswith("chunk-000001.replaced-")


class NeverFree(LocalFiles):
    """A path some stalled attempt fills again each time it is cleared."""

    def rename_dir(self, source: str, target: str) -> bool:
        return False


def test_a_path_that_never_comes_free_fails_after_a_few_tries(tmp_path: Path):
    path = str(tmp_path / "out" / "chunk-000001")
    written(attempt_path(path, "ddd"), "d's rows")

    with pytest.raises(RuntimeError, match="could not move"):
        _put_in_place(NeverFree(), path, commit_of(path, "ddd"), confirm=None)


def test_a_removed_attempt_directory_is_a_lost_chunk_or_an_error(tmp_path: Path):
    path = str(tmp_path / "out" / "chunk-000001")

    with pytest.raises(RuntimeError, match="is gone"):
        _put_in_place(LocalFiles(), path, commit_of(path, "eee"), confirm=None)


def test_sweeping_keeps_the_published_attempt_and_skips_what_it_cannot_reach(tmp_path: Path):
    path = str(tmp_path / "out" / "chunk-000001")
    written(path, "published")
    for claim in ("dead1", "dead2"):
        written(attempt_path(path, claim), "litter")
    (tmp_path / "out" / ATTEMPTS_DIR / "chunk-000002.other").mkdir()  # another path's
    record = asdict(commit_of(path, "pub"))

    removed = sweep_attempts(
        {
            path: record,
            "abfss://c@a.dfs.core.windows.net/x/chunk-000001": record,  # needs Spark: left
            str(tmp_path / "garbled"): {"rows": "many"},  # unreadable: vouches for nothing
        }
    )

    assert removed == 2 and rows_at(path) == "published"
    assert [p.name for p in (tmp_path / "out" / ATTEMPTS_DIR).iterdir()] == ["chunk-000002.other"]


def test_local_files_write_whole_and_remove_files_and_folders(tmp_path: Path):
    files = LocalFiles()
    target = (tmp_path / "marker").as_uri()

    files.write_text(target, json.dumps({"a": 1}))
    assert files.read_text(target) == '{"a": 1}' and files.exists(target)
    assert [p.name for p in tmp_path.iterdir()] == ["marker"]  # no temporary left
    files.remove(target)
    files.remove(target)  # gone already: nothing to do
    assert files.read_text(target) is None and files.names(str(tmp_path / "none")) == []


def test_plain_paths_need_no_spark(tmp_path: Path):
    assert isinstance(files_for(str(tmp_path), None), LocalFiles)
    assert read_commit(str(tmp_path / "nothing")) is None
    (tmp_path / COMMIT_MARKER).write_text("not json")
    assert read_commit(str(tmp_path)) is None


class Stubborn(LocalFiles):
    """A file system that refuses to remove anything."""

    def remove(self, path: str) -> None:
        raise PermissionError(f"{path}: not allowed")


def test_finalize_puts_a_publication_in_place_and_sweeps_the_rest(tmp_path: Path):
    # Given a chunk that published attempt "pub" and died before renaming it, beside a
    # dead attempt's litter
    path = str(tmp_path / "out" / "chunk-000001")
    written(attempt_path(path, "pub"), "published rows")
    written(attempt_path(path, "dead"), "litter")
    record = asdict(commit_of(path, "pub"))
    summary = JobSummary("j", 2, 2, lambda: iter(()), _outputs=lambda: iter([(1, {path: record})]))

    # When finalize runs (twice: as after a crash inside it)
    first = list(finalize_outputs(summary))
    again = list(finalize_outputs(summary))

    # Then the path holds the published rows, with nothing left beside it
    assert first == again == [(1, path, commit_of(path, "pub"))]
    assert rows_at(path) == "published rows" and read_commit(path) == commit_of(path, "pub")
    assert not (tmp_path / "out" / ATTEMPTS_DIR).exists()


def test_finalize_refuses_a_publication_it_cannot_read(tmp_path: Path):
    summary = JobSummary(
        "j", 1, 1, lambda: iter(()), _outputs=lambda: iter([(0, {"out/x": {"rows": "?"}})])
    )
    with pytest.raises(RuntimeError, match="unreadable publication"):
        list(finalize_outputs(summary))


def test_a_dead_attempt_that_cannot_be_removed_is_left_with_a_warning(tmp_path: Path, caplog):
    _remove_quietly(Stubborn(), str(tmp_path / "x"))
    assert "could not remove" in caplog.text
