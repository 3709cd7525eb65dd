"""``VerifyAgainstSource``: the pipeline's verify step, the migration checked against its source.

    runner submit samples.migration.reconcile:VerifyAgainstSource \\
        --params '{"stage_job": "run-1-stage", "transform_job": "run-1-transform"}'

The transform read a staged copy of the legacy export (:mod:`.stage`), and the legacy
system may have written to the export since. Before anything is published, this step
goes back to the source and checks, batch by batch of the transform, that what was
published accounts for the source as it is now. No Spark: the source is text, read
through the blob store, and the outputs' commit markers are small JSON files.

- ``split`` reads the stage step's manifest (each staged blob's source name and facts)
  and the transform's (each batch's blobs, the rows Spark read from them, and its
  published outputs), and packs the batches into chunks of ``batches_per_chunk``.
- ``process`` checks each batch of its chunk:

  1. every blob of the batch, read from the source now, has the lines, size and SHA-256
     of the staged copy the transform read (:class:`~.stage.FileFacts`);
  2. the source's lines add up to the rows Spark read (``rows_in``): every line was
     read once;
  3. the batch wrote no more orders and rejects than it read;
  4. each output's commit marker says the rows and checksum the manifest lists (outputs
     on a local path; a URI's marker is read through Spark, which this step does not
     start).

  A chunk with any difference fails, listing them all, with ``retry=False``: reading
  the same source again gives the same answer, so it is poisoned at once and the job
  fails at its end (after its other chunks ran), which blocks the publish step. Once
  the source is put right, ``runner poison redrive <this job>`` runs only those chunks
  again; when they pass, the job finalizes and the publish step starts by itself.
- ``finalize`` checks the whole: every staged blob was read by a batch of the transform,
  and the source holds no blob the stage step did not copy (and lost none). Either
  would need the stage and transform steps run again, so it raises
  ``jobs.PipelineStop`` with what differs, and publish stays blocked. Otherwise it
  writes ``<results_container>/<job_id>/verdict.json`` with the totals checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from checkpoint.backends import open_storage
from checkpoint.errors import NotFound
from checkpoint.storage import Storage
from jobs import Chunk, ChunkedJob, ChunkFailed, JobSummary, PipelineStop
from jobs.spark import read_commit
from samples.migration.layout import get_json, is_uri, params_of, put_json
from samples.migration.stage import FileFacts, facts_of

#: Differences listed in one chunk's error or one PipelineStop at most (then "and N more").
LISTED = 5


@dataclass(frozen=True)
class VerifyParams:
    """The verify step's parameters.

    Attributes:
        stage_job / transform_job: the job ids of the steps it checks; their manifests
            are read from ``results_container``.
        results_container: where the steps write ``<job_id>/manifest.json``, and this
            step ``<job_id>/verdict.json``.
        batches_per_chunk: transform batches checked per chunk; a redrive runs again
            only the chunks that differed, so smaller chunks redo less.
        storage: as ``runner --storage``; None: the workers' ``$RUNNER_STORAGE``.
    """

    stage_job: str
    transform_job: str
    results_container: str = "orders-v2"
    batches_per_chunk: int = 2
    storage: str | None = None

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> VerifyParams:
        made: VerifyParams = params_of(cls, params, required=("stage_job", "transform_job"))
        if made.batches_per_chunk < 1:
            raise ValueError("batches_per_chunk must be >= 1")
        return made

    def manifest(self, storage: Storage, job_id: str) -> Any:
        """The manifest step ``job_id`` wrote."""
        return get_json(storage, self.results_container, f"{job_id}/manifest.json")


class VerifyAgainstSource(ChunkedJob):
    """Checks the transform's batches against the source (params: :class:`VerifyParams`)."""

    lease_seconds = 30
    max_attempts = 3  # storage trouble aside, a chunk either matches or differs

    def split(self, params: dict[str, Any]) -> Any:
        settings = VerifyParams.of(params)
        with open_storage(settings.storage) as storage:
            staged = settings.manifest(storage, settings.stage_job)
            transformed = settings.manifest(storage, settings.transform_job)
        batches = list(batches_to_check(staged, transformed))
        step = settings.batches_per_chunk
        for first in range(0, len(batches), step):
            yield {
                "source_container": staged["source_container"],
                "batches": batches[first : first + step],
            }

    def process(self, chunk: Chunk) -> dict[str, Any]:
        settings = VerifyParams.of(chunk.params)
        payload = chunk.payload
        totals: Counter[str] = Counter()
        differences: list[str] = []
        with open_storage(settings.storage) as storage:
            for batch in payload["batches"]:
                counted, found = check_batch(storage, payload["source_container"], batch)
                totals.update(counted)
                differences.extend(found)
        if differences:
            raise ChunkFailed(
                f"{len(differences)} difference(s) from the source: {listed(differences)}",
                retry=False,
            )
        return dict(totals)

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        settings = VerifyParams.of(params)
        totals: Counter[str] = Counter()
        for _, result in summary.results():
            totals.update(result)
        with open_storage(settings.storage) as storage:
            staged = settings.manifest(storage, settings.stage_job)
            transformed = settings.manifest(storage, settings.transform_job)
            problems = [*unread_files(staged, transformed), *source_changes(storage, staged)]
            if problems:
                raise PipelineStop(f"the migration does not cover the source: {listed(problems)}")
            verdict = {
                "job_id": summary.job_id,
                "stage_job": settings.stage_job,
                "transform_job": settings.transform_job,
                "chunks": summary.total,
                **dict(sorted(totals.items())),
                "differences": 0,
            }
            put_json(storage, settings.results_container, f"{summary.job_id}/verdict.json", verdict)


def batches_to_check(
    staged: Mapping[str, Any], transformed: Mapping[str, Any]
) -> Iterator[dict[str, Any]]:
    """Each batch of the transform's manifest, with its blobs' stage entries (or just
    ``{"staged": name}`` for a blob the stage step did not copy) and its outputs."""
    by_staged = {entry["staged"]: entry for entry in staged["files"]}
    outputs: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for output in transformed["outputs"]:
        keep = {key: output[key] for key in ("kind", "path", "rows", "checksum")}
        outputs.setdefault((output["chunk"], output["batch"]), []).append(keep)
    for batch in transformed["inputs"]:
        yield {
            "chunk": batch["chunk"],
            "batch": batch["batch"],
            "rows_in": batch["rows_in"],
            "files": [by_staged.get(name, {"staged": name}) for name in batch["files"]],
            "outputs": outputs.get((batch["chunk"], batch["batch"]), []),
        }


def check_batch(
    storage: Storage, source_container: str, batch: Mapping[str, Any]
) -> tuple[Counter[str], list[str]]:
    """What :class:`VerifyAgainstSource` checks of one batch: the counts checked, and
    every difference found (empty: the batch matches its source)."""
    where = f"transform chunk {batch['chunk']} batch {batch['batch']}"
    differences: list[str] = []
    lines = 0
    for entry in batch["files"]:
        if "source" not in entry:
            differences.append(f"{entry['staged']}: read by {where}, not copied by the stage step")
            continue
        try:
            now = FileFacts.read(storage, source_container, entry["source"])
        except NotFound:
            differences.append(f"{entry['source']}: gone from the source")
            continue
        lines += now.lines
        copied = facts_of(entry)
        if now != copied:
            differences.append(
                f"{entry['source']}: the source has {now.describe()}; the staged copy the "
                f"transform read has {copied.describe()}"
            )
    if lines != batch["rows_in"] and not differences:
        differences.append(f"{where}: {lines:,} source lines, {batch['rows_in']:,} rows read")
    written = sum(output["rows"] for output in batch["outputs"])
    if written > batch["rows_in"]:
        differences.append(f"{where}: {written:,} rows written from {batch['rows_in']:,} read")
    differences.extend(marker_differences(batch["outputs"]))
    counted = Counter(
        batches=1,
        files=len(batch["files"]),
        source_lines=lines,
        rows_in=batch["rows_in"],
        outputs_checked=sum(not is_uri(output["path"]) for output in batch["outputs"]),
    )
    return counted, differences


def marker_differences(outputs: list[dict[str, Any]]) -> Iterator[str]:
    """Outputs whose commit marker does not say what the manifest lists (local paths)."""
    for output in outputs:
        if is_uri(output["path"]):
            continue  # its marker is read through Spark's file system
        commit = read_commit(output["path"])
        if commit is None:
            yield f"{output['path']}: no commit marker"
        elif (commit.rows, commit.checksum) != (output["rows"], output["checksum"]):
            yield (
                f"{output['path']}: the marker says {commit.rows:,} rows, checksum "
                f"{commit.checksum}; the manifest {output['rows']:,}, {output['checksum']}"
            )


def unread_files(staged: Mapping[str, Any], transformed: Mapping[str, Any]) -> list[str]:
    """Staged blobs no batch of the transform read."""
    read = {name for batch in transformed["inputs"] for name in batch["files"]}
    return [
        f"{entry['source']}: staged, never read by the transform"
        for entry in staged["files"]
        if entry["staged"] not in read
    ]


def source_changes(storage: Storage, staged: Mapping[str, Any]) -> list[str]:
    """Blobs added to the source since the stage step listed it, or gone from it."""
    copied = {entry["source"] for entry in staged["files"]}
    now = {
        blob.name
        for blob in storage.blobs.list(staged["source_container"], staged["source_prefix"])
    }
    return [
        *(f"{name}: in the source, never staged" for name in sorted(now - copied)),
        *(f"{name}: staged, gone from the source" for name in sorted(copied - now)),
    ]


def listed(items: list[str]) -> str:
    """The first :data:`LISTED` of ``items`` joined, and how many more."""
    more = len(items) - LISTED
    return "; ".join(items[:LISTED]) + (f"; and {more} more" if more > 0 else "")
