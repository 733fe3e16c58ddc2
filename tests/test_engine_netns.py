"""bench/engine_netns.py: the transfer engine's tcp transport between two network namespaces,
beside the TCP bound measured in the same rounds (issue 34). Checks the run's shape, never its
speed: every row has our figure, both bounds and every round, for each block and operation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_engine_netns_reports_ours_beside_the_tcp_bound(tmp_path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, "bench/engine_netns.py", "--blocks", "1M",
                        "--rounds", "2", "--duration", "1", "--upstream", "none",
                        "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["op"], r["block"]) for r in rows] == [("write", 1 << 20), ("read", 1 << 20)]
    for r in rows:
        assert len(r["rounds"]) == 2
        for rnd in r["rounds"]:
            assert set(rnd) == {"ours", "tcp1", "tcp4"}
            assert all(v > 0 for v in rnd.values())
        assert r["bound"] == max(r["tcp1"], r["tcp4"])
    table = [line for line in p.stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| op | block | ours | TCP 1 conn | TCP 4 conns | ours %tcp |")
    assert len(table) == 1 + len(rows)


def test_engine_netns_zerocopy_bound(tmp_path):
    """--zerocopy times the bound's sender with MSG_ZEROCOPY too: its columns are in every round
    and the kernel's completions were counted (how many it copied anyway is the host's to say)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, "bench/engine_netns.py", "--blocks", "1M", "--ops", "write",
                        "--rounds", "1", "--duration", "1", "--upstream", "none", "--zerocopy",
                        "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    (rnd,) = row["rounds"]
    assert set(rnd) == {"ours", "tcp1", "tcp4", "tcp1zc", "tcp4zc"}
    assert all(v > 0 for v in rnd.values())
    assert row["bound"] == max(row["tcp1"], row["tcp4"], row["tcp1zc"], row["tcp4zc"])
    assert len(doc["zerocopy_sends"]) == 2
    for done, copied in doc["zerocopy_sends"]:
        assert done > 0 and 0 <= copied <= done
    assert "MSG_ZEROCOPY: the kernel reported" in p.stdout
    table = [line for line in p.stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| op | block | ours | TCP 1 conn | TCP 4 conns | TCP zc 1 / 4 conns |")
