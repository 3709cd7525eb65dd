"""The fenced blocks of README.md and docs/*.md, and what tests/project/test_docs.py may
do with each.

Parsing and classification only (the conventions are in tests/project/test_docs.py): a block is
run, skipped for a reason its marker gives, shown (text, json, ...), or refused with a
``problem`` that its test reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PYTHON = {"python", "py"}
SHELL = {"sh", "bash", "shell"}
SHOWN = {"", "text", "json", "mermaid"}

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*docs-test:(?P<body>.*?)-->\s*$")
_DIRECTIVE = re.compile(r"^\s*(?:skip|exit\s+(?P<code>\d+))\s*\((?P<reason>.*\S.*)\)\s*$")
_MODULE = re.compile(r"^#\s*(?P<name>[A-Za-z_]\w*)\.py\s*$")
_RUNNER = re.compile(r"(?:^|[\s;&|(])runner(?:\s|$)")
_START = re.compile(r"(?:^|[\s;&|(])runner\s+start\b")
_ENDS = re.compile(r"(?:^|\s)(?:--burst|--help|-h)(?:\s|$)")


@dataclass(frozen=True)
class Block:
    """One fenced block of a document, or a marker that is not followed by one."""

    doc: Path
    line: int  # of the opening fence (of the marker, for a stray marker)
    lang: str
    text: str
    skip: str | None = None
    exit_code: int = 0
    problem: str | None = None

    @property
    def name(self) -> str:
        doc = self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc
        return f"{doc}:{self.line}"

    @property
    def module(self) -> str | None:
        """``name`` if this is a module block (first line ``# name.py``)."""
        found = _MODULE.match(self.text.split("\n", 1)[0]) if self.lang in PYTHON else None
        return found["name"] if found else None

    @property
    def kind(self) -> str:
        """python, module, test-module, console, shell or shown."""
        if self.lang in PYTHON:
            if self.module is None:
                return "python"
            return "test-module" if self.module.startswith("test_") else "module"
        return "console" if self.lang == "console" else "shell" if self.lang in SHELL else "shown"


def parse(doc: Path) -> list[Block]:
    """The document's fenced blocks in order, each with its marker and any problem."""
    lines = doc.read_text().splitlines()
    blocks: list[Block] = []
    marker: tuple[int, str] | None = None
    number = 0
    while number < len(lines):
        text = lines[number]
        opening = _FENCE.match(text)
        if marker is not None and not opening:
            blocks.append(_stray(doc, *marker))
            marker = None
        if _MARKER.match(text):
            marker = (number + 1, text)
        elif opening:
            end = _closing(lines, number, opening["fence"])
            body = "\n".join(lines[number + 1 : end]) + "\n"
            blocks.append(_block(doc, number + 1, opening["lang"], body, marker))
            marker = None
            number = end
        number += 1
    if marker is not None:
        blocks.append(_stray(doc, *marker))
    return blocks


def _closing(lines: list[str], start: int, fence: str) -> int:
    for number in range(start + 1, len(lines)):
        line = lines[number].strip()
        if line.startswith(fence) and not line.strip(fence[0]):
            return number
    return len(lines)


def _stray(doc: Path, line: int, text: str) -> Block:
    return Block(doc, line, "", "", problem=f"marker not right before a fence: {text.strip()}")


def _block(doc: Path, line: int, lang: str, body: str, marker: tuple[int, str] | None) -> Block:
    lang = lang.lower()
    skip, exit_code = None, 0
    if marker is not None:
        directive = _DIRECTIVE.match(_MARKER.match(marker[1])["body"])  # type: ignore[index]
        if directive is None:
            problem = (
                f"unknown marker {marker[1].strip()!r}: use <!-- docs-test: skip (why) --> "
                "or <!-- docs-test: exit N (why) -->, each with a reason"
            )
            return Block(doc, line, lang, body, problem=problem)
        if directive["code"] is None:
            skip = directive["reason"]
        else:
            exit_code = int(directive["code"])
    block = Block(doc, line, lang, body, skip, exit_code)
    if exit_code and block.kind not in ("console", "shell"):
        return replace(block, problem="an exit marker is for console and shell blocks")
    return block if skip else replace(block, problem=_unrunnable(block))


def _unrunnable(block: Block) -> str | None:
    """Why a block without a skip marker cannot be run or shown, or None."""
    first = block.text.lstrip("\n").split("\n", 1)[0]
    if block.kind == "shown":
        if block.lang not in SHOWN:
            return (
                f"a ```{block.lang} block is neither run nor shown: label it python, "
                "console, sh, text or json, or mark it <!-- docs-test: skip (why) -->"
            )
        if first.startswith("$"):
            return (
                f"a shell session labelled ```{block.lang}: label it console to run it, "
                "or mark it <!-- docs-test: skip (why) -->"
            )
        return None
    if block.kind not in ("console", "shell"):
        return None
    commands = _command_lines(block)
    if not any(_RUNNER.search(command) for command in commands):
        return (
            "a shell block with no `runner` command (make, pip, ...): mark it "
            "<!-- docs-test: skip (why) -->"
        )
    for command in commands:
        if _START.search(command) and not _ENDS.search(command):
            return (
                f"`{command}` serves until stopped: add --burst, or mark the block "
                "<!-- docs-test: skip (why) -->"
            )
    return None


def _command_lines(block: Block) -> list[str]:
    """The block's commands, continuation lines joined, comments dropped."""
    if block.kind == "console":
        return [command for command, _ in session(block)]
    joined = block.text.replace("\\\n", " ")
    lines = (re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def session(block: Block) -> list[tuple[str, list[str]]]:
    """A console block as (command, expected output lines) pairs."""
    pairs: list[tuple[str, list[str]]] = []
    continued = False
    for line in block.text.splitlines():
        if continued:
            command, output = pairs[-1]
            pairs[-1] = (command[:-1] + " " + line.strip(), output)
        elif line.startswith("$"):
            pairs.append((line[1:].strip(), []))
        elif pairs:
            pairs[-1][1].append(line)
        continued = bool(pairs) and pairs[-1][0].endswith("\\")
    return pairs


def _all_blocks() -> list[Block]:
    blocks = [block for doc in DOCUMENTS for block in parse(doc)]
    defined: dict[str, Block] = {}
    checked = []
    for block in blocks:
        name = block.module
        if name is not None and not block.skip and name in defined:
            problem = f"module {name}.py is defined already at {defined[name].name}"
            block = replace(block, problem=problem)
        elif name is not None:
            defined.setdefault(name, block)
        checked.append(block)
    return checked


BLOCKS = _all_blocks()
MODULES = {block.module: block for block in BLOCKS if block.module and not block.problem}
#: The blocks that are tests: run, skipped with a reason, or refused (shown ones are not).
TESTED = [block for block in BLOCKS if block.kind != "shown" or block.skip or block.problem]
