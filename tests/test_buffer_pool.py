"""mooncake.BufferPool: registered scratch buffers for the zero-copy store calls, against a real
mooncake_master and a second client process."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import threading

import pytest

from test_store import run_peer  # noqa: E402
from store_fixtures import master, store  # noqa: E402,F401  (fixtures)
import mooncake  # noqa: E402
from mooncake.buffer_pool import BufferLease, BufferPool, RegisteredBufferLease, RegisteredBufferPool  # noqa: E402


def test_package_top_exports_without_torch():
    assert mooncake.BufferPool is BufferPool and mooncake.RegisteredBufferPool is BufferPool
    assert RegisteredBufferPool is BufferPool and RegisteredBufferLease is BufferLease
    out = subprocess.run([sys.executable, "-c", "import sys, mooncake; mooncake.BufferPool; "
                          "print('torch' in sys.modules, 'mooncake.store' in sys.modules)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_leases_move_values_both_ways(master, store):
    pool = BufferPool(store)
    value = bytes(range(256)) * 1000
    with pool.buffer(len(value)) as lease:
        assert lease.size == len(value) and lease.ptr % pool.alignment == 0
        lease.buffer[:] = value
        assert store.put_from("bp/a", lease.ptr, lease.size) == 0
    peer = run_peer(master, """
        from mooncake import BufferPool
        pool = BufferPool(s)
        with pool.buffer(1 << 20) as lease:
            n = s.get_into("bp/a", lease.ptr, lease.size)
            assert n == 256000, n
            assert bytes(lease.buffer[:n]) == bytes(range(256)) * 1000
            lease.buffer[:5] = b"peer!"
            assert s.put_from("bp/b", lease.ptr, 5) == 0
        pool.close()
        print("GOT", s.get("bp/b"))
    """)
    assert "GOT b'peer!'" in peer.output
    lease = pool.acquire(100)
    n = store.get_into("bp/a", lease.ptr, lease.size)
    assert n < 0  # 100 bytes cannot hold the 256000-byte value
    lease.release()
    with pool.buffer(300000) as lease:
        n = store.get_into("bp/a", lease.ptr, lease.size)
        view = lease.buffer[:n]
        assert bytes(view) == value
        del view
    pool.close()


def test_regions_are_reused_by_size_class(store):
    pool = BufferPool(store, min_size_class=4096)
    a = pool.acquire(3000)
    ptr = a.ptr
    a.release()
    b = pool.acquire(4096)  # same class: same registered region
    assert b.ptr == ptr and pool.registered_bytes == 4096
    c = pool.acquire(5000)  # next class
    assert c.ptr != ptr and pool.registered_bytes == 4096 + 8192
    b.release()
    c.release()
    a.release()  # twice: no-op
    with pytest.raises(ValueError, match="released"):
        a.ptr
    with pytest.raises(RuntimeError, match="buffer lease is closed"):  # upstream's type and words
        a.buffer
    pool.prewarm(10000, 2)
    assert pool.registered_bytes == 4096 + 8192 + 16384 * 2 and pool.active_leases == 0
    big = BufferPool(store, min_size_class=4096, max_size_class=8192)
    x = big.acquire(100000)  # above max_size_class: exact, freed on release
    assert big.registered_bytes == 100000
    x.release()
    assert big.registered_bytes == 0
    big.close()
    pool.close()


def test_limits_block_raise_and_wake(store):
    pool = BufferPool(store, max_regions=1, min_size_class=4096)
    first = pool.acquire(10)
    with pytest.raises(RuntimeError, match=r"buffer pool is exhausted: 1 active leases \(max_regions=1\)"):
        pool.acquire(10, block=False)
    with pytest.raises(TimeoutError, match="no buffer within 0.05s"):
        pool.acquire(10, timeout=0.05)
    with pytest.raises(RuntimeError, match="timed out waiting for buffer"):  # upstream's type and words
        pool.acquire(10, timeout=0.01)
    got = []
    waiting = threading.Thread(target=lambda: got.append(pool.acquire(10)))
    waiting.start()
    first.release()
    waiting.join(30)
    assert not waiting.is_alive() and got[0].ptr == first._region.ptr
    got[0].release()
    pool.close()
    capped = BufferPool(store, max_bytes=8192, min_size_class=4096, block_on_exhaustion=False)
    a = capped.acquire(4096)
    b = capped.acquire(4000)
    with pytest.raises(RuntimeError, match=r"8192 bytes leased \+ 4096 > max_bytes=8192"):
        capped.acquire(1)
    with pytest.raises(ValueError, match="exceed max_bytes"):
        capped.acquire(10000)
    for huge in (10000, 1 << 62, (1 << 64) - 1):  # upstream's type and words
        with pytest.raises(RuntimeError, match="requested buffer size exceeds pool capacity"):
            capped.acquire(huge)
    assert capped.active_leases == 2
    a.release()
    b.release()
    capped.close()


def test_release_and_close_refuse_while_in_use(store):
    pool = BufferPool(store)
    lease = pool.acquire(64)
    view = lease.buffer[:8]
    with pytest.raises(BufferError, match="still alive"):
        lease.release()
    with pytest.raises(RuntimeError, match="cannot release buffer while exported views exist"):
        lease.release()
    arr = (ctypes.c_ubyte * 8).from_buffer(view)  # an array made from a view counts too
    del view
    with pytest.raises(BufferError):
        lease.release()
    with pytest.raises(RuntimeError, match="cannot close buffer pool with active leases: 1 lease\\(s\\) still active"):
        pool.close()
    del arr
    lease.release()
    pool.close()
    pool.close()  # twice: no-op
    with pytest.raises(RuntimeError, match="buffer pool is closed"):
        pool.acquire(1)


def test_lease_views_are_buffer_lease_views(store):
    import mooncake.store as ms
    from mooncake.buffer_pool import BufferLeaseView, RegisteredBufferLeaseView
    assert ms.BufferPool is BufferPool and ms.RegisteredBufferPool is BufferPool
    assert ms.BufferLease is BufferLease and ms.RegisteredBufferLease is BufferLease
    assert ms.BufferLeaseView is BufferLeaseView and ms.RegisteredBufferLeaseView is BufferLeaseView
    pool = BufferPool(store)
    lease = pool.acquire(5000)
    obj = lease.buffer.obj
    assert isinstance(obj, BufferLeaseView) and len(lease.buffer) == 5000
    second = obj.buffer  # upstream's view.buffer: another memoryview of the same bytes
    second[:4] = b"abcd"
    assert bytes(lease.buffer[:4]) == b"abcd" and ctypes.string_at(lease.ptr, 4) == b"abcd"
    del obj
    with pytest.raises(BufferError):
        lease.release()
    del second
    lease.release()
    pool.close()


def test_bad_arguments(store):
    with pytest.raises(TypeError, match="MooncakeDistributedStore"):
        BufferPool(object())
    for bad in (3000, 4, 12345):  # upstream's type (RuntimeError) and words; a ValueError too
        with pytest.raises(RuntimeError, match="alignment must be a power of two and at least sizeof"):
            BufferPool(store, alignment=bad)
        with pytest.raises(ValueError, match="power of two"):
            BufferPool(store, alignment=bad)
    with pytest.raises(RuntimeError, match="min_size_class and alignment must be positive"):
        BufferPool(store, alignment=0)
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(None)
    with pytest.raises(ValueError, match="max_regions must be >= 1"):
        BufferPool(store, max_regions=0)
    with pytest.raises(ValueError, match="max_size_class 10 < min_size_class"):
        BufferPool(store, max_size_class=10)
    pool = BufferPool(store)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="size must be a non-negative int"):
            pool.acquire(bad)
    with pytest.raises(RuntimeError, match="timeout must be non-negative"):
        pool.acquire(1, timeout=-1)
    pool.close()


def test_zero_byte_leases(store):
    """acquire(0), as upstream's: a lease of size 0 with an empty buffer, a real address, and a
    region of the smallest class (reused like any other)."""
    pool = BufferPool(store, min_size_class=4096, max_size_class=128 * 1024)
    lease = pool.acquire(0)
    assert lease.size == 0 and len(lease.buffer) == 0 and lease.ptr % pool.alignment == 0
    assert pool.registered_bytes == 4096 and pool.active_leases == 1
    lease.release()
    again = pool.acquire(4096)
    assert again.ptr == lease._region.ptr and pool.registered_bytes == 4096
    again.release()
    pool.close()


def test_dropped_leases_go_back_to_the_pool(master, store):
    """A lease dropped without release() returns to the pool when it is collected; while a view
    of its buffer is alive the lease stays active (the view keeps it), and the memory stays
    readable and registered."""
    pool = BufferPool(store, min_size_class=4096, max_regions=1, block_on_exhaustion=False)
    lease = pool.acquire(100)
    ptr = lease.ptr
    del lease
    gc.collect()
    assert pool.active_leases == 0
    view = pool.acquire(5).buffer  # the lease itself is dropped at once; its view is not
    gc.collect()
    assert pool.active_leases == 1
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(1)
    view[:] = b"hello"
    arr = (ctypes.c_ubyte * 5).from_buffer(view)
    assert store.put_from("bp/view", ctypes.addressof(arr), 5) == 0
    del view
    gc.collect()
    assert pool.active_leases == 1  # the array made from the view holds it too
    del arr
    gc.collect()
    assert pool.active_leases == 0
    with pool.buffer(5) as lease:  # the same region, still registered
        assert lease.ptr == ptr and store.get_into("bp/view", lease.ptr, 5) == 5
        assert bytes(lease.buffer) == b"hello"
    pool.close()
    # a pool dropped without close() unregisters its regions: the same memory range can be
    # registered again by the next owner
    pool2 = BufferPool(store, min_size_class=4096)
    lease = pool2.acquire(10)
    region = lease._region
    del lease, pool2
    gc.collect()
    assert store.register_buffer(region.ptr, region.capacity) == 0
    assert store.unregister_buffer(region.ptr) == 0
