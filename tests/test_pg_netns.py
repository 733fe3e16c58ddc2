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
