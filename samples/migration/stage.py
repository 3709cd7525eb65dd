"""``StageExport``: the pipeline's first step, a copy of the legacy export to read from.

    runner submit samples.migration.stage:StageExport --params '{"staging_prefix": "run-1/"}'

The legacy system goes on writing while a migration runs, so the migration does not
read its export in place: this step copies every blob under ``source_prefix`` of
``source_container`` into ``staging_container`` under ``staging_prefix`` (the same
name after it), and the transform reads that copy. No Spark: bytes are copied through
the blob store, one blob at a time.

- ``split`` lists the source blobs and packs them into chunks of ``chunk_bytes``
  (:func:`jobs.planning.split_files`).
- ``process`` copies a chunk's blobs one after the other, recording each one's
  :class:`FileFacts` (bytes, lines, SHA-256) as it goes, and checkpoints after each:
  a chunk taken over goes on at the next blob. A copy is an overwrite with the same
  bytes, so copying a blob again (a worker died between the copy and the checkpoint)
  changes nothing.
- ``finalize`` writes ``<results_container>/<job_id>/manifest.json``: every blob copied,
  with its facts, in name order. Idempotent: recomputed from the chunks' results.

The facts are what the verify step (:mod:`.reconcile`) later compares the source with:
the staged copy is what the transform read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from checkpoint.backends import open_storage
from checkpoint.errors import ConfigurationError
from checkpoint.storage import Storage
from jobs import Chunk, ChunkedJob, JobSummary
from jobs.planning import split_files
from samples.migration.generate import BLOB_PREFIX, DEFAULT_CONTAINER
from samples.migration.layout import params_of, put_json

#: Where the staged copy goes, by default (under ``staging_prefix``).
STAGING_CONTAINER = "orders-v1-staged"


@dataclass(frozen=True)
class FileFacts:
    """What a blob holds, to compare two copies of it: its size in bytes, its lines (those that
    are not blank: the rows Spark reads from a JSON-lines file) and its SHA-256."""

    size: int
    lines: int
    sha256: str

    @classmethod
    def of(cls, data: bytes) -> FileFacts:
        lines = sum(1 for line in data.splitlines() if line.strip())
        return cls(len(data), lines, hashlib.sha256(data).hexdigest())

    @classmethod
    def read(cls, storage: Storage, container: str, name: str) -> FileFacts:
        """The facts of blob ``name`` as it is now."""
        return cls.of(storage.blobs.get(container, name))

    def describe(self) -> str:
        """``2,003 lines, 341,220 bytes, sha256 1a2b3c4d``."""
        return f"{self.lines:,} lines, {self.size:,} bytes, sha256 {self.sha256[:8]}"


@dataclass(frozen=True)
class StageParams:
    """The stage step's parameters, with their defaults.

    Attributes:
        staging_prefix: where the copies go in ``staging_container`` (a pipeline's own
            folder, ending in ``/``); required.
        source_container / source_prefix: the legacy export.
        staging_container: where the copies go.
        results_container: where ``finalize`` writes ``<job_id>/manifest.json``.
        chunk_bytes: source bytes per chunk (blobs are never split).
        storage: where the blobs are, as ``runner --storage``; None: the workers'
            ``$RUNNER_STORAGE``. Never an account key: params are stored.
    """

    staging_prefix: str
    source_container: str = DEFAULT_CONTAINER
    source_prefix: str = BLOB_PREFIX
    staging_container: str = STAGING_CONTAINER
    results_container: str = "orders-v2"
    chunk_bytes: int = 64 << 20
    storage: str | None = None

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> StageParams:
        """Parse and check the submitted params."""
        made: StageParams = params_of(cls, params, required=("staging_prefix",))
        if made.chunk_bytes < 1:
            raise ConfigurationError("chunk_bytes must be >= 1")
        return made

    def staged_name(self, source: str) -> str:
        """The copy's name of source blob ``source``."""
        return self.staging_prefix + source


class StageExport(ChunkedJob):
    """Copies the legacy export to the staging container (params: :class:`StageParams`)."""

    # A chunk copies a few blobs of tens of MB: seconds. Every copy is checkpointed.
    lease_seconds = 30
    checkpoint_interval_seconds = 0

    def split(self, params: dict[str, Any]) -> Any:
        settings = StageParams.of(params)
        with open_storage(settings.storage) as storage:
            blobs = storage.blobs.list(settings.source_container, settings.source_prefix)
            sizes = {blob.name: blob.size for blob in blobs}
        yield from split_files(sizes, target_bytes=settings.chunk_bytes)

    def process(self, chunk: Chunk) -> dict[str, Any]:
        settings = StageParams.of(chunk.params)
        copied: list[dict[str, Any]] = list(chunk.state or [])
        with open_storage(settings.storage) as storage:
            storage.blobs.create_container(settings.staging_container)
            for source in chunk.payload["files"][len(copied) :]:
                copied.append(copy_to_staging(storage, settings, source))
                chunk.checkpoint(copied)  # the next attempt starts at the next blob
        return {"files": copied}

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        settings = StageParams.of(params)
        files = [entry for _, result in summary.results() for entry in result["files"]]
        manifest = {
            "job_id": summary.job_id,
            "source_container": settings.source_container,
            "source_prefix": settings.source_prefix,
            "staging_container": settings.staging_container,
            "files": sorted(files, key=lambda entry: entry["source"]),
        }
        with open_storage(settings.storage) as storage:
            put_json(
                storage, settings.results_container, f"{summary.job_id}/manifest.json", manifest
            )


def copy_to_staging(storage: Storage, settings: StageParams, source: str) -> dict[str, Any]:
    """Copy source blob ``source`` to its staged name; what was copied, with its facts.

    The whole blob is held in memory while it is copied (the blob store writes whole
    blobs): the export's blobs are tens of MB."""
    data = storage.blobs.get(settings.source_container, source)
    staged = settings.staged_name(source)
    storage.blobs.put(settings.staging_container, staged, data)
    return {"source": source, "staged": staged, **asdict(FileFacts.of(data))}


def facts_of(entry: Mapping[str, Any]) -> FileFacts:
    """The :class:`FileFacts` in a staged file's manifest entry."""
    return FileFacts(entry["size"], entry["lines"], entry["sha256"])
