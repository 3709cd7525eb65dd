"""The field tables of the docs (a table whose first column is headed ``field``, as
docs/cli.md's tables of each command's JSON): each key is described once, so two rows
cannot say different things of one key."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.project.docs_blocks import DOCUMENTS, ROOT

_KEY = re.compile(r"`([^`]+)`")


def field_tables(doc: Path) -> list[tuple[int, list[str]]]:
    """Each field table of ``doc``: the line of its header and the keys its rows name,
    in order (a row naming several, ``created_on``, ``updated_on``, gives each)."""
    tables: list[tuple[int, list[str]]] = []
    keys: list[str] | None = None
    for number, line in enumerate(doc.read_text().splitlines(), start=1):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|"):
            keys = None
        elif cells[0] == "field":
            keys = []
            tables.append((number, keys))
        elif keys is not None and not set(cells[0]) <= set("-: "):
            keys.extend(_KEY.findall(cells[0]))
    return tables


def duplicates(doc: Path) -> list[str]:
    """``doc:line: key`` for each key named by two rows of one field table."""
    name = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc
    return [
        f"{name}:{line}: {key}"
        for line, keys in field_tables(doc)
        for key, n in Counter(keys).items()
        if n > 1
    ]


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda doc: doc.name)
def test_each_key_of_a_field_table_is_described_once(doc: Path):
    assert duplicates(doc) == []


def test_the_cli_reference_has_field_tables_to_check():
    # The check above must look at the tables it is for: status --json's among them.
    tables = field_tables(ROOT / "docs" / "cli.md")
    assert len(tables) >= 2
    assert any("workers[]" in keys and "unreadable[]" in keys for _, keys in tables)


def test_a_key_described_twice_is_found(tmp_path: Path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "| field | meaning |\n| --- | --- |\n| `a`, `b` | one |\n| `b` | again |\n\n"
        "| field | meaning |\n| --- | --- |\n| `a` | another table |\n"
    )
    assert [key for _, keys in field_tables(doc) for key in keys] == ["a", "b", "b", "a"]
    assert duplicates(doc) == [f"{doc}:1: b"]
