"""Dummy clients (upstream's setup_dummy) with real processes: a mooncake_master, a
mooncake_client process (the real client: it owns the memory and serves dummies on its --port),
and dummy clients in processes of their own. What a dummy puts lands in the real client's
segment and another dummy process reads it back byte for byte; a dummy detaching is seen by the
real client; no real client, a second setup, bad sizes and a wrong or missing token are clear
errors; a dummy whose real client is gone says so."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import free_port, go_command, run_child, stop  # noqa: E402
from test_store import Master  # noqa: E402

MB = 1024 * 1024
TOKEN = "dummy-test-token-0123456789abcdef"


def env(**kv) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("MC_AUTH_", "MC_TLS_"))}
    e.update({k: v for k, v in kv.items() if v is not None})
    return e


class RealClient:
    """mooncake_client on a free service port; its log goes to a file the test reads."""

    def __init__(self, master: str, tmp_path, e: dict | None = None, extra: tuple = ()):
        self.log_path = tmp_path / f"real-client-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [go_command("mooncake_client"), f"--master_server_address={master}", "--host=127.0.0.1",
             "--port=0", "--global_segment_size=32MB", *extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=e or env())
        line = self.proc.stdout.readline()
        m = re.match(r"MOONCAKE_CLIENT_READY segment=(\S+) service=(\S+)$", line.strip())
        if not m:
            stop(self.proc)
            raise RuntimeError(f"mooncake_client did not start: {line!r}\n{self.log_path.read_text()[-2000:]}")
        self.segment, self.service = m.groups()

    def logged(self, pattern: str, timeout: float = 10) -> re.Match:
        deadline = time.time() + timeout
        while True:
            m = re.search(pattern, self.log_path.read_text())
            if m or time.time() > deadline:
                assert m, f"{pattern!r} not in the real client's log:\n{self.log_path.read_text()[-3000:]}"
                return m
            time.sleep(0.1)

    def stop(self):
        stop(self.proc)
        self.log.close()


CHILD = r"""
import json, sys
import torch
from mooncake import _native
from mooncake.store import MooncakeDistributedStore
spec = json.loads(sys.argv[1])

def value(i):
    n = [1, 100, 4096, 65537, 1 << 20, 3 << 20][i % 6]
    pattern = bytes((j * 131 + i * 7 + 3) % 256 for j in range(65536))
    return (pattern * (n // 65536 + 1))[:n]

def tensor(i):
    g = torch.Generator().manual_seed(i)
    return (torch.randn(3, 5, 7, generator=g) * 100).to([torch.float16, torch.int32, torch.bfloat16][i % 3])

s = MooncakeDistributedStore()
rc = s.setup_dummy(spec["pool"], spec["buf"], spec["service"])
res = {"setup": rc, "error": _native.last_error() if rc else "", "ops": {}}
if rc == 0:
    res["second_setup"] = s.setup_dummy(spec["pool"], spec["buf"], spec["service"])
    res["health"] = s.health_check()
    for op in spec["ops"]:
        if op == "put":
            res["ops"]["put"] = [s.put(f"d{i}", value(i)) for i in range(12)]
            res["ops"]["put_batch"] = s.put_batch([f"b{i}" for i in range(4)], [value(i + 1) for i in range(4)])
            res["ops"]["put_tensor"] = [s.put_tensor(f"t{i}", tensor(i)) for i in range(3)]
            res["ops"]["segments"] = sorted({r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                                             for i in range(12) for r in s.get_replica_desc(f"d{i}")})
        elif op == "get":
            res["ops"]["get"] = [s.get(f"d{i}") == value(i) for i in range(12)]
            res["ops"]["get_batch"] = [g == value(i + 1) for i, g in enumerate(s.get_batch([f"b{i}" for i in range(4)]))]
            res["ops"]["get_tensor"] = [bool(torch.equal(s.get_tensor(f"t{i}"), tensor(i))) for i in range(3)]
        elif op == "pool":
            a = s.alloc_from_mem_pool(spec["pool"] // 2)
            b = s.alloc_from_mem_pool(spec["pool"] // 2)
            c = s.alloc_from_mem_pool(4096)  # over mem_pool_size
            res["ops"]["pool"] = [a != 0, b != 0, c]
        elif op == "pool_register":
            # upstream's dummy clients register alloc_from_mem_pool's memory before zero-copy calls
            import ctypes
            n = 1 << 20
            p, q = s.alloc_from_mem_pool(n), s.alloc_from_mem_pool(n)
            ctypes.memmove(p, value(4), n)
            res["ops"]["pool_register"] = [
                s.register_buffer(p, n), s.register_buffer(q, n), s.register_buffer(p + 4096, 4096),
                s.put_from("pooled", p, n), s.get_into("pooled", q, n), ctypes.string_at(q, n) == value(4),
                s.unregister_buffer(q), s.unregister_buffer(q), s.register_buffer(q, n), s.register_buffer(q, n),
                s.get_into("pooled", q, n), ctypes.string_at(q, n) == value(4), s.unregister_buffer(p)]
        elif op == "wait":
            print("WAITING", flush=True)
            sys.stdin.readline()
        elif op == "put_after":
            res["ops"]["put_after"] = s.put("after", b"x" * 1000)
            res["ops"]["get_after"] = s.get("after") == b"x" * 1000
    s.close()
print("RESULT " + json.dumps(res), flush=True)
"""


def dummy(service: str, ops=(), pool=64 * MB, buf=16 * MB, e: dict | None = None, timeout=120) -> dict:
    spec = {"service": service, "ops": list(ops), "pool": pool, "buf": buf}
    return run_child(CHILD, spec, e or env(), timeout, "dummy client")


@pytest.fixture
def cluster(tmp_path):
    m = Master("--client_ttl=3")
    rc = RealClient(m.addr, tmp_path)
    yield m, rc
    rc.stop()
    m.stop()


def test_dummies_put_into_the_real_clients_memory_and_read_each_other(cluster):
    m, real = cluster
    w = dummy(real.service, ["put", "pool"])
    assert w["setup"] == 0, w
    assert w["second_setup"] == -600 and w["health"] == 0, w
    ops = w["ops"]
    assert ops["put"] == [0] * 12 and ops["put_batch"] == 0 and ops["put_tensor"] == [0] * 3, ops
    # The dummy owns no segment: every copy is in the real client's memory.
    assert ops["segments"] == [real.segment], (ops["segments"], real.segment)
    # mem_pool_size bounds alloc_from_mem_pool.
    assert ops["pool"] == [True, True, 0], ops["pool"]
    real.logged(r"dummy client pid \d+ from 127\.0\.0\.1:\d+ attached \(mem_pool_size=67108864, "
                r"local_buffer_size=16777216; 1 attached\)")
    real.logged(r"detached \(0 attached\)")
    # Another dummy process reads everything back, byte for byte.
    r = dummy(real.service, ["get"])
    assert r["setup"] == 0, r
    assert r["ops"]["get"] == [True] * 12 and r["ops"]["get_batch"] == [True] * 4, r["ops"]
    assert r["ops"]["get_tensor"] == [True] * 3, r["ops"]


def test_register_buffer_on_mem_pool_memory(cluster):
    # alloc_from_mem_pool's memory is registered already; registering exactly an allocation is
    # accepted (upstream's dummy clients do it before put_from / get_into), part of one is an
    # overlap; unregister_buffer releases it once and register_buffer registers it again.
    _, real = cluster
    r = dummy(real.service, ["pool_register"], pool=8 * MB)
    assert r["setup"] == 0, r
    assert r["ops"]["pool_register"] == [0, 0, -600, 0, 1 << 20, True, 0, -600, 0, 0, 1 << 20, True, 0], r["ops"]


def test_setup_dummy_errors(cluster, tmp_path):
    _, real = cluster
    from mooncake.store import MooncakeDistributedStore
    from mooncake._native import last_error
    s = MooncakeDistributedStore()
    closed = f"127.0.0.1:{free_port()}"
    assert s.setup_dummy(64 * MB, 16 * MB, closed) == -600
    assert f"no real client at {closed}" in last_error() and "mooncake_client --port" in last_error()
    with pytest.raises(ValueError, match="mem_pool_size"):
        s.setup_dummy("12 parsecs", 16 * MB, real.service)
    with pytest.raises(ValueError, match="local_buffer_size"):
        s.setup_dummy(64 * MB, "50%", real.service)
    with pytest.raises(TypeError, match="host:port"):
        s.setup_dummy(64 * MB, 16 * MB, 50052)
    # The master's RPC port is not a real client.
    res = dummy(f"127.0.0.1:{cluster[0].rpc_port}", timeout=60)
    assert res["setup"] == -600 and "is not a mooncake real client" in res["error"], res
    assert s.health_check() == 1  # nothing was set up


def test_dummy_goes_on_when_its_real_client_goes(cluster):
    m, real = cluster
    p = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(
        {"service": real.service, "ops": ["wait", "put_after"], "pool": 8 * MB, "buf": 8 * MB})],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        assert p.stdout.readline().strip() == "WAITING"
        real.logged(r"1 attached\)")
        # A second real client holds the memory the dummy's next put lands in.
        other = RealClient(m.addr, real.log_path.parent)
        real.stop()
        time.sleep(0.5)
        p.stdin.write("go\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=60)
        res = json.loads(out.split("RESULT ", 1)[1])
        assert res["ops"]["put_after"] == 0 and res["ops"]["get_after"], res
        assert f"the real client at {real.service} went away" in err, err[-3000:]
        other.stop()
    finally:
        stop(p)


def test_real_client_with_a_token(tmp_path):
    m = Master("--client_ttl=3", env=env(MC_AUTH_TOKEN=TOKEN))
    real = RealClient(m.addr, tmp_path, env(MC_AUTH_TOKEN=TOKEN))
    try:
        res = dummy(real.service, ["put"])
        assert res["setup"] == -600 and "requires authentication: set MC_AUTH_TOKEN" in res["error"], res
        res = dummy(real.service, ["put"], e=env(MC_AUTH_TOKEN="another-token-0123456789abcdef"))
        assert res["setup"] == -600 and "refused" in res["error"] and "same MC_AUTH_TOKEN" in res["error"], res
        real.logged(r"refused 127\.0\.0\.1:\d+")
        res = dummy(real.service, ["put", "get"], e=env(MC_AUTH_TOKEN=TOKEN))
        assert res["setup"] == 0 and res["ops"]["put"] == [0] * 12 and res["ops"]["get"] == [True] * 12, res
    finally:
        real.stop()
        m.stop()
