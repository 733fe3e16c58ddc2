"""Zero-copy and ranged calls of upstream's store API: get_buffer / batch_get_buffer
(BufferHandle), get_into_ranges, batch_put_from_multi_buffers / batch_get_into_multi_buffers,
put_from_with_metadata, alloc_from_mem_pool and MooncakeHostMemAllocator. A real master; values
written by a second client process and read here, byte for byte."""

from __future__ import annotations

import ctypes
import gc
import random
import subprocess

import numpy as np

from test_store import MB, master, new_store, run_peer, start_master, store  # noqa: F401
from mooncake.store import BufferHandle, ErrorCode, MooncakeHostMemAllocator, ReplicateConfig


def pattern(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def test_get_buffer_zero_copy_from_a_peer(master, store):
    run_peer(master, f"""
        cfg = ReplicateConfig(); cfg.preferred_segment = {store.get_hostname()!r}
        assert s.put("gb1", bytes(range(256)) * 4096, cfg) == 0
        assert s.put("gb2", b"small", cfg) == 0
        s.close()
    """)
    for key, want in (("gb1", bytes(range(256)) * 4096), ("gb2", b"small")):
        h = store.get_buffer(key)
        assert isinstance(h, BufferHandle) and h.size() == len(want) and len(h) == len(want)
        assert bytes(h) == want and memoryview(h).tobytes() == want
        arr = np.array(h, copy=False)
        assert arr.dtype == np.uint8 and arr.ctypes.data == h.ptr() and arr.tobytes() == want
    assert store.get_buffer("missing") is None
    v = pattern(3 * MB + 1, 1)
    assert store.put("mine", v) == 0
    h = store.get_buffer("mine")
    view = memoryview(h)
    del h
    gc.collect()
    assert view.tobytes() == v  # the view keeps the memory alive
    del view
    hs = store.batch_get_buffer(["mine", "missing", "mine"])
    assert hs[1] is None and bytes(hs[0]) == v and bytes(hs[2]) == v and hs[0].ptr() != hs[2].ptr()
    assert store.batch_get_buffer([]) == []


def test_get_into_ranges(master, store):
    k1, k2 = pattern(64, 2), pattern(40, 3)
    peer = run_peer(master, f"""
        cfg = ReplicateConfig(); cfg.preferred_segment = s.get_hostname()
        assert s.put("key1", {k1!r}, cfg) == 0
        assert s.put("key2", {k2!r}, cfg) == 0
        print("PUT", flush=True)
        sys.stdin.readline()
    """, wait=False, stdin=subprocess.PIPE)
    try:
        assert peer.stdout.readline().startswith("HOST") and peer.stdout.readline().strip() == "PUT"
        _ranges(store, k1, k2)
    finally:
        peer.stdin.close()
        assert peer.wait(timeout=60) == 0


def _ranges(store, k1, k2):
    b0 = (ctypes.c_ubyte * 32)()
    b1 = (ctypes.c_ubyte * 32)()
    p0, p1 = ctypes.addressof(b0), ctypes.addressof(b1)
    assert store.register_buffer(p0, 32) == 0 and store.register_buffer(p1, 32) == 0
    res = store.get_into_ranges(
        [p0, p1],
        [["key1", "key2"], ["key2", "key1"]],
        [[[0, 20], [8]], [[4], [16]]],
        [[[1, 30], [2]], [[0], [10]]],
        [[[4, 3], [5]], [[6], [4]]],
    )
    assert res == [[[4, 3], [5]], [[6], [4]]]
    e0 = bytearray(32)
    e0[0:4], e0[20:23], e0[8:13] = k1[1:5], k1[30:33], k2[2:7]
    e1 = bytearray(32)
    e1[4:10], e1[16:20] = k2[0:6], k1[10:14]
    assert bytes(b0) == bytes(e0) and bytes(b1) == bytes(e1)
    # errors per fragment: a missing key, a source range past the value, a destination past the
    # registered buffer, a shape mismatch; the valid fragment beside them still lands
    b0[:] = bytes(32)
    res = store.get_into_ranges([p0], [["nope", "key1", "key1"]], [[[0], [0, 30], [0]]],
                                [[[0], [60, 0], [0]]], [[[4], [8, 3], [1, 2]]])
    assert res[0][0] == [ErrorCode.OBJECT_NOT_FOUND]
    assert res[0][1] == [ErrorCode.INVALID_PARAMS, ErrorCode.BUFFER_OVERFLOW]
    assert res[0][2] == [ErrorCode.INVALID_PARAMS, ErrorCode.INVALID_PARAMS]
    assert bytes(b0) == bytes(32)  # nothing half-written
    unreg = (ctypes.c_ubyte * 8)()
    assert store.get_into_ranges([ctypes.addressof(unreg)], [["key1"]], [[[0]]], [[[0]]], [[[4]]]) == [[[ErrorCode.INVALID_PARAMS]]]
    assert store.get_into_ranges([p0, p1], [["key1"]], [[[0]]], [[[0]]], [[[4]]]) == [[[ErrorCode.INVALID_PARAMS]]]


def test_multi_buffers_roundtrip(master, store):
    blocks, parts, part = 4, 5, 64 * 1024
    src = np.frombuffer(pattern(blocks * parts * part, 4), dtype=np.uint8).copy()
    dst = np.zeros_like(src)
    sp, dp = src.ctypes.data, dst.ctypes.data
    assert store.register_buffer(sp, src.nbytes) == 0 and store.register_buffer(dp, dst.nbytes) == 0
    keys = [f"mb{i}" for i in range(blocks)]
    ptrs = [[sp + (b * parts + j) * part for j in range(parts)] for b in range(blocks)]
    dptrs = [[dp + (b * parts + j) * part for j in range(parts)] for b in range(blocks)]
    sizes = [[part] * parts for _ in range(blocks)]
    cfg = ReplicateConfig(prefer_alloc_in_same_node=True)
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes, cfg) == [0] * blocks
    assert store.get_size("mb0") == parts * part
    assert store.get("mb2") == src[2 * parts * part:3 * parts * part].tobytes()
    assert store.batch_get_into_multi_buffers(keys, dptrs, sizes, True) == [parts * part] * blocks
    assert np.array_equal(src, dst)
    # a second process reads one block scattered into unequal pieces
    p = run_peer(master, f"""
        import ctypes
        a = (ctypes.c_ubyte * 1000)(); b = (ctypes.c_ubyte * {parts * part})()
        r = s.batch_get_into_multi_buffers(["mb3", "mb3"], [[ctypes.addressof(a), ctypes.addressof(b)], [ctypes.addressof(a)]],
                                           [[1000, {parts * part}], [1000]])
        print("R", r, flush=True)
        print("D", (bytes(a) + bytes(b)[:{parts * part} - 1000]).hex(), flush=True)
    """)
    lines = dict(l.split(" ", 1) for l in p.output.splitlines() if l[:1] in "RD")
    assert lines["R"] == f"[{parts * part}, {ErrorCode.BUFFER_OVERFLOW}]"
    assert bytes.fromhex(lines["D"]) == src[3 * parts * part:4 * parts * part].tobytes()
    # bad shapes: per-key codes, nothing stored
    assert store.batch_put_from_multi_buffers(["x1", "x2"], [[sp], [sp, sp]], [[10], [10]]) == [0, ErrorCode.INVALID_PARAMS]
    assert store.is_exist("x2") == 0 and store.get("x1") == src[:10].tobytes()
    assert store.batch_put_from_multi_buffers(["x3"], [[sp]], []) == [ErrorCode.INVALID_PARAMS]
    assert store.batch_get_into_multi_buffers(["mb0"], [[dp]], [[10, 10]]) == [ErrorCode.INVALID_PARAMS]


def test_put_from_with_metadata_and_memory(store):
    alloc = MooncakeHostMemAllocator()
    data, meta = alloc.alloc(4096), alloc.alloc(64)
    assert data and meta and data % 4096 == 0
    ctypes.memmove(data, pattern(4096, 5), 4096)
    ctypes.memmove(meta, b"M" * 64, 64)
    assert store.register_buffer(data, 4096) == 0 and store.register_buffer(meta, 64) == 0
    assert store.put_from_with_metadata("wm", data, meta, 4096, 64) == 0
    assert store.get("wm") == b"M" * 64 + pattern(4096, 5)
    assert store.put_from_with_metadata("empty", data, meta, 0, 64) == 0 and store.is_exist("empty") == 0
    assert store.put_from_with_metadata("samenode", data, meta, 4096, 64,
                                        ReplicateConfig(prefer_alloc_in_same_node=True)) == ErrorCode.INVALID_PARAMS
    assert store.put_from_with_metadata("null", 0, meta, 10, 64) == ErrorCode.INVALID_PARAMS
    assert store.is_exist("samenode") == 0 and store.is_exist("null") == 0
    for p in (data, meta):
        assert store.unregister_buffer(p) == 0
        assert alloc.free(p) == 0
    assert alloc.free(data) == ErrorCode.INVALID_PARAMS
    # alloc_from_mem_pool: registered memory, zero-copy put/get on it
    p = store.alloc_from_mem_pool(MB)
    assert p
    ctypes.memmove(p, pattern(MB, 6), MB)
    assert store.put_from("pool", p, MB) == 0
    ctypes.memset(p, 0, MB)
    assert store.get_into("pool", p, MB) == MB
    assert ctypes.string_at(p, MB) == pattern(MB, 6)
    assert store.alloc_from_mem_pool(0) == 0
