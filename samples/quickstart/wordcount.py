"""Count the words of a folder of text files: one chunk per file, resumable per line.

    runner submit samples.quickstart.wordcount:WordCount \\
        --params '{"input": "/tmp/quickstart/input", "output": "/tmp/quickstart/summary.json"}'
    runner start samples.quickstart.wordcount:WordCount --workers 2 --burst

Each chunk counts one file and checkpoints the line it reached with the counts so far,
so a chunk taken over after a crash goes on from there. ``finalize`` adds the files'
counts up and writes a summary. Paths are read by every worker: on several machines,
put the files where all of them can read them.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from jobs import Chunk, ChunkedJob, JobSummary

WORD = re.compile(r"[a-z']+")
#: Lines between two offers of the counts so far (the runner writes at most one
#: checkpoint per ``checkpoint_interval_seconds`` whatever the rate of offers).
LINES_PER_CHECKPOINT = 500
#: Most common words listed in the summary.
TOP_WORDS = 10


class WordCount(ChunkedJob):
    """Params: ``input`` (a folder of ``*.txt`` files) and ``output`` (the summary file)."""

    lease_seconds = 10
    checkpoint_interval_seconds = 2.0
    max_attempts = 3

    def validate(self, params: Any) -> None:
        # Run by submit, in the submitting process: a mistyped folder fails there in one
        # line instead of in planning on a worker, three attempts later.
        if not isinstance(params, dict) or not {"input", "output"} <= params.keys():
            raise ValueError('params needs "input" (a folder of .txt files) and "output"')
        if not Path(params["input"]).is_dir():
            raise ValueError(f"input {params['input']!r} is not a folder")

    def split(self, params: dict[str, Any]) -> Any:
        # Sorted: planning resumed after a crash must see the same files in the same order.
        for path in sorted(Path(params["input"]).glob("*.txt")):
            yield {"path": str(path)}

    def process(self, chunk: Chunk) -> dict[str, Any]:
        state = chunk.state or {"line": 0, "counts": {}}
        counts = Counter(state["counts"])
        line_number = 0
        with open(chunk.payload["path"], encoding="utf-8") as lines:
            for line_number, line in enumerate(lines, start=1):
                if line_number <= state["line"]:
                    continue  # counted by an earlier attempt
                counts.update(WORD.findall(line.lower()))
                if line_number % LINES_PER_CHECKPOINT == 0:
                    chunk.checkpoint({"line": line_number, "counts": dict(counts)})
        name = Path(chunk.payload["path"]).name
        return {"file": name, "lines": line_number, "counts": dict(counts)}

    def finalize(self, params: dict[str, Any], summary: JobSummary) -> None:
        # Idempotent: computed from the chunks' results and written whole, atomically.
        total: Counter[str] = Counter()
        lines = 0
        for _, result in summary.results():
            total.update(result["counts"])
            lines += result["lines"]
        report = {
            "job_id": summary.job_id,
            "files": summary.total,
            "lines": lines,
            "words": sum(total.values()),
            "distinct_words": len(total),
            "top": total.most_common(TOP_WORDS),
        }
        output = Path(params["output"])
        output.parent.mkdir(parents=True, exist_ok=True)
        scratch = output.with_name(f".{output.name}.{os.getpid()}")
        scratch.write_text(json.dumps(report, indent=2) + "\n")
        os.replace(scratch, output)
