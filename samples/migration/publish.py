"""``PublishManifest``: the pipeline's last step, the migrated data's manifest, written once.

    runner submit samples.migration.publish:PublishManifest --params \\
        '{"pipeline": "run-1", "transform_job": "run-1-transform", "verify_job": "run-1-verify"}'

It runs only once the verify step is done (a failed verify blocks it), and it has no
chunks: ``split`` yields nothing, so the job goes straight to ``finalize``, which writes
``<results_container>/<pipeline>/manifest.json``: the transform's published outputs
(path, rows, checksum), its totals, and what the verify step checked. Readers of the
migrated data start from this file.

The write is a create that fails if the blob exists (``if_none_match``), so the
manifest is written once. A finalize run again (its worker died after the write) finds
it there: the same content is that finalize's own write, and the step ends done; a
different one was published by something else, and the step fails rather than replace
it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checkpoint.backends import open_storage
from checkpoint.errors import AlreadyExists
from checkpoint.storage import Storage
from jobs import Chunk, ChunkedJob, ChunkFailed, JobSummary
from samples.migration.layout import get_json, params_of

log = logging.getLogger(__name__)

#: What the published manifest takes of each of the transform's outputs.
OUTPUT_KEYS = ("kind", "path", "rows", "checksum")
#: ... and of the transform's summary and the verify step's verdict.
SUMMARY_KEYS = ("rows_in", "rows_out", "rows_rejected", "checksum", "rejects_checksum")
VERDICT_KEYS = ("files", "source_lines", "outputs_checked")


@dataclass(frozen=True)
class PublishParams:
    """The publish step's parameters.

    Attributes:
        pipeline: names the manifest: ``<results_container>/<pipeline>/manifest.json``.
        transform_job / verify_job: the steps whose results it publishes.
        results_container: where those steps wrote theirs.
        storage: as ``runner --storage``; None: the workers' ``$RUNNER_STORAGE``.
    """

    pipeline: str
    transform_job: str
    verify_job: str
    results_container: str = "orders-v2"
    storage: str | None = None

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> PublishParams:
        required = ("pipeline", "transform_job", "verify_job")
        made: PublishParams = params_of(cls, params, required=required)
        return made

    @property
    def manifest_name(self) -> str:
        return f"{self.pipeline}/manifest.json"


class PublishManifest(ChunkedJob):
    """Writes the migration's manifest once (params: :class:`PublishParams`)."""

    def split(self, params: dict[str, Any]) -> Any:
        PublishParams.of(params)  # refused at planning, not at finalize
        return iter(())

    def process(self, chunk: Chunk) -> Any:
        raise AssertionError("PublishManifest has no chunks")  # pragma: no cover

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        settings = PublishParams.of(params)
        with open_storage(settings.storage) as storage:
            manifest = published_manifest(storage, settings)
            written = publish_once(storage, settings, manifest)
        log.info(
            "published %s/%s: %d outputs, %d orders (%s)",
            settings.results_container,
            settings.manifest_name,
            len(manifest["outputs"]),
            manifest["rows_out"],
            "written now" if written else "already there, the same",
        )


def published_manifest(storage: Storage, settings: PublishParams) -> dict[str, Any]:
    """The manifest to publish, from the transform's manifest and summary and the verify
    step's verdict (no time in it: a finalize run again builds the same)."""
    container = settings.results_container
    transformed = get_json(storage, container, f"{settings.transform_job}/manifest.json")
    summary = get_json(storage, container, f"{settings.transform_job}/summary.json")
    verdict = get_json(storage, container, f"{settings.verify_job}/verdict.json")
    return {
        "pipeline": settings.pipeline,
        "format": transformed["format"],
        "transform_job": settings.transform_job,
        "verify_job": settings.verify_job,
        **{key: summary[key] for key in SUMMARY_KEYS},
        "verified": {key: verdict[key] for key in VERDICT_KEYS},
        "outputs": [{key: entry[key] for key in OUTPUT_KEYS} for entry in transformed["outputs"]],
    }


def publish_once(storage: Storage, settings: PublishParams, manifest: dict[str, Any]) -> bool:
    """Create the manifest blob if none is there; True if this call wrote it.

    Raises:
        ChunkFailed: (not retried) a different manifest is there already.
    """
    container, name = settings.results_container, settings.manifest_name
    data = (json.dumps(manifest, indent=2) + "\n").encode("utf-8")
    storage.blobs.create_container(container)
    try:
        storage.blobs.put(container, name, data, if_none_match=True)
        return True
    except AlreadyExists:
        pass
    # Written by an earlier run of this finalize (the same bytes), or by something else.
    if storage.blobs.get(container, name) == data:
        return False
    raise ChunkFailed(
        f"{container}/{name} holds another manifest already; not replaced", retry=False
    )
