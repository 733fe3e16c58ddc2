"""Session-based ranged reads of upstream's store API: prepare_get_into_ranges_snapshot
(RangedReadSnapshot), get_into_ranges_from_snapshot, templates and plans, allow_staging. A real
mooncake_master; values written by a second client process (or a mooncake_client holding the
memory) and read here, byte for byte."""

from __future__ import annotations

import ctypes
import os
import random
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import stop
from test_store import MB, ROOT, Master, master, new_store, run_peer, start_master, store  # noqa: F401
from test_tier import segment_holder
from mooncake.store import ErrorCode, MooncakeDistributedStore, RangedReadSnapshot

FILL = 0xA5


def pattern(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def buffer(store, n: int):
    """n bytes of memory registered with store, filled with FILL."""
    b = (ctypes.c_ubyte * n)()
    ctypes.memset(b, FILL, n)
    assert store.register_buffer(ctypes.addressof(b), n) == 0
    return b, ctypes.addressof(b)


class Peer:
    """A second client process that puts values on command (one line of Python per command,
    answered with OK) and keeps them (its segment holds them) until closed."""

    def __init__(self, master):
        self.p = run_peer(master, """
            while True:
                line = sys.stdin.readline()
                if not line.strip():
                    break
                exec(line)
                print("OK", flush=True)
            s.close()
        """, wait=False, stdin=subprocess.PIPE)
        assert self.p.stdout.readline().startswith("HOST")

    def do(self, code: str):
        self.p.stdin.write(code + "\n")
        self.p.stdin.flush()
        assert self.p.stdout.readline().strip() == "OK", f"peer failed: {code}"

    def put(self, key: str, value: bytes, op: str = "put"):
        self.do(f"cfg = ReplicateConfig(); cfg.preferred_segment = s.get_hostname(); "
                f"assert s.{op}({key!r}, {value!r}, cfg) == 0")

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=60) == 0


@pytest.fixture
def peer(master):
    p = Peer(master)
    yield p
    p.close()


def test_snapshot_reads_fragments_of_several_keys(master, store, peer):
    k1, k2 = pattern(64, 2), pattern(40, 3)
    peer.put("key1", k1)
    peer.put("key2", k2)
    snap = store.prepare_get_into_ranges_snapshot(["key1", "key2", "missing", "key1"])
    assert isinstance(snap, RangedReadSnapshot)
    assert snap.keys == ("key1", "key2", "missing") and not snap.closed
    assert repr(snap) == "<RangedReadSnapshot 3 keys>"
    with pytest.raises(TypeError):
        RangedReadSnapshot()
    b0, p0 = buffer(store, 32)
    b1, p1 = buffer(store, 32)
    # the shape and results of get_into_ranges (tests/test_store_api_buffers.py), batch after batch
    for batch in range(3):
        ctypes.memset(b0, FILL, 32)
        ctypes.memset(b1, FILL, 32)
        s = batch * 5
        res = store.get_into_ranges_from_snapshot(
            snap, [p0, p1],
            [["key1", "key2"], ["key2", "key1"]],
            [[[0, 20], [8]], [[4], [16]]],
            [[[1 + s, 30 + s], [2 + s]], [[0], [10 + s]]],
            [[[4, 3], [5]], [[6], [4]]],
        )
        assert res == [[[4, 3], [5]], [[6], [4]]]
        e0, e1 = bytearray([FILL]) * 32, bytearray([FILL]) * 32
        e0[0:4], e0[20:23], e0[8:13] = k1[1 + s:5 + s], k1[30 + s:33 + s], k2[2 + s:7 + s]
        e1[4:10], e1[16:20] = k2[0:6], k1[10 + s:14 + s]
        assert bytes(b0) == bytes(e0) and bytes(b1) == bytes(e1)
    # errors per fragment, as get_into_ranges's, plus a key the snapshot does not hold; the
    # valid fragment beside them still lands
    ctypes.memset(b0, FILL, 32)
    args = ([p0], [["missing", "key1", "key1", "key2"]], [[[0], [0, 30], [0], [24]]],
            [[[0], [60, 0], [0], [39]]], [[[4], [8, 3], [1, 2], [1]]])
    res = store.get_into_ranges_from_snapshot(snap, *args)
    assert res == store.get_into_ranges(*args)
    assert res == [[[ErrorCode.OBJECT_NOT_FOUND], [ErrorCode.INVALID_PARAMS, ErrorCode.BUFFER_OVERFLOW],
                    [ErrorCode.INVALID_PARAMS, ErrorCode.INVALID_PARAMS], [1]]]
    assert bytes(b0) == bytes([FILL]) * 24 + k2[39:40] + bytes([FILL]) * 7
    res = store.get_into_ranges_from_snapshot(snap, [p0], [["never-prepared"]], [[[0]]], [[[0]]], [[[4]]])
    assert res == [[[ErrorCode.INVALID_PARAMS]]]
    unreg = (ctypes.c_ubyte * 8)()
    assert store.get_into_ranges_from_snapshot(snap, [ctypes.addressof(unreg)], [["key1"]], [[[0]]], [[[0]]],
                                               [[[4]]]) == [[[ErrorCode.INVALID_PARAMS]]]
    assert store.get_into_ranges_from_snapshot(snap, [p0, p1], [["key1"]], [[[0]]], [[[0]]], [[[4]]]) == [[[ErrorCode.INVALID_PARAMS]]]
    assert store.get_into_ranges_from_snapshot(snap, [p0], [[]], [[]], [[]], [[]]) == [[]]
    assert bytes(unreg) == bytes(8)
    snap.close()
    assert snap.closed and repr(snap) == "<RangedReadSnapshot closed>"
    with pytest.raises(ValueError, match="closed"):
        store.get_into_ranges_from_snapshot(snap, [p0], [["key1"]], [[[0]]], [[[0]]], [[[4]]])


LEASE_MS = 3000


def test_snapshot_lease_refresh_and_upsert(start_master):
    """Within the lease the snapshot reads the bytes of the snapshot time (the old value after
    an upsert: the master keeps the replaced copy while the lease runs); a batch after half the
    lease queries again and reads the new value; after the whole lease it still reads right."""
    m = start_master("--client_ttl=2", f"--default_kv_lease_ttl={LEASE_MS}")
    store = new_store(m)
    peer = Peer(m)
    try:
        old, new, late = pattern(4096, 10), pattern(4096, 11), pattern(100, 12)
        peer.put("u", old)
        buf, ptr = buffer(store, 4096)

        def read(key, n=4096):
            return store.get_into_ranges_from_snapshot(snap, [ptr], [[key]], [[[0]]], [[[0]]], [[[n]]])[0][0]

        snap = store.prepare_get_into_ranges_snapshot(["u", "late"])
        prepared = time.monotonic()
        peer.put("u", new, op="upsert")
        peer.put("late", late)
        assert read("u") == [4096] and bytes(buf) == old
        assert read("late", 100) == [ErrorCode.OBJECT_NOT_FOUND]
        assert store.get_into_ranges([ptr], [["u"]], [[[0]]], [[[0]]], [[[4096]]]) == [[[4096]]]
        assert bytes(buf) == new
        assert read("u") == [4096] and bytes(buf) == old  # the snapshot still holds the old copy
        assert time.monotonic() - prepared < LEASE_MS / 2000, "the machine is too slow for this lease"
        time.sleep(LEASE_MS / 2000 + 0.1 - (time.monotonic() - prepared))
        ctypes.memset(buf, FILL, 4096)
        assert read("u") == [4096] and bytes(buf) == new  # refreshed at the lease midpoint
        assert read("late", 100) == [100] and bytes(buf[:100]) == late
        time.sleep(LEASE_MS / 1000 + 0.1)
        ctypes.memset(buf, FILL, 4096)
        assert read("u") == [4096] and bytes(buf) == new  # past the whole lease: refreshed again
    finally:
        peer.close()
        store.close()


def test_templates_translate_reuse_and_keep_holes(master, store, peer):
    payload = bytes(i % 251 for i in range(32768))
    peer.put("t", payload)
    bufs = [buffer(store, 32768) for _ in range(2)]
    ptrs = [p for _, p in bufs]
    assert store.supports_planned_range_reads is True
    source = [i * 256 for i in range(64)]
    destination = [i * 256 for i in reversed(range(64))]  # reversed, with 128-byte holes
    tpl = store.prepare_get_into_ranges_template(destination, source, [128] * 64)
    assert tpl.range_count == 64 and tpl.total_bytes == 64 * 128
    assert repr(tpl) == "RangedReadTemplate(range_count=64, total_bytes=8192)"
    with pytest.raises(AttributeError):
        tpl.range_count = 3
    snap = store.prepare_get_into_ranges_snapshot(["t", "t-missing"])

    def read(index):
        return store.get_into_ranges_from_template(snap, [tpl], ptrs, [index], ["t"], [17 + index])

    for _ in range(2):  # the same template and snapshot from two threads, twice
        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(read, range(2))) == [[True], [True]]
    for index, (b, _) in enumerate(bufs):
        expected = bytearray([FILL]) * 32768
        for d, s in zip(destination, source):
            expected[d + 17 + index:d + 17 + index + 128] = payload[s:s + 128]
        assert bytes(b) == bytes(expected)
    # rows into both buffers in one batch, from the same object, default allow_staging
    for b, _ in bufs:
        ctypes.memset(b, FILL, 32768)
    two = store.prepare_get_into_ranges_template([0, 10], [100, 32760], [10, 8])
    assert store.get_into_ranges_from_template(snap, [two, tpl, two], ptrs, [1, 0, 0], ["t", "t", "t"], [5, 0, 20000],
                                               allow_staging=False) == [True, True, True]
    e0, e1 = bytearray([FILL]) * 32768, bytearray([FILL]) * 32768
    for d, s in zip(destination, source):
        e0[d:d + 128] = payload[s:s + 128]
    e0[20000:20010], e0[20010:20018] = payload[100:110], payload[32760:32768]
    e1[5:15], e1[15:23] = payload[100:110], payload[32760:32768]
    assert bytes(bufs[0][0]) == bytes(e0) and bytes(bufs[1][0]) == bytes(e1)
    # False rows, buffer untouched: a missing key, a destination past the registered buffer, a
    # source past the object; a key the snapshot does not hold
    past_src = store.prepare_get_into_ranges_template([0, 200], [0, 32768 - 8], [128, 16])
    for b, _ in bufs:
        ctypes.memset(b, FILL, 32768)
    assert store.get_into_ranges_from_template(snap, [tpl], ptrs, [0], ["t-missing"], [0]) == [False]
    assert store.get_into_ranges_from_template(snap, [tpl], ptrs, [0], ["t"], [32700]) == [False]
    assert store.get_into_ranges_from_template(snap, [past_src], ptrs, [0], ["t"], [0]) == [False]
    assert store.get_into_ranges_from_template(snap, [tpl, two], ptrs, [0, 1], ["other", "t"], [0, 0]) == [False, True]
    assert bytes(bufs[0][0]) == bytes([FILL]) * 32768
    assert bytes(bufs[1][0][:18]) == payload[100:110] + payload[32760:32768]
    assert store.get_into_ranges_from_template(snap, [], ptrs, [], [], []) == []
    # two buffers registered next to each other: a row past the end of the first is False and
    # writes nothing, though every byte of it is registered memory
    halves = (ctypes.c_ubyte * 8192)()
    ctypes.memset(halves, FILL, 8192)
    hp = [ctypes.addressof(halves), ctypes.addressof(halves) + 4096]
    assert store.register_buffer(hp[0], 4096) == 0 and store.register_buffer(hp[1], 4096) == 0
    assert store.get_into_ranges_from_template(snap, [two, two], hp, [0, 1], ["t", "t"], [4096 - 10, 4096 - 18]) == [False, True]
    assert bytes(halves[:8174]) == bytes([FILL]) * 8174
    assert bytes(halves[8174:]) == payload[100:110] + payload[32760:32768]
    # batch errors
    for templates, indices, keys, deltas, msg in [
        ([tpl], [2], ["t"], [0], "Ranged-read template batch exceeds bounds"),
        ([tpl], [0], ["t"], [(1 << 64) - 1], "Ranged-read template batch exceeds bounds"),
        ([tpl], [0], ["t"], [-1], "Ranged-read template batch exceeds bounds"),
        ([None], [0], ["t"], [0], "Ranged-read template batch exceeds bounds"),
        ([], [0], ["t"], [0], "Ranged-read template batch shape differs"),
        ([tpl], [0, 0], ["t"], [0], "Ranged-read template batch shape differs"),
        ([tpl] * 100001, [0] * 100001, ["t"] * 100001, [0] * 100001, "Ranged-read template batch shape differs"),
        ([tpl] * 20000, [0] * 20000, ["t"] * 20000, [0] * 20000, "Ranged-read template batch exceeds bounds"),
    ]:
        with pytest.raises(ValueError, match=msg):
            store.get_into_ranges_from_template(snap, templates, ptrs, indices, keys, deltas)
    assert bytes(bufs[0][0]) == bytes([FILL]) * 32768
    # template errors
    for dst, src, sizes, msg in [
        ([], [], [], "Invalid ranged-read template shape"),
        ([0], [], [1], "Invalid ranged-read template shape"),
        ([0] * 1000001, [0] * 1000001, [1] * 1000001, "Invalid ranged-read template shape"),
        ([0], [0], [0], "Ranged-read template exceeds bounds"),
        ([(1 << 64) - 1], [0], [1], "Ranged-read template exceeds bounds"),
        ([0], [(1 << 64) - 1], [1], "Ranged-read template exceeds bounds"),
        ([0, 0], [0, 0], [1 << 40, 1], "Ranged-read template exceeds bounds"),
        ([-1], [0], [1], "Ranged-read template exceeds bounds"),
    ]:
        with pytest.raises(ValueError, match=msg):
            store.prepare_get_into_ranges_template(dst, src, sizes)
    with pytest.raises(TypeError):
        store.get_into_ranges_from_template(snap, ["not a template"], ptrs, [0], ["t"], [0])


def test_plans_bind_pages_keep_holes(master, store, peer):
    width, count = 128, 64
    page_bytes = 2 * width * count
    big, ptr = buffer(store, 4 * page_bytes)
    other, optr = buffer(store, 1024)
    prefixes = ["pa", "pb"]
    templates, suffixes = [], []
    for i in range(count):
        for j, sfx in enumerate(("-a", "-b")):
            templates.append(store.prepare_get_into_ranges_template([(2 * i + j) * width], [i * 2 * width], [width]))
            suffixes.append(sfx)
    plan = store.prepare_get_into_ranges_plan(templates, suffixes, [0] * len(templates))
    assert plan.range_count == 2 * count and plan.object_count == 2
    assert repr(plan) == f"RangedReadPlan(range_count={2 * count}, object_count=2)"
    expected = bytearray([FILL]) * len(big)
    data = {}
    for page, prefix in enumerate(prefixes):
        for j, sfx in enumerate(("-a", "-b")):
            data[prefix + sfx] = pattern(count * 2 * width, 100 + 2 * page + j)
            peer.put(prefix + sfx, data[prefix + sfx])
    # page p = prefixes reversed, placed at 2*page_bytes*(1-p): pages in the buffer's second and
    # first halves, half a page of hole after each
    for p, prefix in enumerate(reversed(prefixes)):
        base = [2 * page_bytes, 0][p]
        for i in range(count):
            for j, sfx in enumerate(("-a", "-b")):
                off = base + (2 * i + j) * width
                expected[off:off + width] = data[prefix + sfx][i * 2 * width:i * 2 * width + width]
    snap = store.prepare_get_into_ranges_snapshot([p + s for p in prefixes for s in ("-a", "-b")] + ["pa-missing"])
    for _ in range(2):
        assert store.get_into_ranges_from_plan(snap, [plan, plan], [ptr], list(reversed(prefixes)),
                                               [[2 * page_bytes], [0]]) == [True, True]
        assert bytes(big) == bytes(expected)
    missing = store.prepare_get_into_ranges_plan([templates[0]], ["-missing"], [0])
    assert store.get_into_ranges_from_plan(snap, [missing, plan], [ptr], ["pa", "pb"], [[0], [2 * page_bytes]],
                                           allow_staging=False) == [False, True]
    # two regions: object -a of page pa into buffer 1 with a translation of its own
    two = store.prepare_get_into_ranges_plan([templates[0], templates[1]], ["-a", "-b"], [1, 0])
    ctypes.memset(other, FILL, 1024)
    assert store.get_into_ranges_from_plan(snap, [two], [ptr, optr], ["pa"], [[0, 512]]) == [True]
    assert bytes(other) == bytes([FILL]) * 512 + data["pa-a"][:width] + bytes([FILL]) * (512 - width)
    assert bytes(big) == bytes(expected)
    # batch errors, buffer untouched
    for plans, bufs, pre, tr, msg in [
        ([plan], [ptr], ["pa"], [[(1 << 64) - 1]], "Ranged-read plan translation exceeds bounds"),
        ([plan], [ptr], ["pa"], [[0, 0]], "Ranged-read plan batch exceeds bounds"),
        ([plan], [ptr], ["pa"], [[-1]], "translation"),
        ([None], [ptr], ["pa"], [[0]], "Ranged-read plan batch exceeds bounds"),
        ([plan], [ptr], [], [[0]], "Ranged-read plan batch shape differs"),
        ([plan], [ptr], ["pa"], [], "Ranged-read plan batch shape differs"),
    ]:
        with pytest.raises(ValueError, match=msg):
            store.get_into_ranges_from_plan(snap, plans, bufs, pre, tr)
    region1 = store.prepare_get_into_ranges_plan([templates[0]], ["-a"], [1])
    with pytest.raises(ValueError, match="Ranged-read plan translation exceeds bounds"):
        store.get_into_ranges_from_plan(snap, [region1], [ptr], ["pa"], [[0]])
    assert bytes(big) == bytes(expected)
    assert store.get_into_ranges_from_plan(snap, [], [ptr], [], []) == []
    # plan errors
    scattered = store.prepare_get_into_ranges_template([0, 32], [0, 16], [16, 16])
    late = store.prepare_get_into_ranges_template([64], [0], [16])
    early = store.prepare_get_into_ranges_template([8], [0], [16])
    for ts, sfx, regions, msg in [
        ([templates[0]], [], [0], "Invalid ranged-read plan shape"),
        ([], [], [], "Invalid ranged-read plan shape"),
        ([None], ["-a"], [0], "Ranged-read plan exceeds bounds"),
        ([templates[0]], ["-a"], [100000], "Ranged-read plan exceeds bounds"),
        ([scattered], ["-a"], [0], "Plan run destination is not contiguous"),
        ([late, early], ["-a", "-a"], [0, 0], "Plan object destinations are not ordered"),
    ]:
        with pytest.raises(ValueError, match=msg):
            store.prepare_get_into_ranges_plan(ts, sfx, regions)
    # the same rows for different objects, or in order, are fine
    assert store.prepare_get_into_ranges_plan([late, early], ["-a", "-b"], [0, 0]).object_count == 2
    assert store.prepare_get_into_ranges_plan([early, late], ["-a", "-a"], [0, 0]).object_count == 1


def test_snapshot_of_another_store_is_refused(master, store, peer):
    peer.put("x", b"0123456789")
    snap = store.prepare_get_into_ranges_snapshot(["x"])
    other = new_store(master)
    try:
        b, p = buffer(other, 64)
        tpl = other.prepare_get_into_ranges_template([0], [0], [4])
        plan = other.prepare_get_into_ranges_plan([tpl], [""], [0])
        with pytest.raises(ValueError, match="another Store"):
            other.get_into_ranges_from_snapshot(snap, [p], [["x"]], [[[0]]], [[[0]]], [[[4]]])
        with pytest.raises(ValueError, match="another Store"):
            other.get_into_ranges_from_template(snap, [tpl], [p], [0], ["x"], [0])
        with pytest.raises(ValueError, match="another Store"):
            other.get_into_ranges_from_plan(snap, [plan], [p], ["x"], [[0]])
        assert bytes(b) == bytes([FILL]) * 64
        # templates and plans belong to no store: this store's snapshot reads with them
        mine = other.prepare_get_into_ranges_snapshot(["x"])
        assert other.get_into_ranges_from_template(mine, [tpl], [p], [0], ["x"], [3]) == [True]
        assert other.get_into_ranges_from_plan(mine, [plan], [p], ["x"], [[10]]) == [True]
        assert bytes(b[:14]) == bytes([FILL]) * 3 + b"0123" + bytes([FILL]) * 3 + b"0123"
    finally:
        other.close()


@pytest.fixture
def g3(tmp_path):
    m = Master(f"--root_fs_dir={tmp_path / 'g3'}", "--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.1")
    holder = segment_holder(m, "8MB")
    yield m
    stop(holder)
    m.stop()


def test_staging_reads_a_disk_only_object(g3):
    """allow_staging=True reads ranges of an object that only the G3 tier holds (evicted from
    the memory of the mooncake_client holding the segment); without it the read is refused."""
    size, n = 256 * 1024, 48
    value = lambda i: pattern(size, 1000 + i)  # noqa: E731
    # a pure client process puts 12 MiB: more than the 8 MiB segment of the holder
    code = textwrap.dedent(f"""
        import random, sys
        sys.path.insert(0, {os.path.join(ROOT, "python")!r})
        from mooncake.store import MooncakeDistributedStore
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", {g3.addr!r}) == 0
        for i in range({n}):
            assert s.put(f"d{{i}}", random.Random(1000 + i).randbytes({size})) == 0, i
        s.close()
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    store = MooncakeDistributedStore()
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MB, "tcp", "", g3.addr) == 0
    try:
        assert store.supports_ranged_read_staging is True
        key, deadline = None, time.time() + 30
        while key is None and time.time() < deadline:
            for i in range(n):
                if [d["tier"] for d in store.get_replica_desc(f"d{i}")] == ["disk"]:
                    key, idx = f"d{i}", i
                    break
            else:
                time.sleep(0.1)
        assert key is not None, "no object moved to the G3 tier alone"
        v = value(idx)
        buf, ptr = buffer(store, 8192)
        snap = store.prepare_get_into_ranges_snapshot([key])
        args = ([ptr], [[key, key]], [[[0, 1000], [5000]]], [[[7, size - 100], [size // 2]]], [[[100, 100], [300]]])
        assert store.get_into_ranges_from_snapshot(snap, *args) == [[[ErrorCode.REPLICA_NOT_FOUND] * 2,
                                                                     [ErrorCode.REPLICA_NOT_FOUND]]]
        assert store.get_into_ranges(*args) == [[[ErrorCode.REPLICA_NOT_FOUND] * 2, [ErrorCode.REPLICA_NOT_FOUND]]]
        tpl = store.prepare_get_into_ranges_template([0, 64], [size - 64, 0], [64, 64])
        assert store.get_into_ranges_from_template(snap, [tpl], [ptr], [0], [key], [6000]) == [False]
        assert store.get_into_ranges_from_template(snap, [tpl], [ptr], [0], [key], [6000], allow_staging=False) == [False]
        assert bytes(buf) == bytes([FILL]) * 8192
        assert store.get_into_ranges_from_snapshot(snap, *args, allow_staging=True) == [[[100, 100], [300]]]
        expected = bytearray([FILL]) * 8192
        expected[0:100], expected[1000:1100], expected[5000:5300] = v[7:107], v[size - 100:], v[size // 2:size // 2 + 300]
        assert bytes(buf) == bytes(expected)
        assert store.get_into_ranges_from_template(snap, [tpl, tpl], [ptr], [0, 0], [key, key], [6000, 7000],
                                                   allow_staging=True) == [True, True]
        expected[6000:6064], expected[6064:6128] = v[size - 64:], v[:64]
        expected[7000:7064], expected[7064:7128] = v[size - 64:], v[:64]
        plan = store.prepare_get_into_ranges_plan([tpl], [key[1:]], [0])
        assert store.get_into_ranges_from_plan(snap, [plan], [ptr], ["d"], [[7500]], allow_staging=True) == [True]
        expected[7500:7564], expected[7564:7628] = v[size - 64:], v[:64]
        assert bytes(buf) == bytes(expected)
        assert store.get_tier_stats()["disk_reads"] >= 1
    finally:
        store.close()
