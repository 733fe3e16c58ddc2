"""scripts/upstream_pg_suite.py, the driver that runs upstream Mooncake PG's tests
(mooncake-pg/tests) against an environment (issue 33), run on a folder of small files written
here in upstream's style (unittest classes named ...CPU / ...CUDA, a helper module beside them,
`python -m unittest -k CPU`): each file in a network namespace of its own with a veth pair up,
the package under test the installed one, and the counts it prints exact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "scripts", "upstream_pg_suite.py")

HELPER = '''
import socket
import unittest


class CPUCase(unittest.TestCase):
    device_type = "cpu"


def addresses():
    import subprocess
    return subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
'''

ALPHA = '''
import os
import unittest

import torch
import torch.distributed as dist
from mooncake import pg

from pg_helpers import CPUCase, addresses


class _Mixin:
    def test_group_of_one(self):
        store = dist.HashStore()
        dist.init_process_group("mooncake-cpu", store=store, rank=0, world_size=1,
                                pg_options=pg.MooncakeBackendOptions(1))
        x = torch.ones(3)
        dist.all_reduce(x)
        dist.destroy_process_group()
        self.assertEqual(x.tolist(), [1.0, 1.0, 1.0])

    def test_veth_is_up(self):
        self.assertIn("10.213.0.1", addresses())

    def test_fails(self):
        self.assertEqual(1, 2)

    def test_subtests_fail_twice_count_once(self):
        for i in range(2):
            with self.subTest(i=i):
                raise RuntimeError("boom")

    @unittest.skip("not here")
    def test_skipped(self):
        pass


class TestAlphaCPU(_Mixin, CPUCase):
    pass


class TestAlphaCUDA(_Mixin, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise unittest.SkipTest("needs CUDA")


if __name__ == "__main__":
    unittest.main()
'''

BROKEN = '''
import unittest
from mooncake.pg import NoSuchName


class TestBrokenCPU(unittest.TestCase):
    def test_never(self):
        pass
'''


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_driver_counts_upstream_style_files(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "pg_helpers.py").write_text(textwrap.dedent(HELPER))
    (tests / "test_pg_alpha.py").write_text(textwrap.dedent(ALPHA))
    (tests / "test_pg_broken.py").write_text(textwrap.dedent(BROKEN))
    (tests / "README.md").write_text("not a test\n")
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, DRIVER, "--tests", str(tests), "--python", sys.executable,
                        "--json", str(out), "--timeout", "300"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    rows = {r["file"]: r for r in data["files"]}
    assert set(rows) == {"test_pg_alpha.py", "test_pg_broken.py"}
    got = {f: (r["ran"], r["passed"], r["failed"], r["errors"], r["skipped"]) for f, r in rows.items()}
    # -k CPU: the five tests of the CPU class (the CUDA class is filtered out).
    assert got["test_pg_alpha.py"] == (5, 2, 1, 1, 1), rows["test_pg_alpha.py"]
    assert sorted(rows["test_pg_alpha.py"]["failures"]) == ["test_fails", "test_subtests_fail_twice_count_once"]
    # A file that does not import: unittest reports it as one failed test of its own.
    assert got["test_pg_broken.py"][0] == 1 and got["test_pg_broken.py"][3] == 1, rows["test_pg_broken.py"]
    assert data["total"]["ran"] == 6 and data["total"]["passed"] == 2, data["total"]
    assert "test_pg_alpha.py" in p.stdout and p.stdout.splitlines()[-1].startswith("total")

    # --filter '' runs every class: the CUDA class's setUpClass skips it (unittest counts one skip
    # for the class, and no test run).
    # (and --python relative to the current folder, as `make upstream-pg-suite` passes it)
    p = subprocess.run([sys.executable, DRIVER, "--tests", str(tests), "--python",
                        os.path.relpath(sys.executable, ROOT), "--files", "test_pg_alpha.py",
                        "--filter", "", "--json", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(out.read_text())["files"][0]
    assert (r["ran"], r["passed"], r["failed"], r["errors"], r["skipped"]) == (5, 2, 1, 1, 2), r
