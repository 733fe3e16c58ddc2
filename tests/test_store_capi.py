"""The store's data calls of the C ABI (capi/include/mooncake_store.h) called as a C program
would: mc_store_put / mc_store_get / mc_store_is_exist / mc_store_remove with item arrays,
their per-item codes and return values (0 when the call ran, <0 when it could not run, given
to every item too), through ctypes declarations of their own (not the Python package's
binding)."""

from __future__ import annotations

import ctypes

import pytest

from mooncake import _native
from test_store import Master

_u64, _i32, _i64, _vp, _cs = ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_char_p
_P = ctypes.POINTER

OK, INVALID_KEY, INVALID_PARAMS, BUFFER_OVERFLOW = 0, -400, -600, -10
OBJECT_NOT_FOUND, OBJECT_HAS_LEASE, INTERNAL_ERROR = -704, -706, -1
MC_STORE_UPSERT = 1


class Item(ctypes.Structure):
    _fields_ = [("key", _cs), ("addrs", _P(_u64)), ("lens", _P(_u64)), ("nparts", _i32)]


ALLOC_FN = ctypes.CFUNCTYPE(_vp, _vp, _i32, _u64)


@pytest.fixture(scope="module")
def lib():
    # A CDLL of its own (the same loaded library): its function objects carry these argtypes,
    # not the package binding's.
    _native.lib()
    l = ctypes.CDLL(_native.lib_path())
    for name, res, args in [
        ("mc_store_create", ctypes.c_int, [_P(_u64)]),
        ("mc_store_setup", ctypes.c_int, [_u64, _cs, _cs, _u64, _u64, _cs, _cs, _cs]),
        ("mc_store_close", ctypes.c_int, [_u64]),
        ("mc_store_register_buffer", ctypes.c_int, [_u64, _u64, _u64]),
        ("mc_store_unregister_buffer", ctypes.c_int, [_u64, _u64]),
        ("mc_store_put", ctypes.c_int, [_u64, _P(Item), _i32, _vp, ctypes.c_uint32, _P(_i32)]),
        ("mc_store_get", ctypes.c_int, [_u64, _P(Item), _i32, _vp, _vp, _P(_u64), _P(_i32)]),
        ("mc_store_malloc", _vp, [_vp, _i32, _u64]),
        ("mc_store_free", None, [_vp]),
        ("mc_store_is_exist", ctypes.c_int, [_u64, _P(_cs), _i32, _P(_i64)]),
        ("mc_store_remove", ctypes.c_int, [_u64, _P(_cs), _i32, _i32, _P(_i32)]),
        ("mc_store_remove_all", _i64, [_u64, _i32]),
    ]:
        f = getattr(l, name)
        f.restype, f.argtypes = res, args
    return l


@pytest.fixture
def h(lib):
    m = Master()
    out = _u64()
    assert lib.mc_store_create(ctypes.byref(out)) == 0
    assert lib.mc_store_setup(out, b"127.0.0.1", b"P2PHANDSHAKE", 32 << 20, 4 << 20, b"tcp", b"", m.addr.encode()) == 0
    yield out.value
    lib.mc_store_close(out)
    m.stop()


class Items:
    """A C item array; parts are ctypes buffers (or (addr, len) pairs) kept alive with it."""

    def __init__(self, *items):
        self.keep = []
        self.arr = (Item * len(items))()
        for i, (key, parts) in enumerate(items):
            addrs, lens = [], []
            for p in parts:
                if isinstance(p, tuple):
                    addrs.append(p[0])
                    lens.append(p[1])
                else:
                    self.keep.append(p)
                    addrs.append(ctypes.addressof(p))
                    lens.append(ctypes.sizeof(p))
            a, n = (_u64 * len(parts))(*addrs), (_u64 * len(parts))(*lens)
            self.keep += [a, n]
            self.arr[i] = Item(None if key is None else key.encode(), a, n, len(parts))

    def __len__(self):
        return len(self.arr)


def buf(data: bytes):
    return ctypes.create_string_buffer(data, len(data))


def put(lib, h, items: Items, flags=0):
    codes = (_i32 * len(items))()
    rc = lib.mc_store_put(h, items.arr, len(items), None, flags, codes)
    return rc, list(codes)


def get(lib, h, items: Items, alloc=None, ctx=None):
    sizes, codes = (_u64 * len(items))(), (_i32 * len(items))()
    rc = lib.mc_store_get(h, items.arr, len(items), alloc, ctx, sizes, codes)
    return rc, list(sizes), list(codes)


def keys(*ks):
    return (_cs * len(ks))(*[None if k is None else k.encode() for k in ks])


def test_put_items_and_exact_codes(lib, h):
    rc, codes = put(lib, h, Items(("p", [buf(b"ab"), buf(b""), buf(b"cde")]), ("empty", []), (None, [buf(b"x")]),
                                  ("null", [(0, 4)]), ("q", [buf(b"queue")])))
    assert (rc, codes) == (0, [OK, INVALID_PARAMS, INVALID_KEY, INVALID_PARAMS, OK])
    assert "value size is 0" in _native.last_error()  # the first failure's message
    # one item (the single-key path); no codes array is refused
    one = Items(("single", [buf(b"one")]))
    assert lib.mc_store_put(h, one.arr, 1, None, 0, None) == INVALID_PARAMS
    assert put(lib, h, one) == (0, [OK])
    rc, sizes, codes = get(lib, h, Items(("p", [buf(b"\0" * 8)]), ("q", [buf(b"\0" * 2), buf(b"\0" * 3)]), ("single", [buf(b"\0" * 3)])))
    assert (rc, sizes, codes) == (0, [5, 5, 3], [OK, OK, OK])


def test_write_once_upsert_and_flags(lib, h):
    assert put(lib, h, Items(("u", [buf(b"old")]))) == (0, [OK])
    assert put(lib, h, Items(("u", [buf(b"ignored")]))) == (0, [OK])
    dst = buf(b"\0" * 16)
    assert get(lib, h, Items(("u", [dst])))[:2] == (0, [3]) and dst.raw[:3] == b"old"
    assert put(lib, h, Items(("u", [buf(b"ne"), buf(b"wer")]), ("u2", [buf(b"x")])), MC_STORE_UPSERT) == (0, [OK, OK])
    assert get(lib, h, Items(("u", [dst])))[:2] == (0, [5]) and dst.raw[:5] == b"newer"
    # an unknown flag: the call does not run, every item gets its code
    assert put(lib, h, Items(("u", [buf(b"z")]), ("u3", [buf(b"z")])), 2) == (INVALID_PARAMS, [INVALID_PARAMS, INVALID_PARAMS])
    assert get(lib, h, Items(("u3", [dst])))[2] == [OBJECT_NOT_FOUND]


def test_get_into_buffers_mixed(lib, h):
    assert put(lib, h, Items(("a", [buf(b"alpha")]), ("b", [buf(b"bravo!")])))[0] == 0
    big, p1, p2, small = buf(b"\0" * 10), buf(b"\0" * 2), buf(b"\0" * 4), buf(b"\0" * 3)
    rc, sizes, codes = get(lib, h, Items(("a", [big]), ("missing", [buf(b"\0")]), ("b", [small]), ("b", [p1, p2]), ("a", []), ("a", [(0, 5)])))
    assert codes == [OK, OBJECT_NOT_FOUND, BUFFER_OVERFLOW, OK, INVALID_PARAMS, INVALID_PARAMS]
    assert rc == 0 and sizes == [5, 0, 0, 6, 0, 0]
    assert big.raw[:5] == b"alpha" and p1.raw + p2.raw == b"bravo!"
    # one item: the same codes through the single-key path
    for item, code in [(("missing", [big]), OBJECT_NOT_FOUND), (("b", [small]), BUFFER_OVERFLOW), (("a", []), INVALID_PARAMS)]:
        assert get(lib, h, Items(item))[0::2] == (0, [code])


def test_get_with_allocators(lib, h):
    assert put(lib, h, Items(("x", [buf(b"xx")]), ("y", [buf(b"yyyy")])))[0] == 0
    # mc_store_malloc: item i's memory at ctx[i]
    outs = (_vp * 3)()
    rc, sizes, codes = get(lib, h, Items(("y", []), ("missing", []), ("x", [])), ctypes.cast(lib.mc_store_malloc, _vp), ctypes.cast(outs, _vp))
    assert (rc, sizes, codes) == (0, [4, 0, 2], [OK, OBJECT_NOT_FOUND, OK])
    assert outs[1] is None and ctypes.string_at(outs[0], 4) == b"yyyy" and ctypes.string_at(outs[2], 2) == b"xx"
    for p in outs:
        if p:
            lib.mc_store_free(p)
    # a caller's allocator: called in item order with each value's size; NULL gives an item up
    calls, keep = [], []

    def alloc(ctx, i, n):
        calls.append((i, n))
        if i == 2:
            return None
        b = ctypes.create_string_buffer(n)
        keep.append((i, b))
        return ctypes.addressof(b)

    fn = ALLOC_FN(alloc)
    rc, sizes, codes = get(lib, h, Items(("x", []), ("missing", []), ("y", []), ("y", [])), ctypes.cast(fn, _vp))
    assert calls == [(0, 2), (2, 4), (3, 4)]
    assert (rc, sizes, codes) == (0, [2, 0, 0, 4], [OK, OBJECT_NOT_FOUND, INTERNAL_ERROR, OK])
    assert [(i, b.raw) for i, b in keep] == [(0, b"xx"), (3, b"yyyy")]
    # buffers and an allocator in one item: refused for that item
    assert get(lib, h, Items(("x", [buf(b"\0" * 2)]), ("y", [])), ctypes.cast(fn, _vp))[2] == [INVALID_PARAMS, OK]


def test_registered_buffers(lib, h):
    region = ctypes.create_string_buffer(1 << 20)
    base = ctypes.addressof(region)
    ctypes.memmove(base, bytes(range(256)) * 16, 4096)
    assert lib.mc_store_register_buffer(h, base, 1 << 20) == 0
    try:
        assert put(lib, h, Items(("zc", [(base, 4096)]), ("zc2", [(base + 10, 6), (base + 100, 4)]))) == (0, [OK, OK])
        rc, sizes, codes = get(lib, h, Items(("zc", [(base + 8192, 4096)]), ("zc2", [(base + 20000, 10)])))
        assert (rc, sizes, codes) == (0, [4096, 10], [OK, OK])
        assert ctypes.string_at(base + 8192, 4096) == bytes(range(256)) * 16
        assert ctypes.string_at(base + 20000, 10) == bytes(range(10, 16)) + bytes(range(100, 104))
    finally:
        assert lib.mc_store_unregister_buffer(h, base) == 0


def test_exist_and_remove(lib, h):
    assert put(lib, h, Items(("e1", [buf(b"one")]), ("e2", [buf(b"second")])))[0] == 0
    res = (_i64 * 4)()
    assert lib.mc_store_is_exist(h, keys("e1", "missing", "e2", "e1"), 4, res) == 0
    assert list(res) == [3, 0, 6, 3]
    assert lib.mc_store_is_exist(h, keys("missing"), 1, res) == 0 and res[0] == 0
    assert lib.mc_store_is_exist(h, keys("e1", None), 2, res) == INVALID_KEY and list(res[:2]) == [INVALID_KEY, INVALID_KEY]
    # e1 is leased by a get: a plain remove refuses it
    assert get(lib, h, Items(("e1", [buf(b"\0" * 3)])))[0] == 0
    codes = (_i32 * 3)()
    assert lib.mc_store_remove(h, keys("e2", "missing", "e1"), 3, 0, codes) == 0
    assert list(codes) == [OK, OBJECT_NOT_FOUND, OBJECT_HAS_LEASE]
    assert lib.mc_store_remove(h, keys("e1"), 1, 0, codes) == 0 and codes[0] == OBJECT_HAS_LEASE
    assert lib.mc_store_remove_all(h, 1) == 0  # keep_held: the leased key stays
    assert lib.mc_store_remove_all(h, 0) == 1
    assert lib.mc_store_is_exist(h, keys("e1", "e2"), 2, res) == 0 and list(res[:2]) == [0, 0]


def test_calls_that_cannot_run(lib, h):
    codes = (_i32 * 2)()
    items = Items(("k", [buf(b"v")]), ("k2", [buf(b"v")]))
    bad = 987654321
    assert lib.mc_store_put(bad, items.arr, 2, None, 0, codes) == INVALID_PARAMS and list(codes) == [INVALID_PARAMS] * 2
    sizes = (_u64 * 2)(7, 7)
    assert lib.mc_store_get(bad, items.arr, 2, None, None, sizes, codes) == INVALID_PARAMS
    assert list(codes) == [INVALID_PARAMS] * 2 and list(sizes) == [0, 0]
    assert lib.mc_store_put(h, None, 2, None, 0, codes) == INVALID_PARAMS
    assert lib.mc_store_put(h, items.arr, -1, None, 0, None) == INVALID_PARAMS
    assert lib.mc_store_remove(bad, keys("k"), 1, 0, codes) == INVALID_PARAMS and codes[0] == INVALID_PARAMS
    assert lib.mc_store_get(h, items.arr, 2, None, None, sizes, None) == INVALID_PARAMS
    assert lib.mc_store_is_exist(h, keys("k"), 1, None) == INVALID_PARAMS
    # an empty request does nothing
    assert lib.mc_store_put(h, None, 0, None, 0, None) == 0
    assert lib.mc_store_get(h, None, 0, None, None, None, None) == 0
    assert lib.mc_store_is_exist(h, None, 0, None) == 0
    assert lib.mc_store_remove(h, None, 0, 0, None) == 0
