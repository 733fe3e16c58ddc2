#!/usr/bin/env python3
"""Runs upstream Mooncake PG's own tests (mooncake-pg/tests of kvcache-ai/Mooncake) against a
Python environment: ours (this repository's .venv) or upstream's release wheel in a virtualenv of
its own, the same way for both, and prints ran / passed / failed / errors / skipped per file.

    python scripts/upstream_pg_suite.py --tests UPSTREAM/mooncake-pg/tests --python .venv/bin/python
        [--filter CPU] [--files test_a.py,test_b.py] [--json out.json] [--logs DIR] [--timeout 1200]

Upstream's tests are never part of this repository: get them with
`git -C MIRROR archive HEAD mooncake-pg mooncake-transfer-engine mooncake-common | tar -x` into
a scratch folder. The folder is copied afresh for each file (the test files import their
helpers, pg_test_utils and the others, from it; `from mooncake import pg` is the installed
package of --python), keeping its place in upstream's tree (the folders beside it are linked):
test_pg_elastic's in-place rejoin tests compile a fault-injection preload against upstream's
C++ headers found from there (they also need glog, jsoncpp, libnuma and yalantinglibs headers:
docs/elastic.md, "Upstream's own test suite").

Each test file runs as upstream's README runs the suite (`python -m unittest discover -s
mooncake-pg/tests -k CPU`), one file at a time: `python -m unittest -v -k FILTER MODULE`, in a
network namespace of its own (so files, and several drivers, never share ports) with loopback
and a veth pair up (upstream's release needs a non-loopback interface). Counts come from
unittest's summary (tests run, skipped) and its FAIL/ERROR headers; a file that does not load
counts as an error of its own. A CUDA or MUSA class skips itself on a host without the device.

Must run as root (unshare, ip)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from upstream_suite import parse_unittest  # noqa: E402  (the wheel suite's unittest parser)

# What runs inside the namespace: loopback and a veth pair up, then the file's tests.
NETNS_SCRIPT = r"""
set -u
ip link set lo up
ip link add mcv0 type veth peer name mcv1 && ip addr add 10.213.0.1/24 dev mcv0 && \
  ip link set mcv0 up && ip link set mcv1 up
cd "$RUN_DIR"
exec "$PY" -m unittest -v $FILTER_ARGS "$MODULE" 2>&1
"""


def test_files(folder: str) -> list[str]:
    """The files unittest's discovery would load from folder (test*.py)."""
    return sorted(f for f in os.listdir(folder) if f.startswith("test") and f.endswith(".py"))


def copy_tests(tests: str, tmp: str) -> str:
    """Copies the tests folder to tmp/<its parent's name>/<its name> and links, beside the copy
    and beside its parent, what sits beside the original and its parent (upstream's
    mooncake-pg/include, mooncake-transfer-engine, ...): the fault-injection helper builds its
    preload against parents[2]/mooncake-transfer-engine/include and parents[2]/mooncake-pg/include
    of its own path. Returns the copy."""
    tests = os.path.abspath(tests)
    parent = os.path.dirname(tests)
    top = os.path.dirname(parent)
    run_dir = os.path.join(tmp, os.path.basename(parent), os.path.basename(tests))
    shutil.copytree(tests, run_dir)
    for src, dst, skip in ((parent, os.path.dirname(run_dir), tests), (top, tmp, parent)):
        for entry in os.listdir(src):
            if os.path.join(src, entry) != skip and not os.path.exists(os.path.join(dst, entry)):
                os.symlink(os.path.join(src, entry), os.path.join(dst, entry))
    return run_dir


def run_file(name: str, tests: str, python: str, filt: str, timeout: int, keep: str | None) -> dict:
    python = os.path.abspath(python)  # the file runs in a copy of the folder
    tmp = tempfile.mkdtemp(prefix="upstream-pg-suite-")
    run_dir = copy_tests(tests, tmp)
    env = dict(os.environ)
    env.update({
        "RUN_DIR": run_dir, "PY": python, "MODULE": name[:-3],
        "FILTER_ARGS": f"-k {filt}" if filt else "",
        "PATH": os.path.dirname(os.path.abspath(python)) + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("PYTHONPATH", None)
    t0 = time.time()
    try:
        p = subprocess.run(["unshare", "-n", "bash", "-c", NETNS_SCRIPT], env=env, cwd=run_dir,
                           capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += "\n[driver] timed out"
        rc = 124
    res = parse_unittest(out)
    # A class whose setUpClass skips it (upstream's CUDA classes on a host without GPUs) counts
    # in unittest's skipped but not in its tests run: passed must not lose a test for it.
    class_skips = len(re.findall(r"setUpClass \([\w.]+\)\s*\.\.\.\s*skipped", out))
    if class_skips:
        res["passed"] = max(0, res["ran"] - res["failed"] - res["errors"] - (res["skipped"] - class_skips))
    if res["ran"] == 0 and rc != 0:
        # The module did not load (or the run was killed before unittest's summary).
        res.update(errors=1, failures=["(the file did not run)"])
    res.update(file=name, rc=rc, seconds=round(time.time() - t0, 1))
    if keep:
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, name + ".log"), "w") as f:
            f.write(out)
    shutil.rmtree(tmp, ignore_errors=True)
    return res


COLS = ("ran", "passed", "failed", "errors", "skipped")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", required=True, help="upstream's mooncake-pg/tests folder")
    ap.add_argument("--python", required=True, help="the environment's python")
    ap.add_argument("--filter", default="CPU", help="unittest -k pattern (default CPU; '' runs all)")
    ap.add_argument("--files", default="", help="comma-separated file names (default: all test*.py)")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--logs", default="", help="keep each file's output in this folder")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per file")
    a = ap.parse_args()
    files = [f for f in a.files.split(",") if f] or test_files(a.tests)
    rows = []
    print(f"{'file':40} {'ran':>4} {'pass':>5} {'fail':>5} {'err':>4} {'skip':>5} {'rc':>4} {'s':>7}  failing")
    for name in files:
        r = run_file(name, a.tests, a.python, a.filter, a.timeout, a.logs or None)
        rows.append(r)
        print(f"{name:40} {r['ran']:4} {r['passed']:5} {r['failed']:5} {r['errors']:4} {r['skipped']:5} "
              f"{r['rc']:4} {r['seconds']:7}  {' '.join(r['failures'])}", flush=True)
    tot = {k: sum(r[k] for r in rows) for k in COLS}
    print(f"{'total':40} {tot['ran']:4} {tot['passed']:5} {tot['failed']:5} {tot['errors']:4} {tot['skipped']:5}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"python": a.python, "filter": a.filter, "files": rows, "total": tot}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
