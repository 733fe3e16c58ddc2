"""Every repository path that README.md and docs/architecture.md name exists in the tree.

A path is named in backticks (`capi/pg.go`, `engine/transport/{shm,tcp}`) or as a link target
([docs/elastic.md](docs/elastic.md)), outside fenced code blocks, and looks like a path: it
contains a '/' or ends in a source or document suffix. Link targets resolve against the page's
folder; backticked paths against the repository root, or the page's folder, and a bare file name
(`populate.go`) may be anywhere in the tree. URLs, flags, placeholders (`<id>`, `h:p`), absolute
paths and build outputs (build/, dist/, .venv/, *.so, *.whl: made by `make`, not committed) are
not repository paths. Shell globs (`cmd/internal/*`) must match something.
"""

from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", "docs/architecture.md"]
SUFFIXES = (".go", ".py", ".md", ".sh", ".h", ".c", ".cpp", ".hpp", ".rs", ".toml", ".json", ".yml",
            ".yaml", ".png", ".txt", ".lock")
BUILD_OUTPUTS = re.compile(r"^(build|dist|\.venv)/|\.(so|whl)$")


def names(text: str):
    """(name, kind) for each backticked span and link target outside fenced code blocks."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        yield m.group(1), "link"
    for m in re.finditer(r"`([^`\n]+)`", text):
        yield m.group(1), "code"


def expand(name: str):
    """engine/transport/{shm,tcp} -> engine/transport/shm, engine/transport/tcp."""
    m = re.search(r"\{([^{}]*)\}", name)
    if not m:
        return [name]
    return [p for alt in m.group(1).split(",") for p in expand(name[:m.start()] + alt + name[m.end():])]


def is_path(name: str) -> bool:
    if re.search(r"\s|://|[<>=:@$()\[\]\\]|^(-|/|~|\.\.?/)", name) or name.startswith(("http", "mailto", "#")):
        return False
    if name.startswith("github.com/"):  # the Go module path
        return False
    return "/" in name or name.endswith(SUFFIXES)


def exists(page: str, name: str, kind: str) -> bool:
    path = name.split("#", 1)[0]
    if not path or BUILD_OUTPUTS.search(path):
        return True
    bases = [os.path.dirname(os.path.join(ROOT, page))] + ([ROOT] if kind == "code" else [])
    for base in bases:
        if glob.glob(os.path.join(base, path)):
            return True
    if kind == "code" and "/" not in path:  # a bare file name: somewhere in the tree
        for d, dirs, files in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("build", "dist", "node_modules", "target")]
            if glob.fnmatch.filter(files, path):
                return True
    return False


def test_pages_are_checked():
    # the extraction finds the paths these pages are known to name (so a broken parser cannot pass)
    found = {n for page in PAGES for n, _ in names(open(os.path.join(ROOT, page)).read())}
    for expected in ("docs/configuration.md", "capi/include/mooncake.h", "internal/memview"):
        assert expected in found, expected


@pytest.mark.parametrize("page", PAGES)
def test_named_paths_exist(page):
    text = open(os.path.join(ROOT, page)).read()
    missing = sorted({p for n, kind in names(text) for p in expand(n) if is_path(p) and not exists(page, p, kind)})
    assert not missing, f"{page} names paths that are not in the tree: {missing}"


def top_folders():
    """The repository's top-level folders that hold tracked files (git ls-files), or None."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted({line.split("/", 1)[0] for line in out.splitlines() if "/" in line})


@pytest.mark.parametrize("page", PAGES)
def test_every_top_folder_is_described(page):
    folders = top_folders()
    if not folders:
        pytest.skip("not a git checkout")
    named = {p.split("/", 1)[0] for n, _ in names(open(os.path.join(ROOT, page)).read()) for p in expand(n)
             if "/" in p}
    missing = [f for f in folders if f not in named]
    assert not missing, f"{page} does not describe the top folders {missing}"
