"""The marked tables of docs/performance.md that benches own: `--write-doc` replaces a bench's
table in place (imports nothing of the project, so tests can load it without touching sys.path)."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_section(name: str, body: str, path: str = "") -> str:
    """Replaces what lies between the lines <!-- BEGIN name --> and <!-- END name --> of
    docs/performance.md (or path) with body (the table of today's figures that a bench owns); the
    rest of the file stays as it is. Returns the file's path."""
    path = path or os.path.join(ROOT, "docs", "performance.md")
    text = open(path).read()
    begin, end = f"<!-- BEGIN {name} -->\n", f"<!-- END {name} -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i or text.count(begin) != 1 or text.count(end) != 1:
        raise SystemExit(f"{path}: expected one '{begin.strip()}' ... '{end}' section to write into")
    text = text[:i + len(begin)] + body.strip("\n") + "\n" + text[j:]
    with open(path, "w") as f:
        f.write(text)
    return path
