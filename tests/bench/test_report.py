"""The benchmark report writer keeps one section per benchmark and says the machine."""

from __future__ import annotations

from tests.bench.report import machine_line, write_section


def test_machine_line_names_cores_memory_and_python():
    line = machine_line()
    assert "cores" in line and "GiB" in line and "Python 3." in line


def test_sections_are_replaced_not_duplicated(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    write_section(path, "Storage operations", ["first"])
    write_section(path, "Chunks", ["chunks figures"])
    write_section(path, "Storage operations", ["second"])
    text = path.read_text()
    assert text.count("## Storage operations") == 1
    assert "second" in text and "first" not in text
    assert "chunks figures" in text
    assert text.index("## Storage operations") < text.index("## Chunks")
