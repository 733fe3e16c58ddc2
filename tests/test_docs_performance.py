"""docs/performance.md keeps one marked table per bench that writes it (--write-doc), and the
benches' writer replaces that table in place, leaving the rest of the file as it is."""

from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "performance.md")


def _perfdoc():
    """bench/perfdoc.py, loaded by path (the benches put python/ on sys.path, which would make
    later tests' spawned workers import the source tree instead of the installed package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("perfdoc", os.path.join(ROOT, "bench", "perfdoc.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench_sections() -> dict[str, str]:
    """section name -> the bench that writes it (write_section('name', ...) in bench/*.py)."""
    out = {}
    for path in glob.glob(os.path.join(ROOT, "bench", "*.py")):
        for name in re.findall(r"write_section\('([a-z_]+)'", open(path).read()):
            out[name] = os.path.basename(path)
    return out


def test_every_bench_section_is_marked_once():
    text = open(DOC).read()
    sections = bench_sections()
    assert set(sections) == {"store_bench", "tier_bench", "trace_bench", "failover_bench", "smallops_bench",
                             "smallops_clients", "smallops_preload"}
    for name in sections:
        assert text.count(f"<!-- BEGIN {name} -->\n") == 1, name
        assert text.count(f"<!-- END {name} -->") == 1, name
        assert text.index(f"<!-- BEGIN {name} -->") < text.index(f"<!-- END {name} -->"), name


def test_write_section_replaces_in_place(tmp_path):
    write_section = _perfdoc().write_section

    doc = tmp_path / "performance.md"
    original = open(DOC).read()
    doc.write_text(original)
    write_section("tier_bench", "| a | b |\n|---|---|\n| 1 | 2 |\n", str(doc))
    text = doc.read_text()
    begin, end = "<!-- BEGIN tier_bench -->\n", "<!-- END tier_bench -->"
    assert text[text.index(begin) + len(begin):text.index(end)] == "| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert text[:text.index(begin)] == original[:original.index(begin)]
    assert text[text.index(end):] == original[original.index(end):]
    assert text.count("## Storage tiers") == 1  # no second section appended
    write_section("tier_bench", "| a | b |\n|---|---|\n| 1 | 2 |\n", str(doc))
    assert doc.read_text() == text  # a second run writes the same file


def test_write_section_refuses_a_file_without_markers(tmp_path):
    import pytest
    write_section = _perfdoc().write_section

    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n")
    with pytest.raises(SystemExit, match="BEGIN store_bench"):
        write_section("store_bench", "x", str(doc))
    assert doc.read_text() == "# Performance\n"


def test_history_is_linked():
    text = open(DOC).read()
    for path in glob.glob(os.path.join(ROOT, "docs", "history", "performance-*.md")):
        assert f"(history/{os.path.basename(path)})" in text, path
