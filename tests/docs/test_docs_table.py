"""docs/docs-tests.md lists every code block of every page of docs/upstream/: a row per block
(page, block index, line), a "-" row for a page without blocks, or a "*" row for a page whose
rows another part of the suite owns. A page that gains, loses or moves a block fails here
until the table (and its test) follow."""

from __future__ import annotations

import os
import re

from .conftest import PAGES, ROOT, blocks

TABLE = os.path.join(ROOT, "docs", "docs-tests.md")


def _rows():
    with open(TABLE, encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"^\| ([\w.-]+\.md) \| (\d+|-|\*) \|\s*(\d*)\s*\|", text, re.M)


def _pages():
    return sorted(p for p in os.listdir(PAGES) if p.endswith(".md") and p != "ORIGIN.md")


def test_upstream_pages_are_the_seed_set():
    assert len(_pages()) == 18, _pages()


def test_every_block_has_a_row():
    rows = _rows()
    for page in _pages():
        mine = [(b, line) for p, b, line in rows if p == page]
        assert mine, f"{page}: no row in docs/docs-tests.md"
        if ("*", "") in mine:
            continue
        bs = blocks(page)
        if not bs:
            assert mine == [("-", "")], (page, mine)
            continue
        want = [(str(b.index), str(b.line)) for b in bs]
        assert sorted(mine, key=lambda r: int(r[0])) == want, (page, mine, want)


def test_rows_name_known_pages():
    pages = set(_pages())
    assert {p for p, _, _ in _rows()} <= pages
