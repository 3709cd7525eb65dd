"""A mistyped job id gets "did you mean" from every command that takes one, on both
backends; the suggestion costs nothing on the happy path and a bounded read of ids
(never the job records, never the whole catalogue) once the lookup failed."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from checkpoint.errors import JobNotFound
from checkpoint.storage import Storage
from checkpoint.store import CheckpointStore
from runner.cli import suggest
from runner.cli.commands import cli
from tests.backends import Backend

#: Every command that names one job, with what else it needs.
JOB_COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["cancel"],
    ["pause"],
    ["resume"],
    ["delete"],
    ["report"],
    ["poison", "list"],
    ["poison", "redrive"],
]


class _CountingRecords:
    """The records of a store, with every query and the rows it returned counted."""

    def __init__(self, records: Any):
        self._records = records
        self.queries: list[dict[str, Any]] = []
        self.rows = 0

    def query(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self.queries.append(kwargs)
        for record in self._records.query(*args, **kwargs):
            self.rows += 1
            yield record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)


@pytest.fixture
def location(backend: Backend, request: pytest.FixtureRequest, tmp_path) -> str:
    """The backend's store as a ``--storage`` value."""
    if backend.name == "embedded":
        return str(tmp_path / "store")
    return str(request.getfixturevalue("azurite").connection_string)


def _jobs(store: CheckpointStore, *job_ids: str) -> None:
    for job_id in job_ids:
        store.create_job(job_id, "tests:Job", "suggest-q", {})


@pytest.mark.parametrize("command", JOB_COMMANDS, ids=" ".join)
def test_a_mistyped_job_id_gets_did_you_mean(backend: Backend, location: str, command):
    # Given a job whose id the user mistypes by one character
    stem = f"sg{uuid.uuid4().hex[:8]}"
    store = CheckpointStore(backend.storage)
    _jobs(store, f"{stem}-20261128-101010-a1b2c3", f"{stem}-20261128-101011-ffffff")

    # When a command names the id with a typo in its last part
    typo = f"{stem}-20261128-101010-a1b2c4"
    result = CliRunner().invoke(cli, [*command, typo, "--storage", location])

    # Then it fails with the lookup's line and the id it most likely meant
    assert isinstance(result.exception, JobNotFound), result.output
    message = str(result.exception)
    assert message.startswith(f"no job {typo!r} in ")
    assert message.endswith(f"; did you mean '{stem}-20261128-101010-a1b2c3'?")


def test_a_cut_short_job_id_offers_the_newest_ids_it_begins(backend: Backend, location: str):
    # Given three jobs of a type, two of them from one day
    stem = f"sg{uuid.uuid4().hex[:8]}"
    day = [f"{stem}-20261128-101010-a1b2c3", f"{stem}-20261128-101011-ffffff"]
    _jobs(CheckpointStore(backend.storage), *day, f"{stem}-20261127-090909-000000")

    # When a command names the id cut short after its date
    result = CliRunner().invoke(cli, ["status", f"{stem}-20261128", "--storage", location])

    # Then the ids it begins are offered, the newest first
    assert isinstance(result.exception, JobNotFound), result.output
    assert str(result.exception).endswith(f"; did you mean one of '{day[1]}', '{day[0]}'?")


def test_a_typo_in_the_type_part_finds_the_job_too(backend: Backend):
    stem = f"sg{uuid.uuid4().hex[:8]}"
    _jobs(CheckpointStore(backend.storage), f"{stem}-squares-20261128-101010-a1b2c3")

    found = suggest.similar_job_ids(backend.storage, f"{stem}-sqaures-20261128-101010-a1b2c3")

    assert found == [f"{stem}-squares-20261128-101010-a1b2c3"]


def test_nothing_alike_suggests_nothing(backend: Backend, location: str):
    stem = f"sg{uuid.uuid4().hex[:8]}"
    _jobs(CheckpointStore(backend.storage), f"{stem}-alpha")

    result = CliRunner().invoke(cli, ["cancel", "zz-nothing-like-it", "--storage", location])

    assert isinstance(result.exception, JobNotFound)
    assert "did you mean" not in str(result.exception)


def test_several_close_ids_are_all_offered(backend: Backend):
    stem = f"sg{uuid.uuid4().hex[:8]}"
    _jobs(CheckpointStore(backend.storage), f"{stem}-run-1", f"{stem}-run-2", f"{stem}-run-3")

    found = suggest.similar_job_ids(backend.storage, f"{stem}-run-4")

    assert sorted(found) == [f"{stem}-run-1", f"{stem}-run-2", f"{stem}-run-3"]
    assert suggest.did_you_mean(found) == (
        f"; did you mean one of '{found[0]}', '{found[1]}', '{found[2]}'?"
    )


def test_an_id_beyond_the_bound_is_not_suggested_and_no_other_is_instead(backend: Backend):
    # Given a type's many jobs, the one meant beyond the first ids_per_query of them
    stem = f"sg{uuid.uuid4().hex[:8]}"
    ids = [f"{stem}-squares-20261128-0{n:02d}000-{uuid.uuid4().hex[:6]}" for n in range(12)]
    _jobs(CheckpointStore(backend.storage), *ids)
    typo = ids[11].replace("-20261128-", "-20261129-")

    # When its date is mistyped, so only the type's first ids are read
    found = suggest.similar_job_ids(backend.storage, typo, ids_per_query=5)
    widely = suggest.similar_job_ids(backend.storage, typo)

    # Then none of those is offered for it; read whole, it is the one found
    assert found == []
    assert widely == [ids[11]]


def test_the_search_reads_ids_only_and_a_bounded_number_of_them(backend: Backend):
    # Given many jobs sharing the mistyped id's type part
    stem = f"sg{uuid.uuid4().hex[:8]}"
    store = CheckpointStore(backend.storage)
    _jobs(store, *(f"{stem}-day-{n:03d}" for n in range(12)))
    counting = _CountingRecords(backend.storage.records)
    storage = dataclasses.replace(backend.storage, records=counting, closer=None)

    # When a typo matches nothing among them
    found = suggest.similar_job_ids(storage, f"{stem}-nite-xyz", ids_per_query=5)

    # Then each query read ids only, at most ids_per_query of them, a few queries in all
    assert found == []
    assert counting.queries and len(counting.queries) <= suggest.MAX_QUERIES
    assert all(query["select"] == ["RowKey"] for query in counting.queries)
    assert all(query["limit"] == 5 for query in counting.queries)
    assert counting.rows <= 5 * suggest.MAX_QUERIES


def test_a_store_that_fails_while_suggesting_keeps_the_original_error(backend: Backend):
    class Failing:
        def query(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
            raise JobNotFound("not this one")  # any RunnerError of the store

    storage = Storage(backend.storage.queues, Failing(), backend.storage.blobs, "failing")  # type: ignore[arg-type]

    assert suggest.similar_job_ids(storage, "some-job") == []


def test_a_found_job_reads_no_ids(backend: Backend, location: str, monkeypatch):
    stem = f"sg{uuid.uuid4().hex[:8]}"
    _jobs(CheckpointStore(backend.storage), f"{stem}-here")

    def never(storage: Storage, job_id: str, **kwargs: Any) -> list[str]:
        raise AssertionError("ids read on the happy path")

    monkeypatch.setattr(suggest, "similar_job_ids", never)

    result = CliRunner().invoke(cli, ["status", f"{stem}-here", "--storage", location])

    assert result.exit_code == 0, result.output


def test_a_command_without_a_job_id_keeps_its_error_as_it_is():
    missing = JobNotFound("no job of that kind")

    @suggest.suggests_job_ids
    def command(job_id: str | None, storage: str | None) -> None:
        raise missing

    with pytest.raises(JobNotFound) as raised:
        command(job_id=None, storage=None)

    assert raised.value is missing


def test_the_catalogues_index_rows_are_never_offered(backend: Backend):
    # Given a store whose catalogue keeps its index rows (~active~..., ~counts)
    stem = f"sg{uuid.uuid4().hex[:8]}"
    _jobs(CheckpointStore(backend.storage), f"{stem}-run-1")

    # When the mistyped id reads like one of them
    found = suggest.similar_job_ids(backend.storage, f"~active~{stem}-run-1")

    # Then no index row is offered as a job
    assert not [job_id for job_id in found if job_id.startswith("~")]
