"""BlobStore contract: Azure Blob storage semantics on every backend."""

from __future__ import annotations

import random
import uuid

import pytest

from checkpoint.errors import AlreadyExists, Conflict, InvalidRequest, NotFound
from tests.contract import fails_with

#: 5 MiB of deterministic noise: big enough that an upload takes several blocks.
LARGE = random.Random(5).randbytes(5 * 1024 * 1024)
#: 1 KiB where every byte value sits at a known offset.
PATTERN = bytes(range(256)) * 4


def _missing_container() -> str:
    return f"c-missing-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- containers


def test_create_container_is_idempotent_and_keeps_blobs(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "kept", b"data")

    blobs.create_container(container)

    assert blobs.get(container, "kept") == b"data"


def test_delete_container_removes_it_and_its_blobs(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "a/b", b"data")

    blobs.delete_container(container)
    blobs.delete_container(container)

    with fails_with(NotFound, status=404, code="ContainerNotFound"):
        blobs.get(container, "a/b")
    with fails_with(NotFound, status=404, code="ContainerNotFound"):
        list(blobs.list(container))


def test_delete_missing_container_is_not_an_error(backend):
    backend.storage.blobs.delete_container(_missing_container())


@pytest.mark.parametrize(
    "name",
    ["ab", "Upper", "under_score", "-leading", "trailing-", "double--hyphen", "a" * 64, ""],
)
def test_invalid_container_name_is_refused(backend, name):
    with fails_with(InvalidRequest, status=400, code="InvalidResourceName"):
        backend.storage.blobs.create_container(name)


@pytest.mark.parametrize("operation", ["put", "get", "info", "delete", "list"])
def test_operations_on_missing_container_raise_not_found(backend, operation):
    blobs = backend.storage.blobs
    container = _missing_container()
    call = {
        "put": lambda: blobs.put(container, "x", b"1"),
        "get": lambda: blobs.get(container, "x"),
        "info": lambda: blobs.info(container, "x"),
        "delete": lambda: blobs.delete(container, "x"),
        "list": lambda: list(blobs.list(container)),
    }[operation]
    with fails_with(NotFound, status=404, code="ContainerNotFound"):
        call()


# --------------------------------------------------------------------------- put / get / info


@pytest.mark.parametrize(
    "data", [b"", b"hello", bytes(range(256)), LARGE], ids=["empty", "small", "every-byte", "5MiB"]
)
def test_put_get_roundtrip(backend, data):
    blobs = backend.storage.blobs
    container = backend.container()

    written = blobs.put(container, "dir/blob.bin", data)

    assert blobs.get(container, "dir/blob.bin") == data
    assert written.name == "dir/blob.bin"
    assert written.size == len(data)
    assert isinstance(written.etag, str) and written.etag
    assert written.last_modified.tzinfo is not None


def test_info_describes_the_blob(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    written = blobs.put(container, "a/b/c", PATTERN)

    info = blobs.info(container, "a/b/c")

    assert info.name == "a/b/c"
    assert info.size == len(PATTERN)
    assert info.etag == written.etag
    assert info.last_modified == written.last_modified
    assert info.last_modified.tzinfo is not None


def test_put_overwrites_and_changes_the_etag(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    first = blobs.put(container, "blob", b"first version, longer")

    second = blobs.put(container, "blob", b"second")

    assert blobs.get(container, "blob") == b"second"
    assert second.etag != first.etag
    assert second.size == 6
    assert blobs.info(container, "blob").etag == second.etag


@pytest.mark.parametrize(
    ("offset", "length"),
    [(0, 1), (0, 10), (100, 50), (1023, 1), (0, 1024), (1000, None), (0, None), (255, 2)],
)
def test_range_reads(backend, offset, length):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "pattern", PATTERN)

    data = blobs.get(container, "pattern", offset=offset, length=length)

    end = len(PATTERN) if length is None else offset + length
    assert data == PATTERN[offset:end]


@pytest.mark.parametrize(
    ("offset", "length", "named"),
    [
        (-1, None, "offset"),
        (True, None, "offset"),
        (1.5, 2, "offset"),
        (0, -1, "length"),
        (0, False, "length"),
        (0, "2", "length"),
    ],
)
def test_a_range_that_is_not_whole_bytes_is_refused_alike(backend, offset, length, named):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "pattern", PATTERN)

    with pytest.raises(InvalidRequest, match=f"{named} must be a whole number of bytes"):
        blobs.get(container, "pattern", offset=offset, length=length)


def test_range_read_of_a_large_blob(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "large", LARGE)
    offset = len(LARGE) - 4096 - 17

    assert (
        blobs.get(container, "large", offset=offset, length=4096) == LARGE[offset : offset + 4096]
    )
    assert blobs.get(container, "large", offset=offset) == LARGE[offset:]


@pytest.mark.parametrize(("offset", "length"), [(1024, None), (1024, 1), (2000, 5)])
def test_a_range_from_the_end_or_past_it_reads_nothing(backend, offset, length):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "pattern", PATTERN)

    assert blobs.get(container, "pattern", offset=offset, length=length) == b""


@pytest.mark.parametrize("offset", [0, 5])
def test_a_range_of_no_bytes_reads_nothing(backend, offset):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "pattern", PATTERN)

    assert blobs.get(container, "pattern", offset=offset, length=0) == b""
    with fails_with(NotFound, status=404, code="BlobNotFound"):
        blobs.get(container, "missing", offset=offset, length=0)


def test_data_that_is_not_bytes_is_refused(backend):
    container = backend.container()

    with fails_with(InvalidRequest, status=400):
        backend.storage.blobs.put(container, "text", "not bytes")  # type: ignore[arg-type]


def test_put_with_both_conditions_is_refused(backend):
    container = backend.container()
    written = backend.storage.blobs.put(container, "blob", b"one")

    with fails_with(InvalidRequest, status=400):
        backend.storage.blobs.put(
            container, "blob", b"two", if_match=written.etag, if_none_match=True
        )


@pytest.mark.parametrize("operation", ["get", "info", "range"])
def test_reading_a_missing_blob_is_not_found(backend, operation):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "other", b"x")
    call = {
        "get": lambda: blobs.get(container, "missing"),
        "info": lambda: blobs.info(container, "missing"),
        "range": lambda: blobs.get(container, "missing", offset=1, length=1),
    }[operation]
    with fails_with(NotFound, status=404, code="BlobNotFound"):
        call()


# --------------------------------------------------------------------------- conditions


def test_put_if_match_current_etag_writes(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    first = blobs.put(container, "blob", b"v1")

    second = blobs.put(container, "blob", b"v2", if_match=first.etag)

    assert blobs.get(container, "blob") == b"v2"
    assert second.etag != first.etag


def test_put_if_match_stale_etag_conflicts(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    stale = blobs.put(container, "blob", b"v1")
    current = blobs.put(container, "blob", b"v2")

    with fails_with(Conflict, status=412, code="ConditionNotMet"):
        blobs.put(container, "blob", b"v3", if_match=stale.etag)

    assert blobs.get(container, "blob") == b"v2"
    assert blobs.info(container, "blob").etag == current.etag


def test_put_if_match_on_missing_blob_conflicts(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    gone = blobs.put(container, "blob", b"v1")
    blobs.delete(container, "blob")

    with fails_with(Conflict, status=412, code="ConditionNotMet"):
        blobs.put(container, "blob", b"v2", if_match=gone.etag)

    with fails_with(NotFound, status=404):
        blobs.info(container, "blob")


def test_put_if_none_match_creates_once(backend):
    blobs = backend.storage.blobs
    container = backend.container()

    created = blobs.put(container, "once", b"first", if_none_match=True)
    with fails_with(AlreadyExists, status=409, code="BlobAlreadyExists"):
        blobs.put(container, "once", b"second", if_none_match=True)

    assert blobs.get(container, "once") == b"first"
    assert blobs.info(container, "once").etag == created.etag


# --------------------------------------------------------------------------- delete


def test_delete_removes_the_blob(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "doomed", b"x")
    blobs.put(container, "kept", b"y")

    blobs.delete(container, "doomed")

    with fails_with(NotFound, status=404, code="BlobNotFound"):
        blobs.get(container, "doomed")
    assert [info.name for info in blobs.list(container)] == ["kept"]


def test_delete_missing_blob_is_not_found(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "once", b"x")
    blobs.delete(container, "once")

    with fails_with(NotFound, status=404, code="BlobNotFound"):
        blobs.delete(container, "once")
    with fails_with(NotFound, status=404, code="BlobNotFound"):
        blobs.delete(container, "never")


def test_delete_if_match_current_etag_deletes(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    written = blobs.put(container, "blob", b"x")

    blobs.delete(container, "blob", if_match=written.etag)

    assert list(blobs.list(container)) == []


def test_delete_if_match_stale_etag_conflicts(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    stale = blobs.put(container, "blob", b"v1")
    blobs.put(container, "blob", b"v2")

    with fails_with(Conflict, status=412, code="ConditionNotMet"):
        blobs.delete(container, "blob", if_match=stale.etag)

    assert blobs.get(container, "blob") == b"v2"


def test_put_after_delete_creates_again(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    blobs.put(container, "blob", b"v1")
    blobs.delete(container, "blob")

    blobs.put(container, "blob", b"v2", if_none_match=True)

    assert blobs.get(container, "blob") == b"v2"


# --------------------------------------------------------------------------- list


def test_list_by_prefix_in_name_order(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    names = ["b", "a/b/c", "ab", "a-b", "a/b/d.txt", "a/x", "c/a"]
    written = {name: blobs.put(container, name, name.encode() * 3) for name in names}

    everything = list(blobs.list(container))
    under_a = list(blobs.list(container, "a/"))
    under_a_b = [info.name for info in blobs.list(container, "a/b/")]
    starting_a = [info.name for info in blobs.list(container, "a")]

    assert [info.name for info in everything] == [
        "a-b",
        "a/b/c",
        "a/b/d.txt",
        "a/x",
        "ab",
        "b",
        "c/a",
    ]
    assert [info.name for info in under_a] == ["a/b/c", "a/b/d.txt", "a/x"]
    assert under_a_b == ["a/b/c", "a/b/d.txt"]
    assert starting_a == ["a-b", "a/b/c", "a/b/d.txt", "a/x", "ab"]
    assert list(blobs.list(container, "zzz")) == []
    for info in everything:
        assert info.size == len(info.name) * 3
        assert info.etag == written[info.name].etag
        assert info.last_modified.tzinfo is not None


def test_list_of_an_empty_container_is_empty(backend):
    container = backend.container()
    assert list(backend.storage.blobs.list(container)) == []


def test_a_blob_name_may_also_prefix_other_blobs(backend):
    blobs = backend.storage.blobs
    container = backend.container()

    # Azure's namespace is flat: "a/b" and "a/b/c" are two unrelated blobs
    blobs.put(container, "a/b", b"file")
    blobs.put(container, "a/b/c", b"nested")

    assert blobs.get(container, "a/b") == b"file"
    assert blobs.get(container, "a/b/c") == b"nested"
    assert [info.name for info in blobs.list(container, "a/")] == ["a/b", "a/b/c"]


def test_names_are_case_sensitive_and_may_hold_unicode(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    names = ["Report.txt", "report.txt", "dïr/ñame with spaces ✓.bin"]
    for name in names:
        blobs.put(container, name, name.encode())

    for name in names:
        assert blobs.get(container, name) == name.encode()
    assert {info.name for info in blobs.list(container)} == set(names)


# --------------------------------------------------------------------------- names


INVALID_NAMES = [
    "",
    "..",
    ".",
    "/leading",
    "trailing/",
    "a//b",
    "a/../b",
    "./a",
    "a/.",
    "x" * 1025,
    "ctrl\x01char",
]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=[repr(n[:12]) for n in INVALID_NAMES])
def test_invalid_blob_name_is_refused(backend, name):
    blobs = backend.storage.blobs
    container = backend.container()

    with fails_with(InvalidRequest, status=400, code="InvalidResourceName"):
        blobs.put(container, name, b"x")

    assert list(blobs.list(container)) == []


@pytest.mark.parametrize("operation", ["get", "info", "delete"])
def test_invalid_blob_name_is_refused_by_every_operation(backend, operation):
    blobs = backend.storage.blobs
    container = backend.container()
    call = {
        "get": lambda: blobs.get(container, "../escape"),
        "info": lambda: blobs.info(container, "../escape"),
        "delete": lambda: blobs.delete(container, "../escape"),
    }[operation]
    with fails_with(InvalidRequest, status=400, code="InvalidResourceName"):
        call()


def test_longest_blob_name_works(backend):
    blobs = backend.storage.blobs
    container = backend.container()
    name = "/".join(["s" * 200] * 5) + "/" + "t" * 19
    assert len(name) == 1024

    blobs.put(container, name, b"deep")

    assert blobs.get(container, name) == b"deep"
    assert [info.name for info in blobs.list(container)] == [name]
