"""The Spark support's pure-Python parts: planning helpers, settings, output paths and
markers, and that nothing but a Spark job ever needs PySpark. No SparkSession here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from checkpoint.errors import ConfigurationError
from jobs.chunk_output import COMMIT_MARKER, ChunkCommit, chunk_output_path, read_commit
from jobs.errors import JobDefinitionError
from jobs.planning import split_files, split_key_range
from jobs.spark import CONF_ENV, MASTER_ENV, SparkChunkedJob, SparkSettings, is_committed

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- split_files


def test_split_files_packs_in_path_order_whatever_the_listing_order():
    listed = [("d/5", 40), ("a/1", 30), ("c/4", 10), ("b/2", 50), ("b/3", 20)]

    chunks = list(split_files(listed, target_bytes=60))

    assert chunks == [
        {"files": ["a/1"], "bytes": 30},  # a/1 + b/2 would be 80
        {"files": ["b/2"], "bytes": 50},
        {"files": ["b/3", "c/4"], "bytes": 30},  # + d/5 would be 70
        {"files": ["d/5"], "bytes": 40},
    ]
    assert list(split_files(dict(listed), target_bytes=60)) == chunks


def test_split_files_gives_a_big_file_its_own_chunk_and_covers_every_file_once():
    sizes = {f"part-{number:03d}": (number * 37) % 100 for number in range(200)}
    sizes["part-050"] = 10_000

    chunks = list(split_files(sizes, target_bytes=250))

    assert [path for chunk in chunks for path in chunk["files"]] == sorted(sizes)
    assert {"files": ["part-050"], "bytes": 10_000} in chunks
    assert all(chunk["bytes"] <= 250 for chunk in chunks if chunk["files"] != ["part-050"])
    assert all(chunk["bytes"] == sum(sizes[p] for p in chunk["files"]) for chunk in chunks)


def test_split_files_caps_files_per_chunk():
    chunks = list(split_files({f"f{n}": 0 for n in range(5)}, target_bytes=1, max_files=2))

    assert [chunk["files"] for chunk in chunks] == [["f0", "f1"], ["f2", "f3"], ["f4"]]


def test_split_files_of_nothing_is_no_chunk():
    assert list(split_files([], target_bytes=100)) == []


@pytest.mark.parametrize(
    "listed, target",
    [
        ([("a", 1), ("a", 2)], 10),  # twice: would be processed twice
        ([("a", -1)], 10),
        ([("", 1)], 10),
        ([("a", 1)], 0),
        ([("a", 1)], True),
    ],
)
def test_split_files_refuses_bad_input(listed, target):
    with pytest.raises(ValueError):
        list(split_files(listed, target_bytes=target))


# --------------------------------------------------------------------------- split_key_range


def test_split_key_range_by_slice_size_ends_with_the_remainder():
    assert list(split_key_range(10, 35, slice_size=10)) == [
        {"lo": 10, "hi": 20},
        {"lo": 20, "hi": 30},
        {"lo": 30, "hi": 35},
    ]


def test_split_key_range_by_slices_spreads_the_remainder_over_the_first():
    assert list(split_key_range(0, 10, slices=3)) == [
        {"lo": 0, "hi": 4},
        {"lo": 4, "hi": 7},
        {"lo": 7, "hi": 10},
    ]


@pytest.mark.parametrize("first, last", [(0, 0), (-5, 7), (0, 1_000_003), (3, 5)])
@pytest.mark.parametrize("how", [{"slices": 4}, {"slice_size": 3}, {"slices": 1}])
def test_split_key_range_covers_the_range_with_disjoint_nonempty_slices(first, last, how):
    slices = list(split_key_range(first, last, **how))

    assert all(piece["lo"] < piece["hi"] for piece in slices)
    assert [piece["lo"] for piece in slices[1:]] == [piece["hi"] for piece in slices[:-1]]
    if last > first:
        assert (slices[0]["lo"], slices[-1]["hi"]) == (first, last)
    else:
        assert slices == []


def test_split_key_range_never_makes_empty_slices():
    assert len(list(split_key_range(0, 2, slices=5))) == 2


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((5, 4), {"slices": 1}),
        ((0, 4), {}),
        ((0, 4), {"slices": 2, "slice_size": 2}),
        ((0, 4), {"slices": 0}),
        ((0, 4), {"slice_size": -1}),
        ((0.5, 4), {"slices": 1}),
    ],
)
def test_split_key_range_refuses_bad_input(args, kwargs):
    with pytest.raises(ValueError):
        list(split_key_range(*args, **kwargs))


# --------------------------------------------------------------------------- settings


class Configured(SparkChunkedJob):
    spark_master = "local[3]"
    spark_conf = {"spark.sql.shuffle.partitions": 4, "spark.sql.ansi.enabled": False}


def test_settings_default_to_local_with_quiet_progress():
    settings = SparkSettings.for_job(None, environ={})

    assert settings.master == "local[*]"
    assert settings.conf == {"spark.ui.showConsoleProgress": "false"}


def test_settings_take_the_job_class_then_the_environment():
    from_class = SparkSettings.for_job(Configured, environ={})
    environ = {
        MASTER_ENV: "spark://cluster:7077",
        CONF_ENV: json.dumps({"spark.sql.shuffle.partitions": 64, "spark.app.name": "nightly"}),
    }
    from_environ = SparkSettings.for_job(Configured, environ=environ)

    assert from_class.master == "local[3]"
    assert from_class.conf["spark.sql.shuffle.partitions"] == "4"
    assert from_class.conf["spark.sql.ansi.enabled"] == "false"  # Spark's spelling
    assert from_environ.master == "spark://cluster:7077"
    assert from_environ.conf["spark.sql.shuffle.partitions"] == "64"
    assert from_environ.conf["spark.sql.ansi.enabled"] == "false"  # kept from the class
    assert from_environ.app_name == "nightly"


@pytest.mark.parametrize("conf", ["{not json", "[1, 2]", '{"spark.x": {"nested": 1}}'])
def test_settings_refuse_a_bad_conf_in_the_environment(conf):
    with pytest.raises(ConfigurationError, match=CONF_ENV):
        SparkSettings.for_job(None, environ={CONF_ENV: conf})


def test_a_bad_spark_attribute_fails_when_the_class_is_defined():
    with pytest.raises(JobDefinitionError, match="spark_conf"):

        class BadConf(SparkChunkedJob):
            spark_conf = {"spark.x": [1]}

    with pytest.raises(JobDefinitionError, match="spark_master"):

        class BadMaster(SparkChunkedJob):
            spark_master = ""


# --------------------------------------------------------------------------- output paths


def test_chunk_output_path_is_deterministic_and_keeps_uris():
    assert chunk_output_path("out/", "orders-1", 17) == "out/orders-1/chunk-000017"
    assert (
        chunk_output_path("abfss://c@acct.dfs.core.windows.net/out", "j", 0)
        == "abfss://c@acct.dfs.core.windows.net/out/j/chunk-000000"
    )


@pytest.mark.parametrize(
    "base, job_id, index",
    [("", "j", 0), ("out", "..", 0), ("out", "a/b", 0), ("out", "_j", 0), ("out", "j", -1)],
)
def test_chunk_output_path_refuses_what_would_escape_or_hide(base, job_id, index):
    with pytest.raises(ConfigurationError):
        chunk_output_path(base, job_id, index)


def test_only_a_readable_marker_commits_a_local_output(tmp_path):
    path = tmp_path / "out" / "j" / "chunk-000000"

    assert not is_committed(str(path))  # no directory at all
    path.mkdir(parents=True)
    (path / COMMIT_MARKER).write_text("{trunc")
    assert not is_committed(str(path))
    (path / COMMIT_MARKER).write_text('{"rows": 3, "checksum": "12", "format": "parquet"}')
    assert read_commit(str(path)) == ChunkCommit(rows=3, checksum="12", format="parquet")


# --------------------------------------------------------------------------- no pyspark needed

_WITHOUT_PYSPARK = textwrap.dedent(
    """
    import importlib.abc, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("pyspark", "py4j"):
                raise ImportError(f"{name} blocked by the test")
            return None

    sys.meta_path.insert(0, Blocker())
    for name in [m for m in sys.modules if m.partition(".")[0] in ("pyspark", "py4j")]:
        del sys.modules[name]

    import jobs, jobs.spark, jobs.planning, jobs.chunk_output, jobs.testing, runner.cli
    assert not [m for m in sys.modules if m.startswith(("pyspark", "py4j"))]
    try:
        jobs.spark.spark_session()
    except ImportError as error:
        print("ImportError:", error)
    """
)


def test_jobs_and_the_cli_import_without_pyspark():
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYSPARK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert "pip install 'chunkrunner[spark]'" in done.stdout
