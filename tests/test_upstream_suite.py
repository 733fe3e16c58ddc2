"""scripts/upstream_suite.py, the driver that runs upstream's wheel tests against an environment
(issue 32), run on a folder of small test files written here in upstream's two styles: each file
in its own network namespace with an HTTP metadata server on 8080 and a master on 50051, unittest
files as `python FILE -v`, pytest files through pytest, and the counts it prints exact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(ROOT, "scripts", "upstream_suite.py")

UNITTEST_FILE = '''
import os, unittest
from mooncake.store import MooncakeDistributedStore

class StoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = MooncakeDistributedStore()
        rc = cls.s.setup("127.0.0.1", os.environ["MC_METADATA_SERVER"], 16 << 20, 4 << 20, "tcp", "",
                         "127.0.0.1:50051")
        assert rc == 0, rc

    def test_put_get(self):
        self.assertEqual(self.s.put("k", b"v"), 0)
        self.assertEqual(self.s.get("k"), b"v")

    def test_lease_env(self):
        self.assertEqual(os.environ["DEFAULT_KV_LEASE_TTL"], "500")

    def test_fails(self):
        self.assertEqual(1, 2)

    def test_subtests_fail_twice_count_once(self):
        for i in range(2):
            with self.subTest(i=i):
                raise RuntimeError("boom")

    @unittest.skip("not here")
    def test_skipped(self):
        pass

if __name__ == "__main__":
    unittest.main()
'''

PYTEST_FILE = '''
import pytest, urllib.error, urllib.request

@pytest.mark.parametrize("n", [1, 2, 3])
def test_param(n):
    assert n != 3

def test_metadata_server_answers():
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen("http://127.0.0.1:8080/metadata?key=nothing", timeout=5)
    assert e.value.code == 404
'''

BROKEN_FILE = '''
import unittest
from mooncake.store import NoSuchName

if __name__ == "__main__":
    unittest.main()
'''


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_driver_counts_each_style_in_its_own_namespace(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_store_style.py").write_text(textwrap.dedent(UNITTEST_FILE))
    (tests / "test_pytest_style.py").write_text(textwrap.dedent(PYTEST_FILE))
    (tests / "test_broken_import.py").write_text(textwrap.dedent(BROKEN_FILE))
    (tests / "test_transfer_on_cuda.py").write_text("raise SystemExit(3)\n")
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, DRIVER, "--tests", str(tests), "--python", sys.executable,
                        "--json", str(out), "--timeout", "300"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "test_transfer_on_cuda.py" in p.stdout and "left out: GPU" in p.stdout
    rows = {r["file"]: r for r in json.loads(out.read_text())["files"]}
    assert set(rows) == {"test_store_style.py", "test_pytest_style.py", "test_broken_import.py"}
    got = {f: (r["ran"], r["passed"], r["failed"], r["errors"], r["skipped"]) for f, r in rows.items()}
    assert got["test_store_style.py"] == (5, 2, 1, 1, 1), rows["test_store_style.py"]
    assert sorted(rows["test_store_style.py"]["failures"]) == ["test_fails", "test_subtests_fail_twice_count_once"]
    assert got["test_pytest_style.py"] == (4, 3, 1, 0, 0), rows["test_pytest_style.py"]
    assert got["test_broken_import.py"] == (0, 0, 0, 0, 0) and rows["test_broken_import.py"]["rc"] != 0
