"""The rest of upstream's transfer-engine Python reference (docs/transfer-engine.md's table):
batch_transfer_async with status polling, batch_transfer_sync / transfer_sync with a
TransferNotify, get_engine, transport_hint, the feature flags, the CUDA variants and
allocate_gpu_memory failing with what this host lacks, and the errors of protocols and device
memory this build cannot drive. Two real processes, byte-exact."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

import pytest

from conftest import free_port
from mooncake import engine as engine_mod
from mooncake.engine import (InnerTransferEngine, TransferEngine, TransferNotify,
                             TransferOpcode, last_error)
from test_engine import SIZE, Peer, pattern


def gpu_count() -> int:
    from mooncake import _gpu
    try:
        return _gpu.runtime().device_count()[0]
    except RuntimeError:
        return 0


HAS_GPU = gpu_count() > 0
no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="this host has a GPU: tests/test_engine_cuda.py")


@pytest.fixture
def pair():
    peer = Peer("P2PHANDSHAKE", "127.0.0.1")
    eng = TransferEngine()
    assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    yield eng, peer
    peer.close()
    eng.close()


def poll(eng: TransferEngine, batch: int) -> int:
    """transfer_check_status until final, as upstream's docs poll (no time assertion)."""
    deadline = time.time() + 60
    while (st := eng.transfer_check_status(batch)) == 0:
        assert time.time() < deadline, "the batch never finished"
        time.sleep(0.001)
    return st


def test_batch_transfer_async_with_polling(pair):
    eng, peer = pair
    local = eng.allocate_managed_buffer(SIZE)
    data = pattern(SIZE, 5)
    assert eng.write_bytes_to_buffer(local, data, SIZE) == 0
    for kind in ("managed", "plain"):
        base = getattr(peer, kind)
        offs = [0, 4096, 300000, 700000]
        lens = [4096, 1, 65536, 300000]
        b = eng.batch_transfer_async(peer.name, [local + o for o in offs],
                                     [base + o for o in offs], lens, TransferOpcode.WRITE)
        assert b != 0
        assert poll(eng, b) == 1
        assert eng.transfer_check_status(b) == -1  # final status freed the batch
        for o, n in zip(offs, lens):
            assert peer.dump(kind, o, n) == data[o:o + n]
        # READ back into another part of our buffer, waited for with get_batch_transfer_status
        dst = [local + SIZE // 2 + i * 70000 for i in range(3)]
        b1 = eng.batch_transfer_async(peer.name, dst[:2], [base, base + 4096], [4096, 1],
                                      TransferOpcode.READ)
        b2 = eng.batch_transfer_async(peer.name, dst[2:], [base + 300000], [65536],
                                      TransferOpcode.Read)
        assert b1 != 0 and b2 != 0 and b1 != b2
        assert eng.get_batch_transfer_status([b1, b2]) == 0
        assert eng.read_bytes_from_buffer(dst[0], 4096) == data[:4096]
        assert eng.read_bytes_from_buffer(dst[1], 1) == data[4096:4097]
        assert eng.read_bytes_from_buffer(dst[2], 65536) == data[300000:365536]
        assert eng.write_bytes_to_buffer(local, data, SIZE) == 0
    # failures: 0 as the batch id, nothing written
    m = peer.managed
    before = peer.dump("managed", SIZE - 8, 8)
    assert eng.batch_transfer_async(peer.name, [local], [m + SIZE - 4], [8], TransferOpcode.WRITE) == 0
    assert peer.dump("managed", SIZE - 8, 8) == before
    assert eng.batch_transfer_async(peer.name, [], [], [], TransferOpcode.WRITE) == 0
    assert eng.batch_transfer_async(peer.name, [local], [m], [8], 7) == 0  # no such opcode
    assert eng.batch_transfer_async("127.0.0.1:1", [local], [m], [8], TransferOpcode.WRITE) == 0
    assert eng.transfer_check_status(0) == -1


def test_notify_variants_and_transport_hint(pair):
    eng, peer = pair
    local = eng.allocate_managed_buffer(4096)
    data = pattern(4096, 9)
    eng.write_bytes_to_buffer(local, data)
    n = TransferNotify("transfer_complete", "chunk_1_done")
    assert (n.name, n.msg) == ("transfer_complete", "chunk_1_done") and TransferNotify() == ("", "")
    assert eng.transfer_sync(peer.name, local, peer.plain, 100, TransferOpcode.WRITE, n) == 0
    assert eng.batch_transfer_sync(peer.name, [local + 100, local + 200],
                                   [peer.plain + 100, peer.plain + 200], [100, 100],
                                   TransferOpcode.WRITE, TransferNotify("batch", "2")) == 0
    assert eng.batch_transfer_sync(peer.name, [local + 300], [peer.plain + 300], [100],
                                   TransferOpcode.WRITE) == 0  # notify=None
    assert peer.dump("plain", 0, 400) == data[:400]
    assert eng.transfer_sync_write(peer.name, local, peer.plain, 8, transport_hint="tcp") == 0
    assert eng.transfer_sync_read(peer.name, local, peer.plain, 8, transport_hint="rdma") == 0
    assert eng.batch_transfer_sync_write(peer.name, [local], [peer.plain], [8], "tcp") == 0
    b = eng.batch_transfer_async_write(peer.name, [local], [peer.plain], [8], transport_hint="")
    assert poll(eng, b) == 1
    deadline = time.time() + 30
    got = []
    while len(got) < 2 and time.time() < deadline:
        got += peer.notifies()
        time.sleep(0.01)
    assert got == [["transfer_complete", "chunk_1_done"], ["batch", "2"]]
    with pytest.raises(TypeError, match="notify must be a TransferNotify"):
        eng.transfer_sync(peer.name, local, peer.plain, 8, TransferOpcode.WRITE, "oops")
    with pytest.raises(TypeError, match="takes two str"):
        TransferNotify("a", 1)


def test_get_notifies_returns_transfer_notify_objects(pair):
    eng, peer = pair
    other = TransferEngine()
    assert other.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        assert other.send_notify(eng.get_segment_name(), "hello", "world") == 0
        deadline = time.time() + 30
        got = []
        while not got and time.time() < deadline:
            got = eng.get_notifies()
            time.sleep(0.01)
        assert got == [("hello", "world")]
        assert isinstance(got[0], TransferNotify) and got[0].name == "hello" and got[0].msg == "world"
    finally:
        other.close()


def test_get_engine(pair):
    eng, _ = pair
    inner = eng.get_engine()
    assert isinstance(inner, InnerTransferEngine)
    assert inner.segment_name == eng.get_segment_name() and inner.handle == eng._h
    with pytest.raises(RuntimeError, match="not initialized"):
        TransferEngine().get_engine()


def test_feature_flags_are_all_false():
    for name in ("SUPPORT_CUDA", "SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_MUSA",
                 "SUPPORT_INTRA_NVLINK"):
        assert getattr(engine_mod, name) is False, name


def _rdma_story() -> str:
    nics = sorted(os.listdir("/sys/class/infiniband")) if os.path.isdir("/sys/class/infiniband") else []
    if not nics:
        return ("it needs an RDMA NIC (InfiniBand or RoCE) and this host has none "
                "(/sys/class/infiniband lists none)")
    return (f"this host has an RDMA NIC (InfiniBand or RoCE) ({', '.join(nics)}), but this "
            "build has no rdma transport yet")


def test_unsupported_protocol_names_what_the_host_lacks():
    te = TransferEngine()
    assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "rdma", "mlx5_0") == -1
    assert last_error() == (f'protocol "rdma": not supported on this host: {_rdma_story()}; use '
                            'protocol "tcp" (TCP across hosts, shared memory within one)')
    assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "cxl", "") == -1
    if not os.path.isdir("/sys/bus/cxl/devices") or not os.listdir("/sys/bus/cxl/devices"):
        assert "it needs a CXL memory device and this host has none (/sys/bus/cxl/devices " \
               "lists none)" in last_error()
    assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") == 0  # nothing was lost
    te.close()


def test_device_memory_locations_are_refused(pair):
    eng, _ = pair
    buf = ctypes.create_string_buffer(4096)
    a = ctypes.addressof(buf)
    assert eng.register_memory(a, 4096, "cuda:0") == -1
    assert last_error().startswith('location "cuda:0": not supported on this host: registering '
                                   'device memory: ')
    assert last_error().endswith('register host memory (location "cpu:N") and copy device data '
                                 'through it')
    assert eng.register_memory(a, 4096, "mlu:0") == -1
    assert eng.register_memory(a, 4096) == 0  # the same memory as host memory
    assert eng.unregister_memory(a) == 0


@no_gpu_only
def test_cuda_variants_and_gpu_memory_without_a_gpu(pair):
    import mooncake

    eng, peer = pair
    local = eng.allocate_managed_buffer(4096)
    calls = [
        ("transfer_write_on_cuda", (peer.name, local, peer.plain, 8)),
        ("transfer_read_on_cuda", (peer.name, local, peer.plain, 8, 0)),
        ("batch_transfer_write_on_cuda", (peer.name, [local], [peer.plain], [8])),
        ("batch_transfer_read_on_cuda", (peer.name, [local], [peer.plain], [8], 0, "")),
    ]
    for name, args in calls:
        with pytest.raises(RuntimeError, match=f"^{name} needs CUDA: no "):
            getattr(eng, name)(*args)
    with pytest.raises(RuntimeError, match=r"^allocate_gpu_memory: no GPU here: "):
        mooncake.allocate_gpu_memory(256 * 1024 * 1024, device=0)
    with pytest.raises(ValueError, match="size must be a positive number of bytes, got 0"):
        mooncake.allocate_gpu_memory(0)
    with pytest.raises(ValueError, match="device must be a GPU index >= 0, got -1"):
        mooncake.allocate_gpu_memory(4096, device=-1)
    with pytest.raises(ValueError, match="was not returned by allocate_gpu_memory"):
        mooncake.free_gpu_memory(local)


def test_importing_the_package_stays_cheap():
    code = ("import sys, mooncake, mooncake.engine; "
            "print('torch' in sys.modules, 'mooncake._gpu' in sys.modules, "
            "callable(mooncake.allocate_gpu_memory))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout == "False False True\n", r.stderr


def test_initialize_ext_metadata_types():
    """initialize_ext(..., metadata_type): a bare host:port with "http" reaches an HTTP metadata
    server (here the Python one), "p2p" means P2PHANDSHAKE."""
    from mooncake.http_metadata_server import KVBootstrapServer

    with KVBootstrapServer(0, "127.0.0.1") as srv:
        a, b = TransferEngine(), TransferEngine()
        try:
            name = f"127.0.0.1:{free_port()}"
            assert a.initialize_ext(name, f"127.0.0.1:{srv.port}", "tcp", "", "http") == 0
            assert f"mooncake/ram/{name}" in srv.keys()
            assert b.initialize_ext("127.0.0.1", "ignored:1", "tcp", "", "p2p") == 0
            assert b.get_segment_name() == f"127.0.0.1:{b.get_rpc_port()}"
        finally:
            a.close()
            b.close()


def test_store_setup_takes_get_engine():
    """Upstream's clients pass te.get_engine() to the store's setup (engine=...)."""
    import textwrap

    from test_store import Master

    m = Master()
    try:
        code = textwrap.dedent(f"""
            from mooncake.engine import TransferEngine
            from mooncake.store import MooncakeDistributedStore
            te = TransferEngine()
            assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
            inner = te.get_engine()
            s = MooncakeDistributedStore()
            print(s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                          {m.addr!r}, inner), inner.get_rpc_port() == te.get_rpc_port())
            print(s.put("k", b"shared engine"), s.get("k"))
            s.close()
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert r.stdout == "0 True\n0 b'shared engine'\n", r.stdout + r.stderr
    finally:
        m.stop()
