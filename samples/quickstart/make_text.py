"""Write a folder of generated text files for the word-count quickstart.

    python -m samples.quickstart.make_text /tmp/quickstart/input --files 20 --lines 5000

The text is drawn from a small vocabulary with a few very common words, like real prose,
and is the same for the same ``--seed``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

VOCABULARY = (
    "the of and to in a is that for it as was with be by on not he this are or his from "
    "at which but have an they you were her she there been one all we their has would "
    "queue lease chunk worker message checkpoint resume retry poison storage table blob"
).split()


def make_text(folder: Path, files: int, lines: int, seed: int = 1) -> list[Path]:
    """Write ``files`` files of ``lines`` lines each into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    # Zipf-like: the n-th word is about n times rarer than the first.
    weights = [1 / rank for rank in range(1, len(VOCABULARY) + 1)]
    written = []
    for number in range(files):
        path = folder / f"part-{number:04d}.txt"
        text = (
            " ".join(rng.choices(VOCABULARY, weights, k=rng.randint(3, 15))).capitalize() + ".\n"
            for _ in range(lines)
        )
        path.write_text("".join(text))
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    paths = make_text(options.folder, options.files, options.lines, options.seed)
    print(f"wrote {len(paths)} files to {options.folder}")


if __name__ == "__main__":
    main()
