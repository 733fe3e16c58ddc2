"""Tenant namespaces (setup(..., tenant_id=...), mooncake_client --tenant_id for dummy clients):
clients of different tenants use the same keys without seeing each other's values, across the
whole API (bytes, batches, zero-copy, tensors, replica calls, removal); remove_by_regex and
remove_all stay inside the caller's tenant; a key that could name another tenant is refused;
a client of the same tenant in another process sees the tenant's values. A real master."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from store_fixtures import master  # noqa: F401
from test_store import MB, ROOT
from test_store_dummy import CHILD as DUMMY_CHILD, RealClient, env
from conftest import run_child
from mooncake.store import ErrorCode, MooncakeDistributedStore, last_error


def tenant_store(master, tenant):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MB, 8 * MB, "tcp", "", master.addr, tenant_id=tenant) == 0, last_error()
    return s


@pytest.fixture
def stores(master):
    ss = {t: tenant_store(master, t) for t in ("default", "alpha", "beta")}
    yield ss
    for s in ss.values():
        s.close()


def test_same_keys_in_three_tenants(stores):
    d, a, b = stores["default"], stores["alpha"], stores["beta"]
    for name, s in stores.items():
        assert s.put("k", name.encode() * 100) == 0
        assert s.put_batch(["b1", "b2"], [name.encode() + b"1", name.encode() + b"2"]) == 0
        assert s.put_tensor("t", torch.full((3, 4), float(len(name)))) == 0
    for name, s in stores.items():
        assert s.get("k") == name.encode() * 100
        assert s.get_batch(["b1", "b2"]) == [name.encode() + b"1", name.encode() + b"2"]
        assert torch.equal(s.get_tensor("t"), torch.full((3, 4), float(len(name))))
        assert s.get_size("k") == len(name) * 100 and s.is_exist("k") == 1
        buf = np.zeros(1000, dtype=np.uint8)
        assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
        assert s.get_into("k", buf.ctypes.data, buf.nbytes) == len(name) * 100
        assert bytes(buf[:len(name) * 100]) == name.encode() * 100
        s.unregister_buffer(buf.ctypes.data)
        assert len(s.get_replica_desc("k")) == 1
    # a key only one tenant has
    assert a.put("only-alpha", b"A") == 0
    assert a.is_exist("only-alpha") == 1 and b.is_exist("only-alpha") == 0 and d.is_exist("only-alpha") == 0
    assert b.get("only-alpha") == b"" and d.batch_is_exist(["only-alpha", "k"]) == [0, 1]
    # upsert replaces the caller's own value only
    assert b.upsert("k", b"new beta") == 0
    assert b.get("k") == b"new beta" and a.get("k") == b"alpha" * 100
    # batch_replica_clear answers with the caller's keys (ones not read: a read leases a key)
    for s in (a, b):
        assert s.put("clear-me", b"c") == 0
    assert a.batch_replica_clear(["clear-me", "missing"]) == ["clear-me"]
    assert a.is_exist("clear-me") == 0 and b.is_exist("clear-me") == 1


def test_removal_stays_in_the_tenant(stores):
    d, a, b = stores["default"], stores["alpha"], stores["beta"]
    for s in stores.values():
        for i in range(4):
            assert s.put(f"r/{i}", b"v") == 0
    assert a.remove_by_regex("^r/[01]$") == 2
    assert a.batch_is_exist([f"r/{i}" for i in range(4)]) == [0, 0, 1, 1]
    assert b.batch_is_exist([f"r/{i}" for i in range(4)]) == [1, 1, 1, 1]
    assert d.remove_all() == 4
    assert d.is_exist("r/3") == 0 and a.is_exist("r/3") == 1 and b.is_exist("r/3") == 1
    assert b.remove("r/0") == 0 and b.batch_remove(["r/1", "r/9"]) == [0, ErrorCode.OBJECT_NOT_FOUND]
    assert a.is_exist("r/2") == 1
    assert b.remove_all() == 2 and a.remove_all() == 2


def test_keys_that_could_name_another_tenant_are_refused(stores, master):
    d, a = stores["default"], stores["alpha"]
    assert a.put("secret", b"S") == 0
    forged = "\x1falpha\x1fsecret"
    assert d.get(forged) == b""
    assert d.put(forged, b"x") == ErrorCode.INVALID_KEY and "0x1f" in last_error()
    assert d.is_exist(forged) == ErrorCode.INVALID_KEY and d.remove(forged) == ErrorCode.INVALID_KEY
    assert d.batch_is_exist(["fine", forged]) == [ErrorCode.INVALID_KEY] * 2
    assert d.put_batch(["fine", forged], [b"1", b"2"]) == ErrorCode.INVALID_KEY
    assert d.is_exist("fine") == 0  # a batch with a bad key writes nothing
    assert a.get("secret") == b"S"
    for bad in ("a\x1fb", "t" * 65):
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 * MB, "tcp", "", master.addr, tenant_id=bad) == ErrorCode.INVALID_PARAMS
        assert "tenant_id" in last_error()


def test_another_process_of_the_tenant_reads_its_values(stores, master):
    a = stores["alpha"]
    assert a.put("shared", b"alpha's" * 1000) == 0
    prog = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "python")!r})
        from mooncake.store import MooncakeDistributedStore
        for tenant in ("alpha", "beta", "default"):
            s = MooncakeDistributedStore()
            assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 << 20, "tcp", "", {master.addr!r}, tenant_id=tenant) == 0
            print(tenant, s.get("shared") == b"alpha's" * 1000, s.is_exist("shared"), flush=True)
            s.close()
    """)
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:3] == ["alpha True 1", "beta False 0", "default False 0"], out.stdout


def test_dummy_clients_use_their_real_clients_tenant(master, tmp_path):
    real = RealClient(master.addr, tmp_path, extra=["--tenant_id=alpha"])
    try:
        a = tenant_store(master, "alpha")
        d = tenant_store(master, "default")
        try:
            res = run_child(DUMMY_CHILD, {"service": real.service, "ops": ["put"], "pool": 8 * MB, "buf": 8 * MB},
                            env(), 120, "dummy client")
            assert res["setup"] == 0 and res["ops"]["put"] == [0] * 12, res
            assert a.batch_is_exist([f"d{i}" for i in range(12)]) == [1] * 12
            assert d.batch_is_exist([f"d{i}" for i in range(12)]) == [0] * 12
        finally:
            a.close()
            d.close()
    finally:
        real.stop()
