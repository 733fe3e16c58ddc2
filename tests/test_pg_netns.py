"""Two ranks in two network namespaces joined by a veth pair: two hosts as far as the
engine can tell (its host id includes the network namespace), so the process group moves its
bytes over tcp. The test makes the namespaces itself and removes them afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def two_hosts():
    if shutil.which("ip") is None:
        pytest.fail("the ip command is missing: `make setup` installs Debian's iproute2")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root")
    tag = uuid.uuid4().hex[:6]
    ns = [f"mc{tag}a", f"mc{tag}b"]
    veth = [f"mv{tag}a", f"mv{tag}b"]
    addrs = ["10.231.9.1", "10.231.9.2"]
    try:
        for n in ns:
            _ip("netns", "add", n)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for n, v, a in zip(ns, veth, addrs):
            _ip("link", "set", v, "netns", n)
            _ip("-n", n, "addr", "add", f"{a}/24", "dev", v)
            _ip("-n", n, "link", "set", v, "up")
            _ip("-n", n, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {e.stderr.decode().strip()}")
    yield list(zip(ns, addrs))
    for n in ns:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def test_core_ops_across_two_network_namespaces(two_hosts):
    (ns0, addr0), (ns1, _) = two_hosts
    port = 29517
    env = dict(os.environ, MC_TRANSFER_TIMEOUT="30")
    procs = [subprocess.Popen(["ip", "netns", "exec", ns, sys.executable,
                               os.path.join(HERE, "pg_netns_worker.py"), str(r), "2", addr0,
                               str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env)
             for r, ns in enumerate((ns0, ns1))]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append(out)
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r} failed:\n{out}"
        assert f"netns rank {r} OK" in out


@pytest.mark.parametrize("ranks", [2, 4])
def test_pgbench_netns_measures_the_tcp_bound(ranks, tmp_path):
    """bench/pgbench.py --netns: ranks in namespaces of their own (two on a veth pair, four on a
    bridge), and the raw TCP ring exchange of each op's bytes timed in the same rounds over 1 and
    4 connections, with each backend's share of it."""
    if shutil.which("ip") is None:
        pytest.fail("the ip command is missing: `make setup` installs Debian's iproute2")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root")
    import json

    out = tmp_path / "rows.json"
    bench = os.path.join(os.path.dirname(HERE), "bench", "pgbench.py")
    r = subprocess.run([sys.executable, bench, "--netns", "-g", str(ranks), "--collective", "all_reduce",
                        "-b", "8", "-e", "64K", "-f", "8192", "-n", "2", "-w", "1", "-r", "2", "-q",
                        "--json", str(out)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "%tcp" in r.stdout and "tcp1(us)" in r.stdout and "tcp4(us)" in r.stdout
    rows = json.loads(out.read_text())
    assert [row["size"] for row in rows] == [8, 65536]
    for row in rows:
        assert row["ranks"] == ranks
        each_way = int(row["count"] * 4 * 2 * (ranks - 1) / ranks)
        assert sorted(row["tcp"]) == ["1", "4"]
        for t in row["tcp"].values():
            assert t["bytes_each_way"] == each_way and len(t["rounds_us"]) == 2 and t["time_us"] > 0
        best = min(t["time_us"] for t in row["tcp"].values())
        for b in ("mooncake-cpu", "gloo"):
            assert row[b]["wrong"] == 0
            assert row[b]["pct_tcp"] == pytest.approx(100 * best / row[b]["time_us"])
