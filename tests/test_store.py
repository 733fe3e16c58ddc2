"""Tests of mooncake.store (MooncakeDistributedStore) against a real mooncake_master, with
extra client processes where a test needs another host-like participant."""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import tempfile
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import mooncake  # noqa: F401
except ImportError:  # running from the source tree
    sys.path.insert(0, os.path.join(ROOT, "python"))

from conftest import free_port, go_command, stop  # noqa: E402
from mooncake.store import MooncakeDistributedStore, ReplicateConfig, ErrorCode, parse_size  # noqa: E402

MB = 1024 * 1024


def master_bin() -> str:
    try:
        return go_command("mooncake_master")
    except FileNotFoundError:
        out = os.path.join(ROOT, "build", "bin", "mooncake_master")
        subprocess.run(["go", "build", "-o", out, "./cmd/mooncake_master"], cwd=ROOT, check=True)
        return out


class Master:
    """A mooncake_master on free ports with flags (env: its environment, default ours).

    The master picks its own ports (0) and reports them on its READY line: a port chosen here and
    bound there could be taken in between by any other process on the host."""

    def __init__(self, *flags: str, env: dict | None = None):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [master_bin(), "--rpc_port=0", "--metrics_port=0",
             "--rpc_address=127.0.0.1", "--enable_metric_reporting=false", *flags],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        deadline = time.time() + 20
        while True:
            line = self.proc.stdout.readline()
            if not line or time.time() > deadline:
                code = self.proc.poll()
                stop(self.proc)
                self.log.seek(0)
                raise RuntimeError(f"mooncake_master {'exited with ' + str(code) if code is not None else 'never became ready'}: "
                                   f"{self.log.read()[-3000:]}")
            if line.startswith("MOONCAKE_MASTER_READY"):
                ports = dict(kv.split("=") for kv in line.split()[1:])
                self.rpc_port, self.metrics_port = int(ports["rpc_port"]), int(ports["metrics_port"])
                break
        self.addr = f"127.0.0.1:{self.rpc_port}"

    def http(self, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str) -> float:
        for line in self.http("/metrics").splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def stop(self):
        stop(self.proc)


@pytest.fixture
def start_master():
    masters = []

    def start(*flags):
        m = Master(*flags)
        masters.append(m)
        return m
    yield start
    for m in masters:
        m.stop()


@pytest.fixture
def master(start_master):
    return start_master("--client_ttl=2")


def new_store(master, segment=64 * MB, buffer=16 * MB) -> MooncakeDistributedStore:
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, buffer, "tcp", "", master.addr)
    assert rc == 0, f"setup failed: {rc}"
    return s


@pytest.fixture
def store(master):
    s = new_store(master)
    yield s
    s.close()


def run_peer(master, code: str, wait: bool = True, **kw) -> subprocess.Popen:
    """Runs a Python client in another process (another participant of the store)."""
    prog = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.join(ROOT, "python")!r})
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", {master.addr!r}) == 0
        print("HOST", s.get_hostname(), flush=True)
    """) + textwrap.dedent(code)
    p = subprocess.Popen([sys.executable, "-c", prog], stdout=subprocess.PIPE, text=True, **kw)
    if wait:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0, out
        p.output = out
    return p


# ---- basic API ----------------------------------------------------------------------------

def test_put_get_exist_size_remove(store):
    assert store.health_check() == 0
    assert store.put("k1", b"hello") == 0
    assert store.get("k1") == b"hello"
    assert store.get("missing") == b""
    assert store.is_exist("k1") == 1
    assert store.is_exist("missing") == 0
    assert store.get_size("k1") == 5
    assert store.get_size("missing") == ErrorCode.OBJECT_NOT_FOUND
    # write-once: a second put succeeds without rewriting
    assert store.put("k1", b"other") == 0
    assert store.get("k1") == b"hello"
    big = os.urandom(3 * MB + 5)
    assert store.put("big", bytearray(big)) == 0
    assert store.get("big") == big
    assert store.put("mv", memoryview(big)[10:20]) == 0
    assert store.get("mv") == big[10:20]
    # the get granted a lease: a plain remove must wait, a forced one not
    assert store.remove("k1") == ErrorCode.OBJECT_HAS_LEASE
    assert store.remove("k1", force=True) == 0
    assert store.remove("k1") == ErrorCode.OBJECT_NOT_FOUND
    assert store.is_exist("k1") == 0


def test_setup_variants_hostname_health(master):
    s = MooncakeDistributedStore()
    assert s.health_check() == 1
    assert s.get_hostname() == ""
    rc = s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                  "global_segment_size": "32 MB", "local_buffer_size": "8MB", "protocol": "tcp",
                  "device_name": "", "master_server_address": master.addr})
    assert rc == 0
    assert re.fullmatch(r"127\.0\.0\.1:\d+", s.get_hostname())
    assert s.health_check() == 0
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", MB, MB, "tcp", "", master.addr) < 0  # twice
    assert s.close() == 0
    assert s.health_check() == 1
    assert s.put("x", b"y") < 0  # closed
    assert s.close() == 0
    assert MooncakeDistributedStore().setup({"bogus": 1}) == ErrorCode.INVALID_PARAMS  # as upstream: a code
    assert parse_size("4 GB") == 4 << 30 and parse_size("512MB") == 512 << 20 and parse_size(7) == 7


def test_batches(store):
    keys = [f"b{i}" for i in range(10)]
    vals = [os.urandom(100 + i * 1000) for i in range(10)]
    assert store.put_batch(keys, vals) == 0
    assert store.get_batch(keys + ["nope"]) == vals + [b""]
    assert store.batch_is_exist(keys[:2] + ["nope"]) == [1, 1, 0]
    assert store.put_batch(["ok", ""], [b"a", b"b"]) == ErrorCode.INVALID_KEY
    assert store.get("ok") == b"a"
    res = store.batch_remove(["b0", "b1", "nope"], force=True)
    assert res == [0, 0, ErrorCode.OBJECT_NOT_FOUND]
    assert store.batch_is_exist(["b0", "b2"]) == [0, 1]
    assert store.get_batch([]) == []


@pytest.mark.parametrize("allocator", ["c", "ctypes"])
def test_gets_into_new_bytes(store, monkeypatch, allocator):
    """get and get_batch read values straight into new bytes objects through an allocator the
    library calls per value: the C one of mooncake._bytes_alloc (built by setup.py) or, where it
    was not built, a ctypes callback. Both give exact values, b"" for a missing key, and bytes
    that only the returned list holds (a reference too many would leak every value)."""
    from mooncake import _store_abi
    if allocator == "c":
        if "site-packages" in _store_abi.__file__:
            assert _store_abi._C_BYTES_ALLOC, "the installed package has no mooncake._bytes_alloc"
        elif not _store_abi._C_BYTES_ALLOC:
            pytest.skip("a source tree without the built extension (pip install . builds it)")
    else:
        monkeypatch.setattr(_store_abi, "_C_BYTES_ALLOC", 0)
    keys = [f"nb-{allocator}-{i}" for i in range(70)]
    vals = [os.urandom(1 + i * 977) for i in range(70)]
    assert store.put_batch(keys, vals) == 0
    for _ in range(3):
        got = store.get_batch(keys[:30] + ["nope"] + keys[30:])
        assert got == vals[:30] + [b""] + vals[30:]
        # held by the list, the loop's name and getrefcount's argument: 3
        assert [sys.getrefcount(v) for v in got if v] == [3] * 70
        del got
    assert store.get(keys[5]) == vals[5]
    assert store.get("nope") == b""
    one = store.get(keys[69])
    assert one == vals[69] and sys.getrefcount(one) == 2


def test_put_parts(store):
    assert store.put_parts("p", b"ab", bytearray(b"cd"), memoryview(b"ef")) == 0
    assert store.get("p") == b"abcdef"


def test_zero_copy_buffers(store):
    n = 2 * MB
    src = (ctypes.c_char * n).from_buffer_copy(os.urandom(n))
    dst = (ctypes.c_char * n)()
    sp, dp = ctypes.addressof(src), ctypes.addressof(dst)
    assert store.register_buffer(sp, n) == 0
    assert store.register_buffer(dp, n) == 0
    assert store.put_from("zc", sp, n) == 0
    assert store.get_into("zc", dp, n) == n
    assert bytes(dst) == bytes(src)
    assert store.get_into("zc", dp, 10) == ErrorCode.BUFFER_OVERFLOW
    assert store.get_into("missing", dp, n) == ErrorCode.OBJECT_NOT_FOUND
    half = n // 2
    assert store.batch_put_from(["z1", "z2"], [sp, sp + half], [half, half]) == [0, 0]
    ctypes.memset(dp, 0, n)
    assert store.batch_get_into(["z1", "z2", "nope"], [dp + half, dp, dp], [half, half, half]) == \
        [half, half, ErrorCode.OBJECT_NOT_FOUND]
    assert bytes(dst) == bytes(src)[half:] + bytes(src)[:half]
    assert store.unregister_buffer(sp) == 0
    assert store.unregister_buffer(dp) == 0
    assert store.unregister_buffer(dp) < 0
    # unregistered memory still works (staged), just not zero-copy
    assert store.put_from("zc2", sp, 1000) == 0
    assert store.get("zc2") == bytes(src)[:1000]


def test_remove_by_regex_and_remove_all(store):
    for i in range(5):
        assert store.put(f"user/{i}", b"x") == 0
    assert store.put("sys/0", b"y", ReplicateConfig(with_hard_pin=True)) == 0
    assert store.remove_by_regex("^user/[0-2]$") == 3
    assert store.remove_by_regex("(") == ErrorCode.INVALID_PARAMS
    assert store.remove("sys/0") == ErrorCode.OBJECT_HAS_LEASE  # hard pin needs force
    assert store.remove_all() == 3
    assert store.is_exist("sys/0") == 0


def test_tensors(store):
    torch = pytest.importorskip("torch")
    cases = {
        "f32": torch.randn(3, 4),
        "bf16": torch.randn(17).to(torch.bfloat16),
        "f16": torch.randn(2, 2, 2).half(),
        "i64": torch.arange(10, dtype=torch.int64),
        "u8": torch.randint(0, 255, (5,), dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.empty(0, 3),
        "noncontig": torch.randn(4, 6).t(),
    }
    for k, t in cases.items():
        assert store.put_tensor(k, t) == 0, k
        got = store.get_tensor(k)
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(got, t), k
    nested = {"obs": torch.randn(2, 3), "act": [torch.tensor([1, 2]), (torch.ones(1),)], "r": torch.zeros(4)}
    assert store.put_tensor("nested", nested) == 0
    got = store.get_tensor("nested")
    assert torch.equal(got["obs"], nested["obs"]) and torch.equal(got["act"][0], nested["act"][0])
    assert isinstance(got["act"][1], tuple) and torch.equal(got["act"][1][0], torch.ones(1))
    assert store.get_tensor("missing") is None
    ts = [torch.randn(i + 1, 2) for i in range(4)]
    assert store.batch_put_tensor([f"t{i}" for i in range(4)], ts) == [0] * 4
    out = store.batch_get_tensor([f"t{i}" for i in range(4)] + ["missing"])
    assert all(torch.equal(a, b) for a, b in zip(out, ts)) and out[-1] is None
    with pytest.raises(TypeError):
        store.put_tensor("bad", {"a": 1})


# ---- replicas, eviction, leases, expiry ------------------------------------------------------

def test_replicas_survive_a_clients_close(master, store):
    me = store.get_hostname()
    p = run_peer(master, f"""
        assert s.put("two", b"R" * 100000, ReplicateConfig(replica_num=2)) == 0
        assert s.put("mine", b"M" * 1000, ReplicateConfig(preferred_segment=s.get_hostname())) == 0
        assert s.put("yours", b"Y" * 1000, ReplicateConfig(preferred_segment={me!r})) == 0
        assert s.close() == 0
    """)
    assert store.get("two") == b"R" * 100000
    assert store.get("yours") == b"Y" * 1000
    assert store.get("mine") == b""  # its only replica left with the closed client
    assert store.is_exist("mine") == 0


def test_eviction_under_pressure_keeps_hard_pins(start_master):
    m = start_master("--eviction_ratio=0.1")
    s = new_store(m, segment=8 * MB, buffer=4 * MB)
    try:
        pinned = {f"pin{i}": os.urandom(MB) for i in range(3)}
        for k, v in pinned.items():
            assert s.put(k, v, ReplicateConfig(with_hard_pin=True)) == 0
        for i in range(40):
            assert s.put(f"v{i}", os.urandom(MB // 2)) == 0, i
        for k, v in pinned.items():
            assert s.get(k) == v
        assert s.is_exist("v0") == 0  # the oldest went first
        assert s.is_exist("v39") == 1
        assert m.metric("mooncake_master_eviction_total") > 0
        # larger than the segment: refused, nothing evicted for it
        assert s.put("huge", b"x" * (9 * MB)) == ErrorCode.NO_AVAILABLE_HANDLE
    finally:
        s.close()


def test_lease_blocks_remove(start_master):
    m = start_master("--default_kv_lease_ttl=800")
    s = new_store(m)
    try:
        assert s.put("k", b"v") == 0
        assert s.get("k") == b"v"
        assert s.remove("k") == ErrorCode.OBJECT_HAS_LEASE
        time.sleep(1.0)
        assert s.remove("k") == 0
    finally:
        s.close()


def test_client_expiry_after_client_ttl(master, store):
    p = run_peer(master, """
        assert s.put("gone", b"G" * 5000, ReplicateConfig(preferred_segment=s.get_hostname())) == 0
        assert s.put("kept", b"K" * 5000, ReplicateConfig(replica_num=2)) == 0
        print("PUT", flush=True)
        time.sleep(120)
    """, wait=False)
    try:
        for line in p.stdout:
            if line.startswith("PUT"):
                break
        assert store.is_exist("gone") == 1
        p.send_signal(signal.SIGKILL)
        p.wait()
        t0 = time.time()
        while store.is_exist("gone") == 1:
            assert time.time() - t0 < 10, "killed client's replicas still listed after client_ttl"
            time.sleep(0.2)
        assert time.time() - t0 >= 1.0  # not before client_ttl (2 s) minus the last ping
        assert store.get("kept") == b"K" * 5000
    finally:
        stop(p)


# ---- bad input and failures ------------------------------------------------------------------

def test_bad_input(master, store):
    assert store.put("", b"x") == ErrorCode.INVALID_KEY
    assert store.put("k" * 5000, b"x") == ErrorCode.INVALID_KEY
    assert store.get("") == b""
    assert store.is_exist("") == ErrorCode.INVALID_KEY
    assert store.put("empty", b"") == ErrorCode.INVALID_PARAMS
    assert store.put("big", b"x" * (65 * MB)) == ErrorCode.NO_AVAILABLE_HANDLE
    assert store.put("r", b"x", ReplicateConfig(replica_num=0)) == ErrorCode.INVALID_PARAMS
    assert store.put("r", b"x", ReplicateConfig(replica_num=5)) == ErrorCode.NO_AVAILABLE_HANDLE
    with pytest.raises(TypeError):
        store.put(123, b"x")


def test_master_down_gives_error_within_timeout(start_master):
    port = free_port()
    s = MooncakeDistributedStore()
    t0 = time.time()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", MB, MB, "tcp", "", f"127.0.0.1:{port}") in (
        ErrorCode.RPC_FAIL, ErrorCode.RPC_TIMEOUT)
    assert time.time() - t0 < 15
    m = start_master()
    s = new_store(m, segment=4 * MB, buffer=MB)
    assert s.put("k", b"v") == 0
    m.stop()
    t0 = time.time()
    assert s.put("k2", b"v") in (ErrorCode.RPC_FAIL, ErrorCode.RPC_TIMEOUT)
    assert s.get("k") == b""
    assert s.health_check() == 2
    assert time.time() - t0 < 30
    s.close()


def test_client_killed_mid_put_leaves_no_half_visible_key(master, store):
    p = run_peer(master, """
        import os
        i = 0
        while True:
            v = bytes([i % 251]) * (4 << 20)
            s.put(f"kill/{i}", v, ReplicateConfig(replica_num=2))
            i += 1
            if i == 3:
                print("RUNNING", flush=True)
    """, wait=False)
    try:
        for line in p.stdout:
            if line.startswith("RUNNING"):
                break
        time.sleep(0.3)
        p.send_signal(signal.SIGKILL)
        p.wait()
        keys = [k for k in master.http("/get_all_keys").splitlines() if k.startswith("kill/")]
        assert keys
        for k in keys:
            v = store.get(k)
            if v == b"":  # its only surviving replica went with the killed client
                continue
            i = int(k.split("/")[1])
            assert v == bytes([i % 251]) * (4 << 20), f"{k} is visible but incomplete"
        t0 = time.time()
        while master.metric("mooncake_master_pending_tasks") > 0:  # revoked at client expiry
            assert time.time() - t0 < 10
            time.sleep(0.2)
    finally:
        stop(p)


def test_garbage_on_grpc_port(master, store):
    for junk in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(4096), b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(64)):
        with socket.create_connection(("127.0.0.1", master.rpc_port), timeout=3) as c:
            c.sendall(junk)
            try:
                c.recv(1024)
            except OSError:
                pass
    assert master.proc.poll() is None
    assert store.health_check() == 0
    assert store.put("after-garbage", b"ok") == 0


# ---- admin HTTP and metrics ------------------------------------------------------------------

def test_admin_http(master, store):
    assert store.put("a/1", b"12345") == 0
    health = json.loads(master.http("/health"))
    assert health["status"] == "ok" and health["role"] == "leader"
    assert "a/1" in master.http("/get_all_keys").splitlines()
    q = json.loads(master.http("/query_key?key=a%2F1"))
    assert q["size"] == 5 and q["replicas"][0]["segment_name"] == store.get_hostname()
    assert store.get_hostname() in master.http("/get_all_segments").splitlines()
    assert "keys=1" in master.http("/metrics/summary")
    with pytest.raises(urllib.error.HTTPError):
        master.http("/query_key?key=nope")
