"""The submission schema ``chunkrunner.submit/1`` (jobs/intake.py), read in-process: both
encodings, every way a body is refused (with the field and the problem), and the job id
a submission id makes."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from jobs import Chunk, ChunkedJob
from jobs.intake import (
    MAX_AFTER,
    MAX_DEPTH,
    SCHEMA,
    Rejected,
    Submission,
    decode_body,
    job_id_of,
    read_submission,
)


class Orders(ChunkedJob):
    queue = "intake-orders"
    intake = True

    def split(self, params: Any) -> Any:
        return [params]

    def process(self, chunk: Chunk) -> None:
        pass


def body(**fields: Any) -> bytes:
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "submission_id": "s-1",
        "job_type": Orders.job_type(),
    }
    document.update(fields)
    return json.dumps({k: v for k, v in document.items() if v is not ...}).encode()


def refused(data: bytes) -> tuple[str | None, str]:
    with pytest.raises(Rejected) as caught:
        read_submission(data, Orders)
    return caught.value.field, caught.value.problem


def test_a_submission_as_json_text_or_in_base64_reads_the_same():
    # Given one submission with every field, as JSON text and as base64 of it
    text = body(
        params={"rows": 10, "names": ["a", "é"]},
        after=["intake-orders-stage", "other-job", "other-job"],
        pipeline="nightly",
        priority=-5,
        delay_seconds=60,
    )
    # When each is read (the text with a byte-order mark and a trailing newline too)
    raw = read_submission(b"\xef\xbb\xbf" + text + b"\n", Orders)
    coded = read_submission(base64.b64encode(text) + b"\n", Orders)

    # Then both say the same job, its id derived from the submission id, after each job
    # once, and know which encoding each came in
    assert raw == Submission(
        submission_id="s-1",
        job_id="intake-orders-s-1",
        params={"rows": 10, "names": ["a", "é"]},
        after=("intake-orders-stage", "other-job"),
        pipeline="nightly",
        priority=-5,
        delay_seconds=60,
        encoding="utf-8",
    )
    assert coded == Submission(**{**vars(raw), "encoding": "base64"})


def test_what_a_submission_leaves_out_takes_runner_submits_defaults():
    found = read_submission(body(after=None, pipeline=None, priority=None), Orders)
    assert (found.params, found.after, found.pipeline, found.priority, found.delay_seconds) == (
        None,
        (),
        None,
        0,
        0,
    )


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty message"),
        (b"  \n", "empty message"),
        (b'{"schema": ', "not valid JSON: Expecting value: line 1 column 12"),
        (b"schema: 1", "not JSON, neither raw nor base64 (Expecting value: line 1 column 1"),
        (b"\xff\xfe\x00garbage", "not JSON, neither raw nor base64 (not UTF-8 text: invalid"),
        (base64.b64encode(b"not json"), "base64, but not JSON inside (Expecting value"),
        (base64.b64encode(b"\xff"), "base64, but not JSON inside (not UTF-8 text"),
        (b'{"a": 1, "a": 2}', "not valid JSON: key 'a' given twice in one object"),
        (b' [{"a": NaN}]', "not valid JSON: NaN is not JSON"),
        (b"[" * 40 + b"]" * 40, f"nested deeper than {MAX_DEPTH} levels"),
        (b"[" * 5000 + b"]" * 5000, f"nested deeper than {MAX_DEPTH} levels"),
        (b"[1, 2]", "a submission is a JSON object, not an array"),
        (b'"text"', "a submission is a JSON object, not a string"),
        (b"null", "a submission is a JSON object, not null"),
        (b"true", "a submission is a JSON object, not a boolean"),
        (b"12.5", "a submission is a JSON object, not a number"),
    ],
)
def test_what_is_not_a_json_object_is_refused_as_a_whole(data: bytes, problem: str):
    field, said = refused(data)
    assert field is None
    assert said.startswith(problem)


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"schema": ...}, "schema", "missing"),
        ({"job_type": ...}, "job_type", "missing"),
        ({"submission_id": ...}, "submission_id", "missing"),
        ({"schema": "chunkrunner.submit/2"}, "schema", "'chunkrunner.submit/2' is not read by"),
        ({"schema": 1}, "schema", f"1 is not {SCHEMA!r}"),
        ({"parms": {}}, "parms", "unknown field (schema chunkrunner.submit/1 has schema, "),
        ({"job_id": "mine"}, "job_id", "not accepted: the job id is derived from submission_id"),
        ({"job_type": "orders:Other"}, "job_type", "'orders:Other' is not the job type of"),
        ({"job_type": 7}, "job_type", "must be a non-empty string, not 7"),
        ({"submission_id": ""}, "submission_id", 'must be a non-empty string, not ""'),
        ({"submission_id": 42}, "submission_id", "must be a non-empty string, not 42"),
        ({"submission_id": "a/b"}, "submission_id", "'a/b' is not 1-86 letters, digits"),
        ({"submission_id": "-a"}, "submission_id", "'-a' is not 1-86 letters"),
        ({"submission_id": "x" * 87}, "submission_id", "is not 1-86 letters"),
        ({"after": "job-a"}, "after", 'must be a list of job ids, not "job-a"'),
        ({"after": ["ok", 3]}, "after", "3 is not a job id"),
        ({"after": ["a b"]}, "after", '"a b" is not a job id'),
        ({"after": ["intake-orders-s-1"]}, "after", "cannot run after itself"),
        ({"after": ["j"] * (MAX_AFTER + 1)}, "after", f"names 101 jobs; at most {MAX_AFTER}"),
        ({"pipeline": "a b"}, "pipeline", "'a b' is not an id"),
        ({"pipeline": 5}, "pipeline", "5 is not an id"),
        ({"priority": "high"}, "priority", "priority must be a whole number from -1000000"),
        ({"priority": 1.0}, "priority", "priority must be a whole number"),
        ({"priority": True}, "priority", "priority must be a whole number"),
        ({"delay_seconds": -1}, "delay_seconds", "delay_seconds must be a whole number"),
        ({"delay_seconds": 604801}, "delay_seconds", "from 0 to 604800, not 604801"),
        ({"params": {"n": 2**70}}, "params", "params is not msgpack-able"),
    ],
)
def test_a_field_missing_unknown_or_of_the_wrong_kind_is_named(
    fields: dict[str, Any], field: str, problem: str
):
    found_field, said = refused(body(**fields))
    assert found_field == field
    assert problem in said
    assert str(Rejected(field, said)) == f"{field}: {said}"


def test_a_long_submission_id_is_refused_where_the_job_id_would_be_too_long():
    assert job_id_of("q" * 14, "x" * 85) == "q" * 14 + "-" + "x" * 85
    with pytest.raises(Rejected, match="not 1-85 letters"):
        job_id_of("q" * 14, "x" * 86)


def test_the_body_found_is_told_apart_by_its_first_character():
    # A JSON object never reads as base64, nor base64 of one as JSON
    assert decode_body(b'{"a": 1}') == ({"a": 1}, "utf-8")
    assert decode_body(base64.b64encode(b'{"a": 1}')) == ({"a": 1}, "base64")
    assert decode_body(b"12") == (12, "utf-8")
