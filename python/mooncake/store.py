"""``mooncake.store``: the Mooncake Store client, with upstream Mooncake's Python API.

``MooncakeDistributedStore`` talks to ``mooncake_master`` (metadata) and moves values through the
process-wide transfer engine in ``libmooncake.so`` (shared memory to peers on this host, tcp
across hosts). Calls go through ctypes, which releases the GIL for their whole duration.

Return conventions follow upstream: ``put``-like calls return 0 or a negative error code
(``OBJECT_NOT_FOUND = -704``, ...); ``get`` returns ``b""`` on a miss; ``get_into`` the number of
bytes read or a negative code; ``is_exist`` 1/0/negative; ``get_size`` bytes or negative;
``remove_all``/``remove_by_regex`` counts; batch calls per-key codes; ``health_check`` 0 healthy,
1 not set up, 2 master unreachable. ``last_error()`` gives the message of the calling thread's
last failure.

Tensors: ``put_tensor`` stores a tensor (any dtype and shape, CPU or CUDA — read back on the CPU),
or a list/tuple/dict of tensors, in a self-describing format; ``get_tensor`` rebuilds it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import re
import struct
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from . import _native

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "last_error", "parse_size", "ErrorCode"]

log = logging.getLogger("mooncake.store")

_u64 = ctypes.c_uint64
_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_P = ctypes.POINTER
_cs = ctypes.c_char_p
_vp = ctypes.c_void_p


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
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    RPC_FAIL = -900
    RPC_TIMEOUT = -901


class _ReplicateConfigC(ctypes.Structure):
    _fields_ = [("replica_num", _i32), ("with_soft_pin", _i32), ("with_hard_pin", _i32),
                ("preferred_segments", _cs)]


class ReplicateConfig:
    """How a put is placed: ``replica_num`` copies on distinct segments, optional soft/hard pin,
    and preferred segments (``"host:port"`` names) tried first."""

    def __init__(self, replica_num: int = 1, with_soft_pin: bool = False,
                 with_hard_pin: bool = False, preferred_segment: str = "",
                 preferred_segments: Optional[Sequence[str]] = None):
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = list(preferred_segments or [])

    def __repr__(self) -> str:
        return (f"ReplicateConfig(replica_num={self.replica_num}, with_soft_pin={self.with_soft_pin}, "
                f"with_hard_pin={self.with_hard_pin}, preferred_segment={self.preferred_segment!r}, "
                f"preferred_segments={self.preferred_segments!r})")

    def _c(self) -> _ReplicateConfigC:
        segs = [s for s in ([self.preferred_segment] + list(self.preferred_segments)) if s]
        return _ReplicateConfigC(int(self.replica_num), int(bool(self.with_soft_pin)),
                                 int(bool(self.with_hard_pin)),
                                 ",".join(segs).encode() if segs else None)


_setup_done = False
_setup_lock = threading.Lock()


def _lib():
    global _setup_done
    l = _native.lib()
    if not _setup_done:
        with _setup_lock:
            if not _setup_done:
                cfg = _P(_ReplicateConfigC)
                sig = {
                    "mc_store_create": (ctypes.c_int, [_P(_u64)]),
                    "mc_store_setup": (ctypes.c_int, [_u64, _cs, _cs, _u64, _u64, _cs, _cs, _cs]),
                    "mc_store_close": (ctypes.c_int, [_u64]),
                    "mc_store_health_check": (ctypes.c_int, [_u64]),
                    "mc_store_get_hostname": (ctypes.c_int, [_u64, _cs, _i32]),
                    "mc_store_replica_desc": (ctypes.c_int, [_u64, _cs, _cs, _i32]),
                    "mc_store_tier_stats": (ctypes.c_int, [_u64, _cs, _i32]),
                    "mc_store_enable_ssd_offload": (ctypes.c_int, [_u64, _cs]),
                    "mc_store_offload_rpc_read_count": (ctypes.c_int, [_u64, _P(_u64)]),
                    "mc_store_register_buffer": (ctypes.c_int, [_u64, _u64, _u64]),
                    "mc_store_unregister_buffer": (ctypes.c_int, [_u64, _u64]),
                    "mc_store_put": (ctypes.c_int, [_u64, _cs, _vp, _u64, cfg]),
                    "mc_store_put_parts": (ctypes.c_int, [_u64, _cs, _P(_vp), _P(_u64), _i32, cfg]),
                    "mc_store_put_from": (ctypes.c_int, [_u64, _cs, _u64, _u64, cfg]),
                    "mc_store_batch_put": (ctypes.c_int, [_u64, _P(_cs), _P(_vp), _P(_u64), _i32, cfg, _P(_i32)]),
                    "mc_store_batch_put_from": (ctypes.c_int, [_u64, _P(_cs), _P(_u64), _P(_u64), _i32, cfg, _P(_i32)]),
                    "mc_store_get": (ctypes.c_int, [_u64, _cs, _P(_vp), _P(_u64)]),
                    "mc_store_get_into": (_i64, [_u64, _cs, _u64, _u64]),
                    "mc_store_get_with": (ctypes.c_int, [_u64, _cs, _ALLOC_FN, _vp, _P(_u64)]),
                    "mc_store_batch_get": (ctypes.c_int, [_u64, _P(_cs), _i32, _P(_vp), _P(_u64), _P(_i32)]),
                    "mc_store_batch_get_into": (ctypes.c_int, [_u64, _P(_cs), _P(_u64), _P(_u64), _i32, _P(_i64)]),
                    "mc_store_free": (None, [_vp]),
                    "mc_store_get_size": (_i64, [_u64, _cs]),
                    "mc_store_is_exist": (ctypes.c_int, [_u64, _cs]),
                    "mc_store_batch_is_exist": (ctypes.c_int, [_u64, _P(_cs), _i32, _P(_i32)]),
                    "mc_store_remove": (ctypes.c_int, [_u64, _cs, _i32]),
                    "mc_store_batch_remove": (ctypes.c_int, [_u64, _P(_cs), _i32, _i32, _P(_i32)]),
                    "mc_store_remove_by_regex": (_i64, [_u64, _cs, _i32]),
                    "mc_store_remove_all": (_i64, [_u64]),
                }
                for name, (res, args) in sig.items():
                    f = getattr(l, name)
                    f.restype = res
                    f.argtypes = args
                _setup_done = True
    return l


def last_error() -> str:
    """The message of the calling thread's last failed call."""
    return _native.last_error()


_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)


def parse_size(v: Union[int, str]) -> int:
    """Parses a size: an int, or a string like ``"4 GB"``, ``"512MB"``, ``"1.5GiB"``, ``"1024"``.
    Units are binary (1 GB = 1024**3 bytes), as in Mooncake's flags."""
    if isinstance(v, bool):
        raise ValueError(f"bad size {v!r}")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"size {v} is negative")
        return v
    m = _SIZE_RE.match(str(v))
    if not m:
        raise ValueError(f"bad size {v!r}: want a number with an optional unit (KB, MB, GB, TB)")
    mult = 1024 ** " kmgtp".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * mult)


def _key(k: Union[str, bytes]) -> bytes:
    if isinstance(k, bytes):
        return k
    if not isinstance(k, str):
        raise TypeError(f"key must be str, not {type(k).__name__}")
    return k.encode("utf-8")


def _keys(keys: Sequence[Union[str, bytes]]):
    enc = [_key(k) for k in keys]
    return (_cs * max(len(enc), 1))(*enc), enc


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


# get: the library calls back with the value's size and copies straight into a new bytes object
# (PyBytes_FromStringAndSize(NULL, n), filled before anyone else sees it) — one allocation and one
# copy, instead of a malloc'd buffer copied again by string_at.
_ALLOC_FN = ctypes.CFUNCTYPE(_vp, _vp, _u64)
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = [_vp, ctypes.c_ssize_t]
_BYTES_DATA = bytes.__basicsize__ - 1  # offset of ob_sval in a bytes object
_get_slot = threading.local()


def _get_alloc(ctx, n):
    try:
        b = _new_bytes(None, n)
    except MemoryError:
        return None
    _get_slot.value = b
    return id(b) + _BYTES_DATA


_get_alloc_c = _ALLOC_FN(_get_alloc)


def _cfg(config: Optional[ReplicateConfig]):
    return ctypes.byref(config._c()) if config is not None else None


# ---- tensor format -------------------------------------------------------------------------
# b"MCT1" | u32 header length | header JSON | padding to 64 | tensor bytes, each at a 64-aligned
# offset. The header is a tree: {"t": [dtype, shape, offset, nbytes]} for a tensor,
# {"l": [...]} list, {"u": [...]} tuple, {"d": [[key, node], ...]} dict (string keys).
_MAGIC = b"MCT1"
_ALIGN = 64


def _flatten(obj, tensors: list):
    import torch
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        tensors.append(t)
        return {"t": [str(t.dtype).replace("torch.", ""), list(t.shape), 0, t.numel() * t.element_size()]}
    if isinstance(obj, list):
        return {"l": [_flatten(x, tensors) for x in obj]}
    if isinstance(obj, tuple):
        return {"u": [_flatten(x, tensors) for x in obj]}
    if isinstance(obj, dict):
        for k in obj:
            if not isinstance(k, str):
                raise TypeError(f"put_tensor: dict keys must be str, got {type(k).__name__}")
        return {"d": [[k, _flatten(v, tensors)] for k, v in obj.items()]}
    raise TypeError(f"put_tensor: expected a tensor or a list/tuple/dict of tensors, got {type(obj).__name__}")


def _encode_tensors(obj):
    tensors: list = []
    tree = _flatten(obj, tensors)
    # assign offsets
    leaves = []

    def walk(n):
        if "t" in n:
            leaves.append(n)
        for v in n.get("l", []) + n.get("u", []):
            walk(v)
        for _, v in n.get("d", []):
            walk(v)
    walk(tree)
    # header size depends on offsets; iterate to a fixed point (offsets are relative to data start)
    off = 0
    for leaf in leaves:
        leaf["t"][2] = off
        off += (leaf["t"][3] + _ALIGN - 1) // _ALIGN * _ALIGN
    header = json.dumps(tree, separators=(",", ":")).encode()
    head_len = 8 + len(header)
    pad = (-head_len) % _ALIGN
    prefix = _MAGIC + struct.pack("<I", len(header)) + header + b"\0" * pad
    parts = [prefix]
    pos = 0
    for leaf, t in zip(leaves, tensors):
        start = leaf["t"][2]
        if start > pos:
            parts.append(b"\0" * (start - pos))
        n = leaf["t"][3]
        if n:
            parts.append((t.data_ptr(), n, t))
        pos = start + n
    return parts


def _decode_tensors(data: bytes):
    import torch
    if len(data) < 8 or data[:4] != _MAGIC:
        raise ValueError("the value was not stored by put_tensor")
    (hl,) = struct.unpack("<I", data[4:8])
    tree = json.loads(data[8:8 + hl])
    base = 8 + hl + ((-(8 + hl)) % _ALIGN)
    data_addr = ctypes.cast(ctypes.c_char_p(data), _vp).value

    def build(n):
        if "t" in n:
            dtype_name, shape, off, nbytes = n["t"]
            dtype = getattr(torch, dtype_name)
            t = torch.empty(shape, dtype=dtype)
            if nbytes:
                if base + off + nbytes > len(data) or t.numel() * t.element_size() != nbytes:
                    raise ValueError("truncated or inconsistent tensor value")
                ctypes.memmove(t.data_ptr(), data_addr + base + off, nbytes)
            return t
        if "l" in n:
            return [build(x) for x in n["l"]]
        if "u" in n:
            return tuple(build(x) for x in n["u"])
        return {k: build(v) for k, v in n["d"]}
    return build(tree)


class MooncakeDistributedStore:
    """A client of Mooncake Store. Call ``setup`` first, ``close`` at the end."""

    def __init__(self):
        self._h = 0
        self._lock = threading.Lock()

    # ---- lifecycle ----
    def setup(self, local_hostname: Union[str, Dict[str, Any]] = "localhost",
              metadata_server: str = "P2PHANDSHAKE",
              global_segment_size: Union[int, str] = 3200 * 1024 * 1024,
              local_buffer_size: Union[int, str] = 512 * 1024 * 1024,
              protocol: str = "tcp", device_name: str = "",
              master_server_address: str = "127.0.0.1:50051", enable_ssd_offload: bool = False) -> int:
        """Connects to the master and contributes ``global_segment_size`` bytes. Accepts the seven
        upstream positional arguments, or one dict with those names. Returns 0 or a negative code.

        ``enable_ssd_offload=True`` keeps evicted objects on this host's disk, in
        ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH`` (master ``--enable_offload``); the shared file
        tier (G3, the master's ``--root_fs_dir``) needs nothing here (docs/multi-tier.md)."""
        if isinstance(local_hostname, dict):
            d = dict(local_hostname)
            known = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
                     "protocol", "device_name", "master_server_address", "enable_ssd_offload"}
            unknown = set(d) - known
            if unknown:
                raise ValueError(f"setup: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
            return self.setup(d.get("local_hostname", "localhost"), d.get("metadata_server", "P2PHANDSHAKE"),
                              d.get("global_segment_size", 3200 * 1024 * 1024),
                              d.get("local_buffer_size", 512 * 1024 * 1024), d.get("protocol", "tcp"),
                              d.get("device_name", ""), d.get("master_server_address", "127.0.0.1:50051"),
                              d.get("enable_ssd_offload", False))
        seg = parse_size(global_segment_size)
        buf = parse_size(local_buffer_size)
        l = _lib()
        with self._lock:
            if self._h:
                log.error("setup: this store is already set up; close() it first")
                return ErrorCode.INVALID_PARAMS
            h = _u64()
            rc = l.mc_store_create(ctypes.byref(h))
            if rc != 0:
                return rc
            if enable_ssd_offload:
                rc = l.mc_store_enable_ssd_offload(h, b"")
            rc = rc or l.mc_store_setup(h, (local_hostname or "").encode(), (metadata_server or "").encode(), seg, buf,
                                  (protocol or "tcp").encode(), (device_name or "").encode(),
                                  (master_server_address or "").encode())
            if rc != 0:
                msg = last_error()
                l.mc_store_close(h)
                log.error("MooncakeDistributedStore.setup failed: %s", msg)
                self._setup_error = msg
                return rc
            self._h = h.value
        return 0

    def init_all(self, protocol: str, device_name: str, mount_segment_size: int = 16 * 1024 * 1024) -> int:
        """Upstream compatibility: setup from the environment (MOONCAKE_MASTER, MC_METADATA_SERVER)."""
        import os
        return self.setup(os.environ.get("MC_LOCAL_HOSTNAME", "localhost"),
                          os.environ.get("MC_METADATA_SERVER", "P2PHANDSHAKE"), mount_segment_size,
                          16 * 1024 * 1024, protocol, device_name,
                          os.environ.get("MOONCAKE_MASTER", "127.0.0.1:50051"))

    def close(self) -> int:
        """Unmounts this client's segment (replicas on other clients survive) and releases it."""
        with self._lock:
            h, self._h = self._h, 0
        if not h:
            return 0
        return _lib().mc_store_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h:
                self.close()
        except Exception:
            pass

    def health_check(self) -> int:
        """0 healthy, 1 not set up, 2 master unreachable."""
        if not self._h:
            return 1
        return _lib().mc_store_health_check(self._h)

    def get_hostname(self) -> str:
        """This client's segment name (``host:port``); "" before setup."""
        if not self._h:
            return ""
        return _native.read_string(_lib().mc_store_get_hostname, self._h, initial=256)

    # ---- storage tiers ----
    def get_replica_desc(self, key: str) -> List[Dict[str, Any]]:
        """Where ``key``'s copies live, without taking a lease: a list of dicts with ``tier``
        ("memory", "disk" for the G3 file tier, "local_disk"), ``segment_name`` (memory),
        ``path`` (disk, relative to the master's ``--root_fs_dir``), ``size`` and ``status``.
        Raises MooncakeError (e.g. OBJECT_NOT_FOUND)."""
        return json.loads(_native.read_string(_lib().mc_store_replica_desc, self._h, _key(key)))

    def get_tier_stats(self) -> Dict[str, Any]:
        """This client's tier counters: ``disk_reads`` (gets served from a G3 file),
        ``offloaded`` / ``offload_failed`` (objects this client wrote to G3), ``promoted``
        (objects copied back into memory) and ``root_fs_dir`` (the master's G3 directory)."""
        return json.loads(_native.read_string(_lib().mc_store_tier_stats, self._h))

    def get_offload_rpc_read_count(self) -> int:
        """Gets this client served by asking another client to read its local disk (SSD offload)."""
        n = _u64()
        rc = _lib().mc_store_offload_rpc_read_count(self._h, ctypes.byref(n))
        if rc < 0:
            raise _native.MooncakeError(rc, _native.last_error())
        return n.value

    # ---- buffers ----
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        return _lib().mc_store_register_buffer(self._h, int(buffer_ptr), int(size))

    def unregister_buffer(self, buffer_ptr: int) -> int:
        return _lib().mc_store_unregister_buffer(self._h, int(buffer_ptr))

    # ---- put ----
    def put(self, key: str, value, config: Optional[ReplicateConfig] = None) -> int:
        addr, n, keep = _buffer(value)
        return _lib().mc_store_put(self._h, _key(key), addr, n, _cfg(config))

    def put_parts(self, key: str, *parts, config: Optional[ReplicateConfig] = None) -> int:
        return self._put_parts(key, [_buffer(p) for p in parts], config)

    def _put_parts(self, key, bufs, config) -> int:
        n = len(bufs)
        ptrs = (_vp * max(n, 1))(*[b[0] for b in bufs])
        lens = (_u64 * max(n, 1))(*[b[1] for b in bufs])
        return _lib().mc_store_put_parts(self._h, _key(key), ptrs, lens, n, _cfg(config))

    def put_batch(self, keys: Sequence[str], values: Sequence, config: Optional[ReplicateConfig] = None) -> int:
        """Puts values[i] under keys[i]; 0 when every put succeeded, else the first failure's code."""
        res = self._batch_put(keys, values, config)
        if isinstance(res, int):
            return res
        return next((r for r in res if r != 0), 0)

    def _batch_put(self, keys, values, config):
        if len(keys) != len(values):
            raise ValueError(f"put_batch: {len(keys)} keys but {len(values)} values")
        n = len(keys)
        karr, keep_k = _keys(keys)
        bufs = [_buffer(v) for v in values]
        ptrs = (_vp * max(n, 1))(*[b[0] for b in bufs])
        lens = (_u64 * max(n, 1))(*[b[1] for b in bufs])
        out = (_i32 * max(n, 1))()
        rc = _lib().mc_store_batch_put(self._h, karr, ptrs, lens, n, _cfg(config), out)
        if rc != 0:
            return rc
        return list(out[:n])

    def put_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        """Stores ``size`` bytes at ``buffer_ptr`` (zero-copy when registered with register_buffer)."""
        return _lib().mc_store_put_from(self._h, _key(key), int(buffer_ptr), int(size), _cfg(config))

    def batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int],
                       config: Optional[ReplicateConfig] = None) -> List[int]:
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [ErrorCode.INVALID_PARAMS] * n
        karr, keep = _keys(keys)
        out = (_i32 * max(n, 1))()
        rc = _lib().mc_store_batch_put_from(self._h, karr, (_u64 * max(n, 1))(*map(int, buffer_ptrs)),
                                            (_u64 * max(n, 1))(*map(int, sizes)), n, _cfg(config), out)
        if rc != 0:
            return [rc] * n
        return list(out[:n])

    # ---- get ----
    def get(self, key: str) -> bytes:
        """The value of key, or b"" when it is missing or cannot be read."""
        n = _u64()
        slot = _get_slot
        slot.value = None
        rc = _lib().mc_store_get_with(self._h, _key(key), _get_alloc_c, None, ctypes.byref(n))
        b, slot.value = slot.value, None
        if rc != 0 or b is None or n.value != len(b):
            return b""
        return b

    def get_batch(self, keys: Sequence[str]) -> List[bytes]:
        n = len(keys)
        if n == 0:
            return []
        karr, keep = _keys(keys)
        outs = (_vp * n)()
        lens = (_u64 * n)()
        res = (_i32 * n)()
        l = _lib()
        if l.mc_store_batch_get(self._h, karr, n, outs, lens, res) != 0:
            return [b""] * n
        vals = []
        for i in range(n):
            if res[i] == 0 and outs[i]:
                vals.append(ctypes.string_at(outs[i], lens[i]))
                l.mc_store_free(outs[i])
            else:
                vals.append(b"")
        return vals

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Reads key into the buffer; bytes read or a negative code."""
        return _lib().mc_store_get_into(self._h, _key(key), int(buffer_ptr), int(size))

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> List[int]:
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [ErrorCode.INVALID_PARAMS] * n
        if n == 0:
            return []
        karr, keep = _keys(keys)
        out = (_i64 * n)()
        rc = _lib().mc_store_batch_get_into(self._h, karr, (_u64 * n)(*map(int, buffer_ptrs)),
                                            (_u64 * n)(*map(int, sizes)), n, out)
        if rc != 0:
            return [rc] * n
        return list(out)

    # ---- queries and removal ----
    def is_exist(self, key: str) -> int:
        return _lib().mc_store_is_exist(self._h, _key(key))

    def batch_is_exist(self, keys: Sequence[str]) -> List[int]:
        n = len(keys)
        if n == 0:
            return []
        karr, keep = _keys(keys)
        out = (_i32 * n)()
        rc = _lib().mc_store_batch_is_exist(self._h, karr, n, out)
        return [rc] * n if rc != 0 else list(out)

    def get_size(self, key: str) -> int:
        return _lib().mc_store_get_size(self._h, _key(key))

    def remove(self, key: str, force: bool = False) -> int:
        return _lib().mc_store_remove(self._h, _key(key), int(bool(force)))

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> List[int]:
        n = len(keys)
        if n == 0:
            return []
        karr, keep = _keys(keys)
        out = (_i32 * n)()
        rc = _lib().mc_store_batch_remove(self._h, karr, n, int(bool(force)), out)
        return [rc] * n if rc != 0 else list(out)

    def remove_by_regex(self, pattern: str, force: bool = False) -> int:
        """Removes keys matching the (RE2) pattern; returns how many, or a negative code."""
        return _lib().mc_store_remove_by_regex(self._h, pattern.encode(), int(bool(force)))

    def remove_all(self) -> int:
        """Removes every key (pinned and leased ones too); returns how many."""
        return _lib().mc_store_remove_all(self._h)

    # ---- tensors ----
    def put_tensor(self, key: str, tensor, config: Optional[ReplicateConfig] = None) -> int:
        """Stores a tensor, or a list/tuple/dict of tensors. 0 or a negative code."""
        parts = _encode_tensors(tensor)
        bufs = [p if isinstance(p, tuple) else _buffer(p) for p in parts]
        return self._put_parts(key, bufs, config)

    def get_tensor(self, key: str):
        """The tensor (or list/tuple/dict of tensors) stored by put_tensor, or None on a miss."""
        data = self.get(key)
        if not data:
            return None
        return _decode_tensors(data)

    def batch_put_tensor(self, keys: Sequence[str], tensors: Sequence,
                         config: Optional[ReplicateConfig] = None) -> List[int]:
        if len(keys) != len(tensors):
            raise ValueError(f"batch_put_tensor: {len(keys)} keys but {len(tensors)} tensors")
        blobs = []
        for t in tensors:
            parts = _encode_tensors(t)
            blobs.append(b"".join(p if isinstance(p, bytes) else ctypes.string_at(p[0], p[1]) for p in parts))
        res = self._batch_put(keys, blobs, config)
        return [res] * len(keys) if isinstance(res, int) else res

    def batch_get_tensor(self, keys: Sequence[str]) -> list:
        return [(_decode_tensors(v) if v else None) for v in self.get_batch(keys)]
