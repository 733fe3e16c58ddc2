"""``mooncake._store_abi``: the store's binding to libmooncake.so, and the only module that
speaks ctypes for it.

Everything C about the store lives here: the library (loaded once by ``mooncake._native``, the
loader the engine uses too), the argtypes/restype of every ``mc_store_*`` entry (``SIGNATURES``,
one table per family, applied on first use by ``_lib()``), the C structs (``_ReplicateConfigC``,
``_ItemC``), the allocator of the gets into bytes, the error codes and the reading of the calling
thread's last error, the marshalling of keys, buffers and configs into C arguments, and the data
calls' binding functions, one per family (``put``, ``get``, ``is_exist``, ``remove``,
``remove_all``: every put, upsert, get, query and removal method is a thin call into one). The
API modules (``mooncake.store`` and its ``_store_*`` parts) import these names and never ctypes.

Each family's table lists its entries with their signatures in the order of their C arguments
(``capi/include/mooncake_store.h``; ``mc_host_*`` in ``mooncake.h``); a change of a C entry changes its line here, and nothing
else declares one (tests/test_python_layout.py checks that).
"""

from __future__ import annotations

import ctypes
import re
import struct
import threading
from typing import Sequence, Union

from . import _native

# C types the API modules build arguments with (they import these names, not ctypes).
_u64 = ctypes.c_uint64
_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_u8 = ctypes.c_uint8
_P = ctypes.POINTER
_cs = ctypes.c_char_p
_vp = ctypes.c_void_p
# A key array argument (const char **): the packed addresses of encoded keys (_keys), or a ctypes
# array of c_char_p.
_KEYS = _vp
_int = ctypes.c_int
byref = ctypes.byref
string_buffer = ctypes.create_string_buffer


# ---- errors and structs ----------------------------------------------------------------------

class ErrorCode:
    """Mooncake Store error codes (negative; 0 is OK)."""
    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SEGMENT_NOT_FOUND = -101
    NO_AVAILABLE_HANDLE = -200
    INVALID_KEY = -400
    INVALID_PARAMS = -600
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    REPLICA_NOT_FOUND = -710
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    RPC_FAIL = -900
    RPC_TIMEOUT = -901


class _ReplicateConfigC(ctypes.Structure):
    _fields_ = [("replica_num", _i32), ("with_soft_pin", _i32), ("with_hard_pin", _i32),
                ("preferred_segments", _cs), ("soft_pin_action", _i32), ("has_soft_pin_ttl", _i32),
                ("soft_pin_ttl_ms", _u64), ("prefer_alloc_in_same_node", _i32)]


class _ItemC(ctypes.Structure):
    """``mc_store_item``: a key and its value's memory as nparts (address, length) buffers. The
    two arrays' pointers are set as addresses (void *: the same layout as uint64_t *)."""
    _fields_ = [("key", _cs), ("addrs", _vp), ("lens", _vp), ("nparts", _i32)]


# An array of items is packed in one go (struct is several times faster than filling ctypes
# structs): the key's address, the two arrays' addresses, nparts and the padding.
_ITEM = "QQQi4x"
assert struct.calcsize(_ITEM) == ctypes.sizeof(_ItemC) and struct.calcsize(_ITEM * 2) == 2 * ctypes.sizeof(_ItemC)


MC_STORE_UPSERT = 1


# ---- the allocator of the gets into new bytes ---------------------------------------------

# get / get_batch: the library calls back with item i's size and copies straight into a new bytes
# object (PyBytes_FromStringAndSize(NULL, n), filled before anyone else sees it) — one allocation
# and one copy, instead of a malloc'd buffer copied again by string_at.
_ALLOC_FN = ctypes.CFUNCTYPE(_vp, _vp, _i32, _u64)
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = [_vp, ctypes.c_ssize_t]
_BYTES_DATA = bytes.__basicsize__ - 1  # offset of ob_sval in a bytes object
_get_scratch = threading.local()


def _fresh_bytes(n):
    """A new bytes of n bytes, to be filled before anyone else sees it, and its data's address;
    (None, None) when there is no memory for it."""
    try:
        b = _new_bytes(None, n)
    except MemoryError:
        return None, None
    return b, id(b) + _BYTES_DATA


def _bytes_alloc(ctx, i, n):
    b, addr = _fresh_bytes(n)
    if b is not None:
        _get_scratch.batch[i] = b
    return addr


_bytes_alloc_c = _ALLOC_FN(_bytes_alloc)
_BYTES_ALLOC = ctypes.cast(_bytes_alloc_c, _vp).value

# The same allocator in C (python/mooncake/_bytes_alloc.c; ctx: the list of values): a ctypes
# callback costs a Python frame and the conversion of its arguments per value, which a 64-key
# get_batch of 4 KiB values paid 64 times. 0 where the extension was not built (a source tree run
# without `pip install`): the ctypes callback above then.
try:
    from ._bytes_alloc import bytes_alloc_fn as _C_BYTES_ALLOC
except ImportError:
    _C_BYTES_ALLOC = 0


# ---- signatures, by family ------------------------------------------------------------------
# name: (restype, argtypes). _cfg_p: a ReplicateConfig (NULL: the defaults).

_cfg_p = _P(_ReplicateConfigC)

# Lifecycle: create, set up (positional, JSON, as a dummy client), close, health, identity.
LIFECYCLE = {
    "mc_store_create": (_int, [_P(_u64)]),
    "mc_store_setup": (_int, [_u64, _cs, _cs, _u64, _u64, _cs, _cs, _cs]),
    "mc_store_setup_json": (_int, [_u64, _cs]),
    "mc_store_setup_dummy": (_int, [_u64, _u64, _u64, _cs]),
    "mc_store_close": (_int, [_u64]),
    "mc_store_health_check": (_int, [_u64]),
    "mc_store_get_hostname": (_int, [_u64, _cs, _i32]),
}

# Data: put and get of items (one entry each for any number of items), and library memory for
# gets (mc_store_malloc, freed with mc_store_free).
DATA = {
    "mc_store_put": (_int, [_u64, _vp, _i32, _cfg_p, ctypes.c_uint32, _P(_i32)]),
    "mc_store_get": (_int, [_u64, _vp, _i32, _vp, _vp, _P(_u64), _P(_i32)]),
    "mc_store_malloc": (_vp, [_vp, _i32, _u64]),
    "mc_store_free": (None, [_vp]),
}

# Ranged reads: direct, and session-based (snapshots, templates, plans).
RANGED = {
    "mc_store_get_ranges": (_int, [_u64, _cs, _i32, _P(_u64), _P(_u64), _P(_u64), _P(_i64)]),
    "mc_store_snapshot_prepare": (_int, [_u64, _KEYS, _i32, _P(_u64)]),
    "mc_store_snapshot_free": (_int, [_u64]),
    "mc_store_snapshot_get_ranges": (_int, [_u64, _u64, _i32, _KEYS, _vp, _vp, _vp, _vp, _i32, _vp]),
    "mc_store_range_template_create": (_int, [_vp, _i64, _vp, _i64, _vp, _i64, _P(_u64)]),
    "mc_store_range_template_free": (_int, [_u64]),
    "mc_store_range_plan_create": (_int, [_vp, _i64, _KEYS, _i32, _vp, _i64, _P(_u64), _P(_u64), _P(_u64)]),
    "mc_store_range_plan_free": (_int, [_u64]),
    "mc_store_snapshot_read_templates": (_int, [_u64, _u64, _vp, _i64, _vp, _i64, _vp, _i64, _KEYS, _i32, _vp,
                                                _i64, _i32, _vp]),
    "mc_store_snapshot_read_plans": (_int, [_u64, _u64, _vp, _i64, _vp, _i64, _KEYS, _i32, _vp, _i64, _vp, _i32,
                                            _vp]),
}

# Transfer sessions: get and put sessions and their ranged transfers (write 0: read).
SESSIONS = {
    "mc_store_get_session_start": (_int, [_u64, _KEYS, _i32, _vp]),
    "mc_store_get_session_end": (_int, [_u64, _KEYS, _i32]),
    "mc_store_put_session_start": (_int, [_u64, _KEYS, _i32, _vp, _cfg_p, _vp]),
    "mc_store_put_session_finish": (_int, [_u64, _KEYS, _i32, _i32, _vp]),
    "mc_store_session_ranges": (_int, [_u64, _i32, _i32, _KEYS, _vp, _vp, _vp, _vp, _vp]),
}

# Queries and removal.
QUERY_REMOVE = {
    "mc_store_is_exist": (_int, [_u64, _KEYS, _i32, _P(_i64)]),
    "mc_store_remove": (_int, [_u64, _KEYS, _i32, _i32, _P(_i32)]),
    "mc_store_remove_by_regex": (_i64, [_u64, _cs, _i32]),
    "mc_store_remove_all": (_i64, [_u64, _i32]),
}

# Replicas and storage tiers.
REPLICAS = {
    "mc_store_replica_desc": (_int, [_u64, _cs, _cs, _i32]),
    "mc_store_batch_replica_clear": (_int, [_u64, _KEYS, _i32, _cs, _P(_i32)]),
    "mc_store_tier_stats": (_int, [_u64, _cs, _i32]),
    "mc_store_enable_ssd_offload": (_int, [_u64, _cs]),
    "mc_store_offload_rpc_read_count": (_int, [_u64, _P(_u64)]),
}

# Memory: registered buffers, extra segments, the library's host allocator.
MEMORY = {
    "mc_store_register_buffer": (_int, [_u64, _u64, _u64]),
    "mc_store_unregister_buffer": (_int, [_u64, _u64]),
    "mc_store_mount_segment": (_int, [_u64, _cs, _u64, _u64, _cs, _i32]),
    "mc_store_allocate_and_mount_segment": (_int, [_u64, _u64, _P(_u64), _cs, _i32]),
    "mc_store_unmount_segments": (_int, [_u64, _KEYS, _i32, _i32, ctypes.c_uint32]),
    "mc_store_unmount_local_disk_segment": (_int, [_u64, _u64]),
    "mc_host_alloc": (_vp, [ctypes.c_size_t]),
    "mc_host_free": (None, [_vp]),
}

FAMILIES = {"lifecycle": LIFECYCLE, "data": DATA, "ranged": RANGED, "sessions": SESSIONS,
            "query_remove": QUERY_REMOVE, "replicas": REPLICAS, "memory": MEMORY}
SIGNATURES = {name: sig for family in FAMILIES.values() for name, sig in family.items()}

def _lib():
    """The library, with every store entry's signature set (on the first call)."""
    return _native.declare("store", SIGNATURES)


# ---- the calling thread's last error ------------------------------------------------------------

def last_error() -> str:
    """The message of the calling thread's last failed call."""
    return _native.last_error()


_LIB_MSG = re.compile(r"^mooncake store: (.*?)(?: \([A-Z_]+, -?\d+\))?$", re.S)


def _lib_message() -> str:
    """The calling thread's last error without the library's prefix and code suffix."""
    msg = last_error()
    m = _LIB_MSG.match(msg)
    return m.group(1) if m else msg


# ---- arguments --------------------------------------------------------------------------------

def _key(k: Union[str, bytes]) -> bytes:
    if isinstance(k, bytes):
        return k
    if not isinstance(k, str):
        raise TypeError(f"key must be str, not {type(k).__name__}")
    return k.encode("utf-8")


def _enc(keys) -> list:
    """keys as bytes (_key; a plain str takes the short way)."""
    return [k.encode() if type(k) is str else _key(k) for k in keys]


def _keys(keys: Sequence[Union[str, bytes]]):
    """The C array of keys (const char **: the addresses of their encoded bytes, each
    NUL-terminated, packed) and the encoded keys, which must stay alive through the call. Packing
    the addresses took 10 us for 64 keys where a ctypes array of c_char_p took 24."""
    enc = _enc(keys)
    addrs = [id(k) + _BYTES_DATA for k in enc] or [0]
    return struct.pack("%dQ" % len(addrs), *addrs), enc


def _buffer(v) -> tuple:
    """(address, length, keepalive) of a bytes-like value without copying where possible."""
    if isinstance(v, bytes):
        return ctypes.cast(ctypes.c_char_p(v), _vp).value or 0, len(v), v
    mv = memoryview(v)
    if not mv.contiguous:
        b = mv.tobytes()
        return ctypes.cast(ctypes.c_char_p(b), _vp).value or 0, len(b), b
    mv = mv.cast("B")
    n = mv.nbytes
    if n == 0:
        return 0, 0, mv
    if mv.readonly:
        b = mv.tobytes()
        return ctypes.cast(ctypes.c_char_p(b), _vp).value or 0, n, b
    arr = (ctypes.c_char * n).from_buffer(mv)
    return ctypes.addressof(arr), n, (arr, mv)



def _cfg(config):
    """A ReplicateConfig as the C argument (NULL for None: the defaults)."""
    return ctypes.byref(config._c()) if config is not None else None


def _free_value(ptr: int) -> None:
    """Frees a value the library allocated (a get into library memory)."""
    _lib().mc_store_free(ptr)


def _host_alloc_addr() -> int:
    """The address of the library's host allocator, ``void *mc_host_alloc(size_t)``."""
    return ctypes.cast(_lib().mc_host_alloc, _vp).value or 0


def _host_free_addr() -> int:
    """The address of ``void mc_host_free(void *)``, which frees what mc_host_alloc returned."""
    return ctypes.cast(_lib().mc_host_free, _vp).value or 0


# ---- the data calls: one binding function per family ------------------------------------------
# Each takes keys (and the items' memory as (address, length) pairs), makes its one C call and
# returns one result per item. A call that cannot run gives its code to every item (the C side
# fills the per-item arrays then too), so the results alone tell each item's fate.

BYTES = "bytes"    # get into new bytes objects
MALLOC = "malloc"  # get into library memory (freed with mc_store_free)
_malloc_fn = []


class _Scratch:
    """One thread's C arguments of a call on one key with at most one buffer (the common call),
    reused from call to call instead of built anew: a call never nests on a thread."""

    def __init__(self):
        self.part = (_u64 * 2)()  # the buffer's address and length
        self.item = _ItemC(None, ctypes.addressof(self.part), ctypes.addressof(self.part) + 8, 0)
        self.code = (_i32 * 1)()
        self.size = (_u64 * 1)()
        self.key = (_cs * 1)()
        self.res = (_i64 * 1)()

    def one(self, key, parts):
        """The item of key with parts (at most one (address, length) pair)."""
        it = self.item
        it.key = _key(key)
        if parts:
            self.part[0], self.part[1] = int(parts[0][0]) & _U64, int(parts[0][1]) & _U64
            it.nparts = 1
        else:
            it.nparts = 0
        return it


_tls = threading.local()


def _scratch(keys, parts) -> "_Scratch | None":
    """This thread's scratch arguments when the call is on one key with at most one buffer."""
    if len(keys) != 1 or (parts is not None and len(parts[0]) > 1):
        return None
    try:
        return _tls.s
    except AttributeError:
        _tls.s = _Scratch()
        return _tls.s


_U64 = (1 << 64) - 1


def _items(keys, parts):
    """C items (an mc_store_item array, packed): keys[i] with the buffers parts[i] ((address,
    length) pairs; none when parts is None). Returns the array and what keeps alive the memory
    it points to. A key's address is its bytes object's data (NUL-terminated)."""
    enc = _enc(keys)
    vals = []
    if parts is None:
        for k in enc:
            vals += (id(k) + _BYTES_DATA, 0, 0, 0)
        return struct.pack(_ITEM * len(enc), *vals), enc
    flat = [p for ps in parts for p in ps]
    a = struct.pack("%dQ" % len(flat), *[int(p[0]) & _U64 for p in flat])
    l = struct.pack("%dQ" % len(flat), *[int(p[1]) & _U64 for p in flat])
    pa, pl = id(a) + _BYTES_DATA, id(l) + _BYTES_DATA
    for k, ps in zip(enc, parts):
        vals += (id(k) + _BYTES_DATA, pa, pl, len(ps))
        pa += 8 * len(ps)
        pl += 8 * len(ps)
    return struct.pack(_ITEM * len(enc), *vals), (enc, a, l)


def put(h: int, keys, parts, config, upsert: bool = False) -> list:
    """mc_store_put: stores keys[i] as the concatenation of the buffers parts[i] (write-once, or
    replacing with upsert); one code per item."""
    n = len(keys)
    if n == 0:
        return []
    flags = MC_STORE_UPSERT if upsert else 0
    s = _scratch(keys, parts)
    if s is not None:
        _lib().mc_store_put(h, byref(s.one(keys[0], parts[0])), 1, _cfg(config), flags, s.code)
        return [s.code[0]]
    arr, keep = _items(keys, parts)
    codes = (_i32 * n)()
    _lib().mc_store_put(h, arr, n, _cfg(config), flags, codes)
    return list(codes)


def get(h: int, keys, parts=None, memory=None):
    """mc_store_get: reads keys[i] into the buffers parts[i] or, with memory, into new memory of
    that kind: BYTES (a bytes per item) or MALLOC (library memory). Returns (results, codes): per
    item its code, and its size (into buffers), its bytes or its (address, size) (MALLOC: free it
    with mc_store_free) — None for an item that failed with memory (MALLOC memory freed here)."""
    n = len(keys)
    if n == 0:
        return [], []
    s = _scratch(keys, parts)
    if s is not None:
        arr, sizes, codes = byref(s.one(keys[0], parts and parts[0])), s.size, s.code
    else:
        arr, keep = _items(keys, parts)
        sizes = (_u64 * n)()
        codes = (_i32 * n)()
    l = _lib()
    if memory is None:
        l.mc_store_get(h, arr, n, None, None, sizes, codes)
        return sizes[:n], codes[:n]
    if memory == BYTES:
        vals = [None] * n
        if _C_BYTES_ALLOC:
            l.mc_store_get(h, arr, n, _C_BYTES_ALLOC, id(vals), sizes, codes)
        else:
            scratch = _get_scratch
            scratch.batch = vals
            try:
                l.mc_store_get(h, arr, n, _BYTES_ALLOC, None, sizes, codes)
            finally:
                scratch.batch = None
        # bytes made for an item that then failed hold no value
        return [v if c == 0 and v is not None and len(v) == z else None
                for v, c, z in zip(vals, codes, sizes)], codes[:n]
    if not _malloc_fn:
        _malloc_fn.append(ctypes.cast(l.mc_store_malloc, _vp).value)
    outs = (_vp * n)()
    l.mc_store_get(h, arr, n, _malloc_fn[0], ctypes.cast(outs, _vp), sizes, codes)
    res = []
    for p, c, z in zip(outs, codes[:n], sizes[:n]):
        if c == 0 and p:
            res.append((p, z))
            continue
        if p:
            l.mc_store_free(p)
        res.append(None)
    return res, codes[:n]


def _key_args(keys, wide: bool):
    """The C key array of a call on keys and its per-key result array (int64 when wide, else
    int32); this thread's scratch ones for one key. Returns them and what keeps the keys alive."""
    s = _scratch(keys, None)
    if s is not None:
        s.key[0] = _key(keys[0])
        return s.key, (s.res if wide else s.code), None
    karr, keep = _keys(keys)
    return karr, ((_i64 if wide else _i32) * len(keys))(), keep


def is_exist(h: int, keys) -> list:
    """mc_store_is_exist: per key its value's size (> 0) when it is stored, 0 when it is not, or
    a negative code."""
    if not keys:
        return []
    karr, out, keep = _key_args(keys, True)
    _lib().mc_store_is_exist(h, karr, len(keys), out)
    return out[:len(keys)]


def remove(h: int, keys, force: bool) -> list:
    """mc_store_remove: one code per key; force removes leased and hard-pinned keys too."""
    if not keys:
        return []
    karr, out, keep = _key_args(keys, False)
    _lib().mc_store_remove(h, karr, len(keys), int(bool(force)), out)
    return out[:len(keys)]


def remove_all(h: int, keep_held: bool) -> int:
    """mc_store_remove_all: how many keys of the store's tenant were removed, or a negative code;
    keep_held leaves those a plain remove would refuse (leased, hard-pinned)."""
    return _lib().mc_store_remove_all(h, int(bool(keep_held)))
