"""The Spark support's pure-Python parts: planning helpers, settings, output paths and
markers, and that nothing but a Spark job ever needs PySpark. No SparkSession here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from checkpoint.errors import ConfigurationError
from jobs.chunk_environment import ChunkEnvironment
from jobs.errors import ChunkStopped, JobDefinitionError
from jobs.planning import split_files, split_key_range
from jobs.spark import (
    CONF_ENV,
    MASTER_ENV,
    REMOTE_ENV,
    ChunkJobGroup,
    SparkChunkedJob,
    SparkSettings,
    is_committed,
    is_connect,
)
from jobs.spark.chunk_output import COMMIT_MARKER, ChunkCommit, chunk_output_path, read_commit

ROOT = Path(__file__).resolve().parents[3]

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

    with pytest.raises(JobDefinitionError, match="spark_remote"):

        class BadRemote(SparkChunkedJob):
            spark_remote = "http://cluster:15002"

    with pytest.raises(JobDefinitionError, match="both spark_master and spark_remote"):

        class Both(SparkChunkedJob):
            spark_master = "spark://cluster:7077"
            spark_remote = "sc://cluster:15002"


class Remote(SparkChunkedJob):
    spark_remote = "sc://connect.example:15002"


def test_a_remote_from_the_class_or_the_environment_makes_a_connect_client():
    from_class = SparkSettings.for_job(Remote, environ={})
    environ = {REMOTE_ENV: " sc://other:443/;use_ssl=true "}
    from_environ = SparkSettings.for_job(Configured, environ=environ)

    assert from_class.remote == "sc://connect.example:15002"
    assert from_class.target == "sc://connect.example:15002"
    assert from_environ.remote == "sc://other:443/;use_ssl=true"  # Connect's own params kept
    assert from_environ.conf["spark.sql.shuffle.partitions"] == "4"  # conf still the class's
    assert not from_class.runs_locally and not from_environ.runs_locally


def test_a_master_in_the_environment_replaces_the_class_remote():
    settings = SparkSettings.for_job(Remote, environ={MASTER_ENV: "local[2]"})

    assert settings.remote is None and settings.target == "local[2]"
    assert settings.runs_locally


@pytest.mark.parametrize(
    "master, remote, local",
    [
        ("local[*]", None, True),
        ("local-cluster[2,1,1024]", None, True),
        ("spark://cluster:7077", None, False),
        ("yarn", None, False),
        ("local[*]", "sc://localhost:15002", False),
    ],
)
def test_only_a_local_master_without_a_remote_runs_locally(master, remote, local):
    assert SparkSettings(master=master, remote=remote).runs_locally is local


def test_settings_refuse_a_master_and_a_remote_both_in_the_environment():
    environ = {MASTER_ENV: "spark://cluster:7077", REMOTE_ENV: "sc://cluster:15002"}

    with pytest.raises(ConfigurationError, match="both set"):
        SparkSettings.for_job(None, environ=environ)


@pytest.mark.parametrize(
    "remote", ["cluster:15002", "spark://cluster:7077", "sc://", "sc://:15002"]
)
def test_settings_refuse_a_remote_that_is_not_a_connect_url(remote):
    with pytest.raises(ConfigurationError, match=REMOTE_ENV):
        SparkSettings.for_job(None, environ={REMOTE_ENV: remote})


def test_a_session_is_told_connect_by_its_class_without_importing_pyspark():
    class FakeConnectSession:
        pass

    FakeConnectSession.__module__ = "pyspark.sql.connect.session"

    assert is_connect(FakeConnectSession())
    assert not is_connect(object())


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
    # A marker written before output was fenced names no attempt: its rows are there.
    assert read_commit(str(path)) == ChunkCommit(
        rows=3, checksum="12", format="parquet", attempt="", path=str(path)
    )


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

    import jobs, jobs.spark, jobs.planning, jobs.testing, runner.cli.commands
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
    assert "the 'spark' extra: `make venv` installs it" in done.stdout


# --------------------------------------------------------------------------- Connect tags


class FakeConnectSession:
    """Records the tag calls a chunk's group makes on a Spark Connect session."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.tags: set[str] = set()

    def addTag(self, tag: str) -> None:  # noqa: N802 - pyspark's names
        self.calls.append(("add", tag))
        self.tags.add(tag)

    def removeTag(self, tag: str) -> None:  # noqa: N802
        self.calls.append(("remove", tag))
        self.tags.discard(tag)

    def getTags(self) -> set[str]:  # noqa: N802
        return set(self.tags)

    def interruptTag(self, tag: str) -> list[str]:  # noqa: N802
        self.calls.append(("interrupt", tag))
        return []


FakeConnectSession.__module__ = "pyspark.sql.connect.session"
FAKE_SESSION = FakeConnectSession()
INTERRUPTS_AWAITED = 3


class StartsActionsAfterTheCancel(SparkChunkedJob):
    """Stands for code that swallows each interruption and starts another action."""

    def process(self, chunk):
        with ChunkJobGroup(FAKE_SESSION, chunk, poll_seconds=0.01) as group:
            chunk.checkpoint("inside")
            deadline = time.monotonic() + 30
            while FAKE_SESSION.calls.count(("interrupt", group.id)) < INTERRUPTS_AWAITED:
                assert time.monotonic() < deadline, "the tag was not interrupted again"
                time.sleep(0.01)
        return "carried on"


def test_a_connect_group_tags_the_thread_and_interrupts_until_left():
    # Given a chunk inside its group on a Connect session
    env = ChunkEnvironment(StartsActionsAfterTheCancel, on_checkpoint=lambda state: env.stop())

    # When the chunk must stop and its code carries on regardless
    with pytest.raises(ChunkStopped):
        env.run()

    # Then its tag (and the attempt's) was added, its own interrupted at every poll
    # until the block was left, both removed
    calls = FAKE_SESSION.calls
    tag, attempt_tag = calls[0][1], calls[1][1]
    assert attempt_tag.startswith("chunkrunner-claim-") and attempt_tag != tag
    assert calls[:2] == [("add", tag), ("add", attempt_tag)]
    assert calls[-2:] == [("remove", tag), ("remove", attempt_tag)]
    assert calls[2:-2] == [("interrupt", tag)] * (len(calls) - 4)
    assert len(calls) - 4 >= INTERRUPTS_AWAITED
    assert FAKE_SESSION.tags == set()


# --------------------------------------------------------------------------- runner start


def _start(tmp_path, *options):
    from click.testing import CliRunner

    from runner.cli.commands import cli

    return CliRunner().invoke(
        cli,
        [
            "start",
            "samples.quickstart.wordcount:WordCount",
            "--burst",
            *options,
            "--storage",
            str(tmp_path / "store"),
        ],
    )


@pytest.mark.parametrize(
    "option, value, replaced",
    [
        ("--spark-remote", "sc://127.0.0.1:15002", MASTER_ENV),
        ("--spark-master", "spark://127.0.0.1:7077", REMOTE_ENV),
    ],
)
def test_start_hands_its_spark_target_to_the_workers_in_place_of_the_others(
    tmp_path, monkeypatch, option, value, replaced
):
    # Given an environment naming the other kind of target
    for name in (MASTER_ENV, REMOTE_ENV):
        # Restored after the test, to absent too: a bare delenv of an absent variable
        # records nothing, and `runner start` below sets it in this process.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv(replaced, "sc://old:1" if replaced == REMOTE_ENV else "local[1]")

    result = _start(tmp_path, option, value)

    assert result.exit_code == 0, result.output
    assert os.environ[REMOTE_ENV if option == "--spark-remote" else MASTER_ENV] == value
    assert replaced not in os.environ


@pytest.mark.parametrize(
    "options, message",
    [
        (["--spark-master", "local[2]", "--spark-remote", "sc://h:1"], "exclude each other"),
        (["--spark-remote", "spark://h:7077"], "Spark Connect URL"),
    ],
)
def test_start_refuses_a_bad_spark_target_in_one_line(tmp_path, options, message):
    result = _start(tmp_path, *options)

    assert result.exit_code == 2 and message in result.output


def test_a_connect_session_without_its_client_libraries_names_the_extra(monkeypatch):
    from jobs.spark import session as module

    monkeypatch.setitem(sys.modules, "pyspark.sql.connect.session", None)  # import fails

    with pytest.raises(
        ImportError, match=r"the .spark. extra: `make venv` installs it.*Connect client"
    ):
        module._build_session(SparkSettings(remote="sc://127.0.0.1:1"))
