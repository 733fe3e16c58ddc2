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

Beyond put/get: ``upsert*`` (insert or replace, swapped atomically by the master), zero-copy
``get_buffer`` (BufferHandle), ranged and multi-buffer reads and writes, session-based ranged
reads (``prepare_get_into_ranges_snapshot``: RangedReadSnapshot, templates, plans), replica
descriptors, ``batch_replica_clear``, copy/move tasks and extra segments. docs/store.md lists every method of
upstream's reference with what it does here.

Tensors: ``put_tensor`` stores a tensor (any dtype and shape, CPU or CUDA — read back on the CPU),
or a list/tuple/dict of tensors, in a self-describing format; ``get_tensor`` rebuilds it. The
tensor calls (TP, parallelism, safetensors, CUDA) live in ``mooncake.store_tensor.TensorMixin``.
"""

from __future__ import annotations

import array
import ctypes
import enum
import json
import logging
import os
import platform
import re
import struct
import threading
import time
import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from . import _native
from .store_tensor import ParallelAxis, ReadTarget, TensorMixin, TensorParallelism

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "last_error", "parse_size", "ErrorCode",
           "BufferHandle", "ReplicaDescriptor", "ReplicaStatus", "MemoryDescriptor", "DiskDescriptor",
           "BufferDescriptor", "LocalDiskDescriptor", "MooncakeHostMemAllocator", "TaskType", "TaskStatus",
           "QueryTaskResponse", "ParallelAxis", "TensorParallelism", "ReadTarget", "RangedReadSnapshot",
           "ObjectDataType", "Descriptor", "BufferPool", "BufferLease", "BufferLeaseView", "RegisteredBufferPool",
           "RegisteredBufferLease", "RegisteredBufferLeaseView", "bind_to_numa_node", "get_alloc_func_addr",
           "get_free_func_addr"]

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
    REPLICA_NOT_FOUND = -710
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    RPC_FAIL = -900
    RPC_TIMEOUT = -901


class _ReplicateConfigC(ctypes.Structure):
    _fields_ = [("replica_num", _i32), ("with_soft_pin", _i32), ("with_hard_pin", _i32),
                ("preferred_segments", _cs), ("soft_pin_action", _i32), ("has_soft_pin_ttl", _i32),
                ("soft_pin_ttl_ms", _u64), ("prefer_alloc_in_same_node", _i32)]


class SoftPinAction(enum.IntEnum):
    """What a put does to the key's soft pin (upstream's values). ``PRESERVE``: a new key is not
    pinned, an upserted key keeps the pin it had; ``ENABLE``: pin it (for ``soft_pin_ttl_ms``, or
    the master's ``--default_kv_soft_pin_ttl``); ``DISABLE``: an upserted key loses its pin."""
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    """What an object holds (upstream's values), set with ``ReplicateConfig.data_type``."""
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


def _check_count(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"ReplicateConfig.{name} must be an int, not {type(v).__name__}")
    if v < 0:
        raise ValueError(f"ReplicateConfig.{name} must be >= 0, got {v}")
    return v


def _check_enum(cls, name: str, v, what: str):
    """v as a member of the IntEnum cls, for ReplicateConfig.<name> (TypeError for a non-int,
    ValueError, naming what is allowed, for an int that is no member)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"ReplicateConfig.{name} must be a {cls.__name__}, not {type(v).__name__}")
    try:
        return cls(v)
    except ValueError:
        raise ValueError(f"ReplicateConfig.{name} {v!r} is not {what}") from None


class ReplicateConfig:
    """How a put is placed (upstream's properties; defaults as upstream's).

    Wired to the master: ``replica_num`` (copies on distinct segments), ``with_soft_pin`` /
    ``soft_pin_action`` / ``soft_pin_ttl_ms`` (soft pins, their TTL), ``with_hard_pin`` (never
    evicted), ``preferred_segment`` / ``preferred_segments`` (``"host:port"`` segments tried
    first), ``prefer_alloc_in_same_node`` (this client's own segment first).
    Accepted and ignored (see docs/store.md): ``nof_replica_num`` (NVMe-oF replicas: no NVMe-oF
    tier in this build), ``dfs_replica_num`` (objects reach the shared file tier by eviction
    instead), ``group_ids`` (routing groups; checked for length, then unused: there is one
    master), ``data_type`` (an ``ObjectDataType``; checked, then unused: placement here does not
    depend on what an object holds)."""

    __slots__ = ("_replica_num", "_nof_replica_num", "_dfs_replica_num", "_soft_pin_action",
                 "_soft_pin_ttl_ms", "with_hard_pin", "preferred_segment", "_preferred_segments",
                 "_prefer_alloc_in_same_node", "_group_ids", "_data_type")

    def __init__(self, replica_num: int = 1, with_soft_pin: bool = False,
                 with_hard_pin: bool = False, preferred_segment: str = "",
                 preferred_segments: Optional[Sequence[str]] = None, *,
                 nof_replica_num: int = 0, dfs_replica_num: int = 0,
                 soft_pin_action: Optional[SoftPinAction] = None,
                 soft_pin_ttl_ms: Optional[int] = None, prefer_alloc_in_same_node: bool = False,
                 group_ids: Optional[Sequence[str]] = None,
                 data_type: "ObjectDataType" = ObjectDataType.UNKNOWN):
        self.replica_num = replica_num
        self.nof_replica_num = nof_replica_num
        self.dfs_replica_num = dfs_replica_num
        self._soft_pin_action = SoftPinAction.PRESERVE
        self.with_soft_pin = with_soft_pin
        if soft_pin_action is not None:
            self.soft_pin_action = soft_pin_action
        self._soft_pin_ttl_ms = None
        self.soft_pin_ttl_ms = soft_pin_ttl_ms
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = preferred_segments or []
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.group_ids = group_ids
        self.data_type = data_type

    @property
    def replica_num(self) -> int:
        return self._replica_num

    @replica_num.setter
    def replica_num(self, v: int):
        self._replica_num = _check_count("replica_num", v)

    @property
    def nof_replica_num(self) -> int:
        return self._nof_replica_num

    @nof_replica_num.setter
    def nof_replica_num(self, v: int):
        self._nof_replica_num = _check_count("nof_replica_num", v)

    @property
    def dfs_replica_num(self) -> int:
        return self._dfs_replica_num

    @dfs_replica_num.setter
    def dfs_replica_num(self, v: int):
        self._dfs_replica_num = _check_count("dfs_replica_num", v)

    @property
    def soft_pin_action(self) -> SoftPinAction:
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, v):
        self._soft_pin_action = _check_enum(SoftPinAction, "soft_pin_action", v, "PRESERVE (0), ENABLE (1) or DISABLE (2)")

    @property
    def with_soft_pin(self) -> bool:
        """True when the soft pin is enabled (``soft_pin_action == ENABLE``)."""
        return self._soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v: bool):
        if v:
            self._soft_pin_action = SoftPinAction.ENABLE
        elif self._soft_pin_action == SoftPinAction.ENABLE:
            self._soft_pin_action = SoftPinAction.PRESERVE

    @property
    def soft_pin_ttl_ms(self) -> Optional[int]:
        """The soft pin's TTL in ms, or None for the master's default. Needs ``soft_pin_action``
        ENABLE (a put with a TTL and no pin fails with INVALID_PARAMS)."""
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, v: Optional[int]):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"ReplicateConfig.soft_pin_ttl_ms must be an int or None, not {type(v).__name__}")
            if v < 0 or v >= 1 << 64:
                raise TypeError(f"ReplicateConfig.soft_pin_ttl_ms must be in [0, 2**64), got {v}")
        self._soft_pin_ttl_ms = v

    @property
    def preferred_segments(self) -> List[str]:
        return self._preferred_segments

    @preferred_segments.setter
    def preferred_segments(self, v: Sequence[str]):
        if isinstance(v, str):
            raise TypeError("ReplicateConfig.preferred_segments must be a list of str, not a str")
        v = list(v)
        for seg in v:
            if not isinstance(seg, str) or "," in seg:
                raise ValueError(f"ReplicateConfig.preferred_segments: bad segment name {seg!r}")
        self._preferred_segments = v

    @property
    def prefer_alloc_in_same_node(self) -> bool:
        return self._prefer_alloc_in_same_node

    @prefer_alloc_in_same_node.setter
    def prefer_alloc_in_same_node(self, v):
        # upstream's reference shows a string ("True"); accept bools and the usual spellings
        if isinstance(v, str):
            low = v.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no", "on", "off", ""):
                raise ValueError(f"ReplicateConfig.prefer_alloc_in_same_node: {v!r} is not a boolean")
            v = low in ("true", "1", "yes", "on")
        self._prefer_alloc_in_same_node = bool(v)

    @property
    def group_ids(self) -> Optional[List[str]]:
        return self._group_ids

    @group_ids.setter
    def group_ids(self, v: Optional[Sequence[str]]):
        if v is not None:
            if isinstance(v, str):
                raise TypeError("ReplicateConfig.group_ids must be a list of str or None, not a str")
            v = list(v)
            for g in v:
                if not isinstance(g, str):
                    raise TypeError(f"ReplicateConfig.group_ids: {g!r} is not a str")
        self._group_ids = v

    @property
    def data_type(self) -> ObjectDataType:
        return self._data_type

    @data_type.setter
    def data_type(self, v):
        self._data_type = _check_enum(ObjectDataType, "data_type", v, "an ObjectDataType (0..9)")

    def __repr__(self) -> str:
        return (f"ReplicateConfig(replica_num={self.replica_num}, soft_pin_action={self.soft_pin_action.name}, "
                f"soft_pin_ttl_ms={self.soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
                f"preferred_segment={self.preferred_segment!r}, preferred_segments={self.preferred_segments!r}, "
                f"prefer_alloc_in_same_node={self.prefer_alloc_in_same_node}, nof_replica_num={self.nof_replica_num}, "
                f"dfs_replica_num={self.dfs_replica_num}, group_ids={self.group_ids!r}, "
                f"data_type={self.data_type.name})")

    __str__ = __repr__

    def _c(self) -> _ReplicateConfigC:
        segs = [s for s in ([self.preferred_segment] + list(self.preferred_segments)) if s]
        ttl = self._soft_pin_ttl_ms
        return _ReplicateConfigC(int(self.replica_num), int(self.with_soft_pin),
                                 int(bool(self.with_hard_pin)),
                                 ",".join(segs).encode() if segs else None,
                                 int(self._soft_pin_action), int(ttl is not None), ttl or 0,
                                 int(self._prefer_alloc_in_same_node))

    def _groups_ok(self, n: int) -> bool:
        return self._group_ids is None or len(self._group_ids) == n


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
                    "mc_store_setup_json": (ctypes.c_int, [_u64, _cs]),
                    "mc_store_setup_dummy": (ctypes.c_int, [_u64, _u64, _u64, _cs]),
                    "mc_store_get_ranges": (ctypes.c_int, [_u64, _cs, _i32, _P(_u64), _P(_u64), _P(_u64), _P(_i64)]),
                    "mc_store_get_into_buffers": (_i64, [_u64, _cs, _i32, _P(_u64), _P(_u64)]),
                    "mc_store_snapshot_prepare": (ctypes.c_int, [_u64, _P(_cs), _i32, _P(_u64)]),
                    "mc_store_snapshot_free": (ctypes.c_int, [_u64]),
                    "mc_store_snapshot_get_ranges": (ctypes.c_int, [_u64, _u64, _i32, _P(_cs), _vp, _vp, _vp, _vp, _i32, _vp]),
                    "mc_store_range_template_create": (ctypes.c_int, [_vp, _i64, _vp, _i64, _vp, _i64, _P(_u64)]),
                    "mc_store_range_template_free": (ctypes.c_int, [_u64]),
                    "mc_store_range_plan_create": (ctypes.c_int, [_vp, _i64, _P(_cs), _i32, _vp, _i64, _P(_u64), _P(_u64), _P(_u64)]),
                    "mc_store_range_plan_free": (ctypes.c_int, [_u64]),
                    "mc_store_snapshot_read_templates": (ctypes.c_int, [_u64, _u64, _vp, _i64, _vp, _i64, _vp, _i64, _P(_cs), _i32, _vp, _i64, _i32, _vp]),
                    "mc_store_snapshot_read_plans": (ctypes.c_int, [_u64, _u64, _vp, _i64, _vp, _i64, _P(_cs), _i32, _vp, _i64, _vp, _i32, _vp]),
                    "mc_store_batch_put_from_buffers": (ctypes.c_int, [_u64, _P(_cs), _i32, _P(_i32), _P(_u64), _P(_u64), cfg, _P(_i32)]),
                    "mc_store_batch_replica_clear": (ctypes.c_int, [_u64, _P(_cs), _i32, _cs, _P(_i32)]),
                    "mc_store_mount_segment": (ctypes.c_int, [_u64, _cs, _u64, _u64, _cs, _i32]),
                    "mc_store_allocate_and_mount_segment": (ctypes.c_int, [_u64, _u64, _P(_u64), _cs, _i32]),
                    "mc_store_unmount_segments": (ctypes.c_int, [_u64, _P(_cs), _i32, _i32, ctypes.c_uint32]),
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
                    "mc_store_upsert": (ctypes.c_int, [_u64, _cs, _vp, _u64, cfg]),
                    "mc_store_upsert_parts": (ctypes.c_int, [_u64, _cs, _P(_vp), _P(_u64), _i32, cfg]),
                    "mc_store_upsert_from": (ctypes.c_int, [_u64, _cs, _u64, _u64, cfg]),
                    "mc_store_batch_upsert": (ctypes.c_int, [_u64, _P(_cs), _P(_vp), _P(_u64), _i32, cfg, _P(_i32)]),
                    "mc_store_batch_upsert_from": (ctypes.c_int, [_u64, _P(_cs), _P(_u64), _P(_u64), _i32, cfg, _P(_i32)]),
                    "mc_store_get": (ctypes.c_int, [_u64, _cs, _P(_vp), _P(_u64)]),
                    "mc_store_get_into": (_i64, [_u64, _cs, _u64, _u64]),
                    "mc_store_get_with": (ctypes.c_int, [_u64, _cs, _ALLOC_FN, _vp, _P(_u64)]),
                    "mc_store_batch_get": (ctypes.c_int, [_u64, _P(_cs), _i32, _P(_vp), _P(_u64), _P(_i32)]),
                    "mc_store_batch_get_with": (ctypes.c_int, [_u64, _P(_cs), _i32, _BATCH_ALLOC_FN, _vp, _P(_u64), _P(_i32)]),
                    "mc_store_batch_get_into": (ctypes.c_int, [_u64, _P(_cs), _P(_u64), _P(_u64), _i32, _P(_i64)]),
                    "mc_store_free": (None, [_vp]),
                    "mc_host_alloc": (_vp, [ctypes.c_size_t]),
                    "mc_host_free": (None, [_vp]),
                    "mc_store_get_size": (_i64, [_u64, _cs]),
                    "mc_store_is_exist": (ctypes.c_int, [_u64, _cs]),
                    "mc_store_batch_is_exist": (ctypes.c_int, [_u64, _P(_cs), _i32, _P(_i32)]),
                    "mc_store_remove": (ctypes.c_int, [_u64, _cs, _i32]),
                    "mc_store_batch_remove": (ctypes.c_int, [_u64, _P(_cs), _i32, _i32, _P(_i32)]),
                    "mc_store_remove_by_regex": (_i64, [_u64, _cs, _i32]),
                    "mc_store_remove_all": (_i64, [_u64]),
                    "mc_store_remove_all_ex": (_i64, [_u64, _i32]),
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


def parse_size(v: Union[int, str], name: str = "size") -> int:
    """Parses a size: an int, or a string like ``"4 GB"``, ``"512MB"``, ``"1.5GiB"``, ``"80g"``,
    ``"1024"``. Units are binary (1 GB = 1024**3 bytes), as upstream's. A percentage or an
    unknown unit raises ValueError naming ``name`` (the setting being parsed)."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"{name}: bad size {v!r}: want an int or a string such as \"4GB\"")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"{name}: size {v} is negative")
        return v
    m = _SIZE_RE.match(v)
    if not m:
        raise ValueError(f"{name}: bad size {v!r}: want a number with an optional unit "
                         f"(B, KB, MB, GB, TB, PB; K/M/G/T; KiB...), e.g. \"80GB\"")
    mult = 1024 ** " kmgtp".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * mult)


# setup()'s defaults (upstream's).
DEFAULT_SETUP_GLOBAL_SEGMENT_SIZE = 16 * 1024 * 1024
DEFAULT_SETUP_LOCAL_BUFFER_SIZE = 1024 * 1024 * 1024
# the staging buffer the Go client keeps for zero-copy calls from unregistered memory when
# setup asked for no local buffer (local_buffer_size=0)
_NO_BUFFER_STAGING = 16 * 1024 * 1024

# setup(dict) keys: upstream's positional names, MooncakeConfig's spellings, and keys that config
# files carry and that mean nothing here.
_SETUP_KEYS = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
               "protocol", "rdma_devices", "master_server_addr", "engine", "enable_ssd_offload",
               "ssd_offload_path", "tenant_id"}
_SETUP_ALIASES = {"device_name": "rdma_devices", "master_server_address": "master_server_addr"}
_SETUP_IGNORED = {"mode", "enable_egm_store_pool", "egm_numa_nodes"}


def _is_mooncake_config(x) -> bool:
    return type(x).__name__ == "MooncakeConfig" and hasattr(x, "to_setup_dict")


def _parse_bool(v, name: str) -> bool:
    """A boolean setting from a bool, a number or a string (true/false, 1/0, yes/no, on/off)."""
    if isinstance(v, bool) or v is None:
        return bool(v)
    if isinstance(v, (int, float)):
        return v != 0
    low = str(v).strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off", ""):
        return False
    raise ValueError(f"{name}: {v!r} is not a boolean")


def _setup_kwargs(d: Dict[str, Any]) -> Dict[str, Any]:
    """setup()'s keyword arguments from a config dict (upstream's keys)."""
    known = _SETUP_KEYS | set(_SETUP_ALIASES) | _SETUP_IGNORED
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"setup: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if k in _SETUP_IGNORED:
            continue
        key = _SETUP_ALIASES.get(k, k)
        if key in out:
            raise ValueError(f"setup: both {k!r} and {key!r} given")
        if key in ("global_segment_size", "local_buffer_size"):
            v = parse_size(v, key)
        elif key == "enable_ssd_offload":
            v = _parse_bool(v, key)
        out[key] = v
    return out


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


def _fresh_bytes(n):
    """A new bytes of n bytes, to be filled before anyone else sees it, and its data's address;
    (None, None) when there is no memory for it."""
    try:
        b = _new_bytes(None, n)
    except MemoryError:
        return None, None
    return b, id(b) + _BYTES_DATA


def _get_alloc(ctx, n):
    _get_slot.value, addr = _fresh_bytes(n)
    return addr


_get_alloc_c = _ALLOC_FN(_get_alloc)

# get_batch: the same, once per key (i), into the list the call is filling.
_BATCH_ALLOC_FN = ctypes.CFUNCTYPE(_vp, _vp, _i32, _u64)


def _batch_alloc(ctx, i, n):
    b, addr = _fresh_bytes(n)
    if b is not None:
        _get_slot.batch[i] = b
    return addr


_batch_alloc_c = _BATCH_ALLOC_FN(_batch_alloc)


def _cfg(config: Optional[ReplicateConfig]):
    return ctypes.byref(config._c()) if config is not None else None


# ---- BufferHandle: a value in library-owned memory ----------------------------------------

class BufferHandle:
    """A stored value in memory the library allocated (from get_buffer): ``ptr()`` its address,
    ``size()`` its length, and the buffer protocol (``memoryview(h)``, ``np.array(h, copy=False)``,
    ``bytes(h)``) without a copy. The memory is freed when the handle and every view of it are
    gone. Instances are ctypes arrays of unsigned bytes of the value's length."""

    __slots__ = ()
    _free_ptr: int

    def ptr(self) -> int:
        return ctypes.addressof(self)

    def size(self) -> int:
        return ctypes.sizeof(self)

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"BufferHandle(ptr={self.ptr():#x}, size={self.size()})"

    @staticmethod
    def _wrap(ptr: int, n: int) -> "BufferHandle":
        cls = _handle_types.get(n)
        if cls is None:
            cls = type("BufferHandle", (BufferHandle, ctypes.Array), {"_type_": ctypes.c_ubyte, "_length_": n,
                                                                        "__del__": _handle_del})
            if len(_handle_types) < 256:
                _handle_types[n] = cls
        h = cls.from_address(ptr)
        h._free_ptr = ptr
        return h


_handle_types: Dict[int, type] = {}


def _handle_del(self):
    p = getattr(self, "_free_ptr", 0)
    if p:
        self._free_ptr = 0
        try:
            _lib().mc_store_free(p)
        except Exception:
            pass


# ---- replica descriptors ------------------------------------------------------------------

class ReplicaStatus(enum.IntEnum):
    """A replica's state (upstream's values)."""
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class BufferDescriptor:
    """Where a memory replica lives: ``buffer_address`` in the segment ``transport_endpoint``."""

    def __init__(self, size: int = 0, buffer_address: int = 0, protocol: str = "", transport_endpoint: str = ""):
        self.size, self.buffer_address = size, buffer_address
        self.protocol, self.transport_endpoint = protocol, transport_endpoint

    def __repr__(self) -> str:
        return (f"BufferDescriptor(size={self.size}, buffer_address={self.buffer_address:#x}, "
                f"protocol={self.protocol!r}, transport_endpoint={self.transport_endpoint!r})")


class MemoryDescriptor:
    def __init__(self, buffer_descriptor: BufferDescriptor):
        self.buffer_descriptor = buffer_descriptor

    def __repr__(self) -> str:
        return f"MemoryDescriptor({self.buffer_descriptor!r})"


class DiskDescriptor:
    """A replica in the shared file tier: ``file_path`` (relative to the master's
    ``--root_fs_dir``) and ``object_size``."""

    def __init__(self, file_path: str, object_size: int):
        self.file_path, self.object_size = file_path, object_size

    def __repr__(self) -> str:
        return f"DiskDescriptor(file_path={self.file_path!r}, object_size={self.object_size})"


class LocalDiskDescriptor:
    def __init__(self, client_id: str, object_size: int, transport_endpoint: str):
        self.client_id, self.object_size, self.transport_endpoint = client_id, object_size, transport_endpoint


class ReplicaDescriptor:
    """One copy of an object (from get_replica_desc). Also readable as a dict with the keys
    ``tier``, ``segment_name``, ``path``, ``offset``, ``size``, ``status``."""

    def __init__(self, d: Dict[str, Any]):
        self._d = d
        self.status = ReplicaStatus[d.get("status", "UNDEFINED")] if d.get("status") in ReplicaStatus.__members__ \
            else ReplicaStatus.UNDEFINED

    def is_memory_replica(self) -> bool:
        return self._d.get("tier") == "memory"

    def is_disk_replica(self) -> bool:
        return self._d.get("tier") == "disk"

    def is_local_disk_replica(self) -> bool:
        return self._d.get("tier") == "local_disk"

    def get_memory_descriptor(self) -> MemoryDescriptor:
        if not self.is_memory_replica():
            raise TypeError(f"not a memory replica ({self._d.get('tier')})")
        return MemoryDescriptor(BufferDescriptor(self._d.get("size", 0), self._d.get("buffer_address", 0), "tcp",
                                                 self._d.get("segment_name", "")))

    def get_disk_descriptor(self) -> DiskDescriptor:
        if not self.is_disk_replica():
            raise TypeError(f"not a disk replica ({self._d.get('tier')})")
        return DiskDescriptor(self._d.get("path", ""), self._d.get("size", 0))

    def get_local_disk_descriptor(self) -> LocalDiskDescriptor:
        if not self.is_local_disk_replica():
            raise TypeError(f"not a local-disk replica ({self._d.get('tier')})")
        return LocalDiskDescriptor("", self._d.get("size", 0), self._d.get("segment_name", ""))

    def __getitem__(self, k: str):
        return self._d[k]

    def get(self, k: str, default=None):
        return self._d.get(k, default)

    def keys(self):
        return self._d.keys()

    def __eq__(self, other) -> bool:
        if isinstance(other, ReplicaDescriptor):
            return self._d == other._d
        if isinstance(other, dict):
            return self._d == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"ReplicaDescriptor({self._d!r})"


# ---- host memory --------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.posix_memalign.argtypes = [_P(_vp), ctypes.c_size_t, ctypes.c_size_t]
_libc.posix_memalign.restype = ctypes.c_int
_libc.free.argtypes = [_vp]
_libc.free.restype = None


def _host_alloc(size: int) -> int:
    p = _vp()
    if size <= 0 or _libc.posix_memalign(ctypes.byref(p), 4096, size) != 0:
        return 0
    return p.value or 0


def _host_free(ptr: int) -> None:
    _libc.free(ptr)


class MooncakeHostMemAllocator:
    """Page-aligned host memory for zero-copy calls (register it with register_buffer)."""

    def __init__(self):
        self._live: set = set()
        self._mu = threading.Lock()

    def alloc(self, size: int) -> int:
        """``size`` bytes; the address, or 0 on failure."""
        ptr = _host_alloc(int(size))
        if ptr:
            with self._mu:
                self._live.add(ptr)
        return ptr

    def free(self, ptr: int) -> int:
        """Frees memory from alloc: 0, or INVALID_PARAMS for an address alloc did not return."""
        with self._mu:
            if ptr not in self._live:
                log.error("MooncakeHostMemAllocator.free(%#x): not an address this allocator returned", ptr)
                return ErrorCode.INVALID_PARAMS
            self._live.discard(ptr)
        _host_free(ptr)
        return 0


def get_alloc_func_addr() -> int:
    """The address of the library's host allocator, a C function ``void *alloc(size_t size)``
    (``mc_host_alloc`` in capi/include/mooncake.h: 4 KiB-aligned memory, 2 MiB-aligned with
    transparent huge pages asked for from 2 MiB on; NULL on failure). For callers that take an
    allocator by address (LMCache's ``mooncake`` local CPU allocator); free with the function at
    ``get_free_func_addr()``. Register the memory with ``register_buffer`` before zero-copy calls."""
    return ctypes.cast(_lib().mc_host_alloc, _vp).value or 0


def get_free_func_addr() -> int:
    """The address of ``void free(void *p)`` for memory from ``get_alloc_func_addr()``'s
    function (``mc_host_free``)."""
    return ctypes.cast(_lib().mc_host_free, _vp).value or 0


# ---- NUMA placement of the calling thread ------------------------------------------------

_NODE_DIR = "/sys/devices/system/node"
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "s390x": 270, "riscv64": 237}
_MPOL_PREFERRED = 1


def _cpu_list(text: str) -> set:
    """The CPUs of a sysfs cpulist ("0-3,8,10-11")."""
    cpus: set = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def bind_to_numa_node(node: int) -> None:
    """Runs the calling thread on NUMA node ``node``'s CPUs and makes the node its preferred
    memory (``MPOL_PREFERRED``: allocations go to the node and fall back to others when it is
    full), as upstream's (libnuma's ``numa_run_on_node`` and ``numa_set_preferred``). As upstream's,
    a host without NUMA or a node that does not exist is a logged warning, not an error; here
    such a call changes nothing. A node without CPUs keeps the thread's CPUs and still sets the
    memory preference."""
    if isinstance(node, bool) or not isinstance(node, int):
        raise TypeError(f"bind_to_numa_node: node must be an int, not {type(node).__name__}")
    try:
        nodes = sorted(int(d[4:]) for d in os.listdir(_NODE_DIR) if d.startswith("node") and d[4:].isdigit())
    except OSError:
        nodes = []
    if not nodes:
        log.warning("NUMA is not available on this system (%s lists no node); binding skipped", _NODE_DIR)
        return
    if node not in nodes:
        log.warning("Invalid NUMA node: %d. Valid nodes: %s; binding skipped", node, ",".join(map(str, nodes)))
        return
    try:
        with open(f"{_NODE_DIR}/node{node}/cpulist") as f:
            cpus = _cpu_list(f.read())
        if cpus:
            os.sched_setaffinity(0, cpus)  # pid 0: the calling thread
    except (OSError, ValueError) as e:
        log.warning("running on NUMA node %d's CPUs failed: %s", node, e)
    nr = _SET_MEMPOLICY.get(platform.machine())
    if nr is None:
        log.warning("bind_to_numa_node: no set_mempolicy system call number for %s; memory preference not set",
                    platform.machine())
        return
    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    if _libc.syscall(ctypes.c_long(nr), _MPOL_PREFERRED, mask, ctypes.c_ulong(64 * words + 1)) != 0:
        log.warning("preferring NUMA node %d's memory failed: %s", node, os.strerror(ctypes.get_errno()))


# ---- session-based ranged reads: snapshots, templates, plans ------------------------------

_LIB_MSG = re.compile(r"^mooncake store: (.*?)(?: \([A-Z_]+, -?\d+\))?$", re.S)


def _lib_message() -> str:
    """The calling thread's last error without the library's prefix and code suffix."""
    msg = last_error()
    m = _LIB_MSG.match(msg)
    return m.group(1) if m else msg


def _u64s(values, error: str) -> array.array:
    """values as an array of uint64 (C speed); a value outside [0, 2**64) raises ValueError(error)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"want a sequence of integers, got {type(values).__name__}")
    try:
        return array.array("Q", values)
    except OverflowError:
        raise ValueError(f"{error}: a value outside [0, 2**64)") from None


def _addr(a: array.array):
    return a.buffer_info()[0] if len(a) else None


class _Frozen:
    """Immutable handle objects of the library: made by the store, never by their constructor,
    not copyable or picklable (the handle is this process's)."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} objects are made by MooncakeDistributedStore.{self._MAKER}")

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self):
        raise TypeError(f"{type(self).__name__} cannot be copied or pickled: it is a handle of this process")

    @classmethod
    def _new(cls, **fields):
        obj = object.__new__(cls)
        for k, v in fields.items():
            object.__setattr__(obj, k, v)
        return obj


class RangedReadSnapshot(_Frozen):
    """A caller-owned snapshot of the replica lists (and read leases) of some keys, from
    ``MooncakeDistributedStore.prepare_get_into_ranges_snapshot``, for any number of
    ``get_into_ranges_from_snapshot`` / ``_from_template`` / ``_from_plan`` batches of the store
    that made it. A batch that starts when half the lease has passed queries the keys again.
    ``keys`` is the distinct keys, in order; ``close()`` releases it (also when collected)."""

    __slots__ = ("_h", "_store", "_keys", "__weakref__")
    _MAKER = "prepare_get_into_ranges_snapshot"

    @property
    def keys(self) -> tuple:
        return self._keys

    @property
    def closed(self) -> bool:
        return not self._h

    def close(self) -> None:
        h = self._h
        if h:
            object.__setattr__(self, "_h", 0)
            _lib().mc_store_snapshot_free(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if not self._h else f"{len(self._keys)} keys"
        return f"<RangedReadSnapshot {state}>"

    def _handle_for(self, store) -> int:
        if not self._h:
            raise ValueError("this RangedReadSnapshot is closed")
        if self._store() is not store:
            raise ValueError("this RangedReadSnapshot was prepared by another Store; "
                             "prepare one with this store's prepare_get_into_ranges_snapshot")
        return self._h


def _check_snapshot(snapshot) -> RangedReadSnapshot:
    if not isinstance(snapshot, RangedReadSnapshot):
        raise TypeError(f"want a RangedReadSnapshot, got {type(snapshot).__name__}")
    return snapshot


class RangedReadTemplate(_Frozen):
    """Immutable ranged-read geometry from ``prepare_get_into_ranges_template``: destination
    offsets, source offsets and sizes, with no object, address or lease, so one template serves
    any store and concurrent reads. ``range_count``: its ranges; ``total_bytes``: their sum."""

    __slots__ = ("_h", "_n", "_bytes")
    _MAKER = "prepare_get_into_ranges_template"

    @property
    def range_count(self) -> int:
        return self._n

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def __del__(self):
        h = getattr(self, "_h", 0)
        if h:
            try:
                _lib().mc_store_range_template_free(h)
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"RangedReadTemplate(range_count={self._n}, total_bytes={self._bytes})"


class RangedReadPlan(_Frozen):
    """A destination-run program from ``prepare_get_into_ranges_plan``: templates appended to
    objects named by (region, suffix). ``range_count``: its ranges; ``object_count``: its
    distinct objects."""

    __slots__ = ("_h", "_n", "_objects")
    _MAKER = "prepare_get_into_ranges_plan"

    @property
    def range_count(self) -> int:
        return self._n

    @property
    def object_count(self) -> int:
        return self._objects

    def __del__(self):
        h = getattr(self, "_h", 0)
        if h:
            try:
                _lib().mc_store_range_plan_free(h)
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"RangedReadPlan(range_count={self._n}, object_count={self._objects})"


def _handles(objs, cls, what: str) -> array.array:
    """The library handles of a sequence of cls objects (None: 0, which the library refuses)."""
    if isinstance(objs, (str, bytes)) or not isinstance(objs, Sequence):
        raise TypeError(f"{what}: want a list of {cls.__name__}, got {type(objs).__name__}")
    out = array.array("Q", bytes(8 * len(objs)))
    for i, o in enumerate(objs):
        if o is None:
            continue
        if not isinstance(o, cls):
            raise TypeError(f"{what}[{i}]: want a {cls.__name__}, got {type(o).__name__}")
        out[i] = o._h
    return out


# ---- replica tasks ------------------------------------------------------------------------

class TaskType(enum.IntEnum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


class QueryTaskResponse:
    """A task's state, as upstream's (``id``, ``type``, ``status``, ``created_at_ms_epoch``,
    ``last_updated_at_ms_epoch``, ``assigned_client``, ``message``)."""

    def __init__(self, id, type, status, created, updated, client, message):
        self.id, self.type, self.status = id, type, status
        self.created_at_ms_epoch, self.last_updated_at_ms_epoch = created, updated
        self.assigned_client, self.message = client, message

    def __repr__(self) -> str:
        return (f"QueryTaskResponse(id={self.id}, type={self.type.name}, status={self.status.name}, "
                f"message={self.message!r})")


_TASK_NOT_FOUND = -1300  # upstream's TASK_NOT_FOUND


class _TaskRunner:
    """Runs this store's copy and move tasks, one at a time, on a thread of its own.

    A task reads the value and upserts it with the wanted placement (the current copies plus the
    targets for a copy; minus the source plus the target for a move), so readers see the old
    placement or the new one, never a missing or partial value; then it checks that the targets
    hold a copy."""

    def __init__(self, store: "MooncakeDistributedStore"):
        import queue
        import uuid
        self._store = store
        self._q: "queue.Queue" = queue.Queue()
        self._tasks: Dict[tuple, dict] = {}
        self._mu = threading.Lock()
        self._uuid = uuid
        self._thread = threading.Thread(target=self._run, name="mooncake-store-tasks", daemon=True)
        self._thread.start()

    def _segments(self, key: str) -> List[str]:
        return [d.get("segment_name") for d in self._store.get_replica_desc(key) if d.is_memory_replica()]

    def submit(self, typ: TaskType, key: str, targets: List[str], source: Optional[str]) -> tuple:
        if not targets or any(not isinstance(t, str) or not t for t in targets):
            log.error("%s: want non-empty target segment names", typ.name.lower())
            return (0, 0), ErrorCode.INVALID_PARAMS
        try:
            segs = self._segments(key)
        except _native.MooncakeError as e:
            return (0, 0), e.code
        if source is not None and source not in segs:
            log.error("create_move_task(%r): no copy on source segment %s (copies: %s)", key, source, segs)
            return (0, 0), ErrorCode.INVALID_PARAMS
        u = self._uuid.uuid4().int
        tid = (u >> 64, u & ((1 << 64) - 1))
        now = int(time.time() * 1000)
        with self._mu:
            self._tasks[tid] = {"type": typ, "status": TaskStatus.PENDING, "created": now, "updated": now, "message": ""}
        self._q.put((tid, typ, key, targets, source))
        return tid, 0

    def query(self, tid) -> tuple:
        tid = tuple(tid) if isinstance(tid, (list, tuple)) else tid
        with self._mu:
            t = self._tasks.get(tid)
            if t is None:
                return None, _TASK_NOT_FOUND
            return QueryTaskResponse(tid, t["type"], t["status"], t["created"], t["updated"],
                                     self._store.get_hostname(), t["message"]), 0

    def _set(self, tid, status: TaskStatus, message: str = ""):
        with self._mu:
            t = self._tasks[tid]
            t["status"], t["message"], t["updated"] = status, message, int(time.time() * 1000)

    def _run(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            tid, typ, key, targets, source = item
            self._set(tid, TaskStatus.PROCESSING)
            try:
                self._set(tid, *self._do(key, targets, source))
            except Exception as e:  # report, never kill the runner
                self._set(tid, TaskStatus.FAILED, f"{type(e).__name__}: {e}")

    def _do(self, key: str, targets: List[str], source: Optional[str]):
        s = self._store
        segs = self._segments(key)
        if source is not None:
            if source not in segs:
                return TaskStatus.FAILED, f"no copy of {key!r} on source segment {source}"
            segs = [x for x in segs if x != source]
        want = list(dict.fromkeys(segs + targets))
        value = s.get(key)
        if not value:
            return TaskStatus.FAILED, f"{key!r} could not be read: {last_error()}"
        cfg = ReplicateConfig(replica_num=len(want), preferred_segments=want)
        rc = s.upsert(key, value, cfg)
        if rc != 0:
            return TaskStatus.FAILED, f"upsert of {key!r} failed with {rc}: {last_error()}"
        got = self._segments(key)
        missing = [t for t in targets if t not in got]
        if missing:
            return TaskStatus.FAILED, f"no copy landed on {missing} (copies now on {got})"
        return TaskStatus.SUCCESS, f"copies on {got}"

    def stop(self):
        self._q.put(None)
        self._thread.join(timeout=30)


def _tasks(store: "MooncakeDistributedStore") -> _TaskRunner:
    with store._lock:
        if store._task_runner is None:
            store._task_runner = _TaskRunner(store)
        return store._task_runner


# The tensor methods live in store_tensor.TensorMixin when that module is present.
class MooncakeDistributedStore(TensorMixin):
    """A client of Mooncake Store. Call ``setup`` first, ``close`` at the end."""

    def __init__(self):
        self._h = 0
        self._lock = threading.Lock()
        self._no_buffer = False
        self._pool: List[int] = []
        self._pool_bytes = 0
        self._mem_pool_limit: Optional[int] = None  # setup_dummy's mem_pool_size
        self._task_runner = None

    # ---- lifecycle ----
    def setup(self, local_hostname: Any = "localhost", metadata_server: str = "P2PHANDSHAKE",
              global_segment_size: Union[int, str] = DEFAULT_SETUP_GLOBAL_SEGMENT_SIZE,
              local_buffer_size: Union[int, str] = DEFAULT_SETUP_LOCAL_BUFFER_SIZE,
              protocol: str = "tcp", rdma_devices: str = "",
              master_server_addr: str = "127.0.0.1:50051", engine: Any = None,
              enable_ssd_offload: bool = False, ssd_offload_path: str = "",
              tenant_id: str = "default", **aliases) -> int:
        """Connects to the master and contributes ``global_segment_size`` bytes; 0 or a negative
        code. Upstream's positional order; sizes are ints or strings ("4GB", "512MB").

        Also ``setup(config_dict)`` with those names as keys (and ``device_name`` /
        ``master_server_address``, the MooncakeConfig spellings), or ``setup(MooncakeConfig)``.
        ``engine`` (a TransferEngine to share) is accepted: this process has one transfer
        engine, which every store and TransferEngine in it shares anyway. ``local_buffer_size=0``
        gives a client without a local buffer: the copying calls (put, get, ...) then fail with
        INVALID_PARAMS, as upstream's; the zero-copy ones (put_from, get_into) work.
        ``enable_ssd_offload=True`` keeps evicted objects on this host's disk, in
        ``ssd_offload_path`` or else ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH`` (master
        ``--enable_offload``); the shared file tier (G3, the master's ``--root_fs_dir``) needs
        nothing here (docs/multi-tier.md). ``tenant_id`` names the key namespace this client
        uses ("default": the one of clients that name none; docs/store.md)."""
        if isinstance(local_hostname, dict) or _is_mooncake_config(local_hostname):
            if _is_mooncake_config(local_hostname):
                d = local_hostname.to_setup_dict()
            else:
                d = dict(local_hostname)
            extra = (metadata_server, global_segment_size, local_buffer_size, protocol, rdma_devices,
                     master_server_addr, engine, enable_ssd_offload, ssd_offload_path, tenant_id)
            defaults = ("P2PHANDSHAKE", DEFAULT_SETUP_GLOBAL_SEGMENT_SIZE, DEFAULT_SETUP_LOCAL_BUFFER_SIZE,
                        "tcp", "", "127.0.0.1:50051", None, False, "", "default")
            if extra != defaults or aliases:
                raise TypeError("setup(config): pass the configuration alone, without other arguments")
            return self.setup(**_setup_kwargs(d))
        unknown = set(aliases) - {"device_name", "master_server_address"}
        if unknown:
            raise TypeError(f"setup() got unexpected keyword argument(s) {sorted(unknown)}")
        if aliases.get("device_name") is not None:
            rdma_devices = aliases["device_name"]
        if aliases.get("master_server_address") is not None:
            master_server_addr = aliases["master_server_address"]
        seg = parse_size(global_segment_size, "global_segment_size")
        buf = parse_size(local_buffer_size, "local_buffer_size")
        if tenant_id is not None and not isinstance(tenant_id, str):
            raise TypeError(f"setup(tenant_id=...): want a str, got {type(tenant_id).__name__}")
        if engine is not None and not hasattr(engine, "get_rpc_port"):
            raise TypeError(f"setup(engine=...): want a mooncake.engine.TransferEngine, got {type(engine).__name__}")
        opts = {
            "local_hostname": local_hostname or "", "metadata_server": metadata_server or "",
            "global_segment_size": seg, "local_buffer_size": buf or _NO_BUFFER_STAGING,
            "protocol": protocol or "tcp", "rdma_devices": rdma_devices or "",
            "master_server_addr": master_server_addr or "",
            # client-local SSD offload: one flag, read by the Go client (store/client Config)
            "enable_ssd_offload": bool(enable_ssd_offload), "ssd_offload_path": ssd_offload_path or "",
            "tenant_id": tenant_id or "",
        }
        return self._set_up("setup", lambda l, h: l.mc_store_setup_json(h, json.dumps(opts).encode()), buf)

    def _set_up(self, what: str, call, buf: int) -> int:
        """Creates the native store and runs call(lib, handle) to set it up; 0 or its code."""
        l = _lib()
        with self._lock:
            if self._h:
                log.error("%s: this store is already set up; close() it first", what)
                return ErrorCode.INVALID_PARAMS
            h = _u64()
            rc = l.mc_store_create(ctypes.byref(h))
            if rc != 0:
                return rc
            rc = call(l, h)
            if rc != 0:
                msg = last_error()
                l.mc_store_close(h)
                log.error("MooncakeDistributedStore.%s failed: %s", what, msg)
                self._setup_error = msg
                return rc
            self._h = h.value
            self._no_buffer = buf == 0
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
        runner, self._task_runner = self._task_runner, None
        if runner is not None:
            runner.stop()
        for ptr in self._pool:
            self.unregister_buffer(ptr)
        with self._lock:
            h, self._h = self._h, 0
        rc = _lib().mc_store_close(h) if h else 0
        pool, self._pool = self._pool, []
        self._pool_bytes, self._mem_pool_limit = 0, None
        for ptr in pool:
            _host_free(ptr)
        return rc

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
    def get_replica_desc(self, key: str) -> List["ReplicaDescriptor"]:
        """Where ``key``'s copies live, without taking a lease: ReplicaDescriptor objects
        (``is_memory_replica()`` / ``is_disk_replica()`` / ``is_local_disk_replica()``, ``status``,
        ``get_memory_descriptor()`` / ``get_disk_descriptor()``; also readable as dicts with
        ``tier``, ``segment_name``, ``path``, ``size``, ``status``). Raises MooncakeError (e.g.
        OBJECT_NOT_FOUND)."""
        raw = json.loads(_native.read_string(_lib().mc_store_replica_desc, self._h, _key(key)))
        return [ReplicaDescriptor(d) for d in raw]

    def batch_get_replica_desc(self, keys: Sequence[str]) -> Dict[str, List["ReplicaDescriptor"]]:
        """get_replica_desc for several keys: {key: descriptors}; a missing key maps to []."""
        out: Dict[str, List[ReplicaDescriptor]] = {}
        for k in keys:
            try:
                out[k] = self.get_replica_desc(k)
            except _native.MooncakeError as e:
                if e.code != ErrorCode.OBJECT_NOT_FOUND:
                    raise
                out[k] = []
        return out

    def batch_replica_clear(self, keys: Sequence[str], segment_name: str = "") -> List[str]:
        """Drops this client's copies of ``keys`` on ``segment_name`` (``"host:port"``; "" = every
        copy, i.e. the whole object) and returns the keys cleared. Keys that are leased to a
        reader, still being written, written by another client or missing are skipped."""
        n = len(keys)
        if n == 0:
            return []
        karr, keep = _keys(keys)
        flags = (_i32 * n)()
        rc = _lib().mc_store_batch_replica_clear(self._h, karr, n, (segment_name or "").encode(), flags)
        if rc < 0:
            log.error("batch_replica_clear failed: %s", last_error())
            return []
        return [k for k, f in zip(keys, flags) if f]

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

    def _refuse(self, what: str, config: Optional[ReplicateConfig] = None, n: int = 1) -> int:
        """The code a copying call returns without running (0: go ahead)."""
        if self._no_buffer and self._h:
            log.error("%s: this store was set up with local_buffer_size=0, so it has no local buffer to copy "
                      "through; use the zero-copy calls (put_from, get_into) or set a local_buffer_size", what)
            return ErrorCode.INVALID_PARAMS
        if config is not None and not config._groups_ok(n):
            log.error("%s: ReplicateConfig.group_ids has %d entries for %d object(s)", what, len(config.group_ids), n)
            return ErrorCode.INVALID_PARAMS
        return 0

    # ---- put ----
    def put(self, key: str, value, config: Optional[ReplicateConfig] = None) -> int:
        rc = self._refuse("put", config)
        if rc:
            return rc
        addr, n, keep = _buffer(value)
        return _lib().mc_store_put(self._h, _key(key), addr, n, _cfg(config))

    def put_parts(self, key: str, *parts, config: Optional[ReplicateConfig] = None) -> int:
        return self._put_parts(key, [_buffer(p) for p in parts], config)

    def _put_parts(self, key, bufs, config, upsert: bool = False) -> int:
        rc = self._refuse("upsert_parts" if upsert else "put_parts", config)
        if rc:
            return rc
        n = len(bufs)
        ptrs = (_vp * max(n, 1))(*[b[0] for b in bufs])
        lens = (_u64 * max(n, 1))(*[b[1] for b in bufs])
        l = _lib()
        fn = l.mc_store_upsert_parts if upsert else l.mc_store_put_parts
        return fn(self._h, _key(key), ptrs, lens, n, _cfg(config))

    def put_batch(self, keys: Sequence[str], values: Sequence, config: Optional[ReplicateConfig] = None) -> int:
        """Puts values[i] under keys[i]; 0 when every put succeeded, else the first failure's code."""
        res = self._batch_put(keys, values, config)
        if isinstance(res, int):
            return res
        return next((r for r in res if r != 0), 0)

    def _batch_put(self, keys, values, config, upsert: bool = False):
        if len(keys) != len(values):
            what = "upsert_batch" if upsert else "put_batch"
            raise ValueError(f"{what}: {len(keys)} keys but {len(values)} values")
        rc = self._refuse("upsert_batch" if upsert else "put_batch", config, len(keys))
        if rc:
            return rc
        n = len(keys)
        karr, keep_k = _keys(keys)
        bufs = [_buffer(v) for v in values]
        ptrs = (_vp * max(n, 1))(*[b[0] for b in bufs])
        lens = (_u64 * max(n, 1))(*[b[1] for b in bufs])
        out = (_i32 * max(n, 1))()
        l = _lib()
        fn = l.mc_store_batch_upsert if upsert else l.mc_store_batch_put
        rc = fn(self._h, karr, ptrs, lens, n, _cfg(config), out)
        if rc != 0:
            return rc
        return list(out[:n])

    def put_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        """Stores ``size`` bytes at ``buffer_ptr`` (zero-copy when registered with register_buffer)."""
        if config is not None and not config._groups_ok(1):
            return self._refuse("put_from", config)
        return _lib().mc_store_put_from(self._h, _key(key), int(buffer_ptr), int(size), _cfg(config))

    def batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int],
                       config: Optional[ReplicateConfig] = None) -> List[int]:
        return self._batch_put_from(keys, buffer_ptrs, sizes, config, False)

    def _batch_put_from(self, keys, buffer_ptrs, sizes, config, upsert: bool) -> List[int]:
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            log.error("%s: %d keys, %d buffers, %d sizes", "batch_upsert_from" if upsert else "batch_put_from",
                      n, len(buffer_ptrs), len(sizes))
            return [ErrorCode.INVALID_PARAMS] * n
        if config is not None and not config._groups_ok(n):
            return [self._refuse("batch_put_from", config, n)] * n
        karr, keep = _keys(keys)
        out = (_i32 * max(n, 1))()
        l = _lib()
        fn = l.mc_store_batch_upsert_from if upsert else l.mc_store_batch_put_from
        rc = fn(self._h, karr, (_u64 * max(n, 1))(*map(int, buffer_ptrs)),
                (_u64 * max(n, 1))(*map(int, sizes)), n, _cfg(config), out)
        if rc != 0:
            return [rc] * n
        return list(out[:n])

    # ---- upsert: insert or replace ----
    # The master keeps the old value readable while the new one is written and swaps them when
    # it is complete: a reader gets the whole old value or the whole new one, never a mix, and a
    # failed upsert leaves the old value in place.
    def upsert(self, key: str, value, config: Optional[ReplicateConfig] = None) -> int:
        """Stores value under key, replacing the key's value when it exists. 0 or a negative code."""
        rc = self._refuse("upsert", config)
        if rc:
            return rc
        addr, n, keep = _buffer(value)
        return _lib().mc_store_upsert(self._h, _key(key), addr, n, _cfg(config))

    def upsert_parts(self, key: str, *parts, config: Optional[ReplicateConfig] = None) -> int:
        """upsert of the concatenation of parts (bytes-like objects)."""
        return self._put_parts(key, [_buffer(p) for p in parts], config, upsert=True)

    def upsert_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        """upsert of ``size`` bytes at ``buffer_ptr`` (zero-copy when registered)."""
        if config is not None and not config._groups_ok(1):
            return self._refuse("upsert_from", config)
        return _lib().mc_store_upsert_from(self._h, _key(key), int(buffer_ptr), int(size), _cfg(config))

    def upsert_batch(self, keys: Sequence[str], values: Sequence, config: Optional[ReplicateConfig] = None) -> int:
        """upsert of values[i] under keys[i]; 0 when every one succeeded, else the first failure's code."""
        res = self._batch_put(keys, values, config, upsert=True)
        if isinstance(res, int):
            return res
        return next((r for r in res if r != 0), 0)

    def batch_upsert_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int],
                          config: Optional[ReplicateConfig] = None) -> List[int]:
        """upsert_from for many keys; one code per key."""
        return self._batch_put_from(keys, buffer_ptrs, sizes, config, True)

    # ---- get ----
    def get(self, key: str) -> bytes:
        """The value of key, or b"" when it is missing or cannot be read."""
        if self._refuse("get"):
            return b""
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
        if self._refuse("get_batch"):
            return [b""] * n
        karr, keep = _keys(keys)
        lens = (_u64 * n)()
        res = (_i32 * n)()
        vals: List[bytes] = [b""] * n
        slot = _get_slot
        slot.batch = vals
        try:
            rc = _lib().mc_store_batch_get_with(self._h, karr, n, _batch_alloc_c, None, lens, res)
        finally:
            slot.batch = None
        if rc != 0:
            return [b""] * n
        for i in range(n):
            if res[i] != 0 or len(vals[i]) != lens[i]:
                vals[i] = b""  # failed after its bytes were made: they hold no value
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

    # ---- zero-copy buffers over library memory ----
    def get_buffer(self, key: str) -> Optional["BufferHandle"]:
        """The value of key as a BufferHandle (``ptr()``, ``size()``, the buffer protocol) over
        memory the library allocated for it: no copy into Python objects; freed when the handle
        (and every view of it) is gone. None when the key is missing or unreadable."""
        if self._refuse("get_buffer"):
            return None
        out = _vp()
        n = _u64()
        rc = _lib().mc_store_get(self._h, _key(key), ctypes.byref(out), ctypes.byref(n))
        if rc != 0 or not out.value:
            return None
        return BufferHandle._wrap(out.value, n.value)

    def batch_get_buffer(self, keys: Sequence[str]) -> List[Optional["BufferHandle"]]:
        """get_buffer for several keys; None for each key missing."""
        n = len(keys)
        if n == 0:
            return []
        if self._refuse("batch_get_buffer"):
            return [None] * n
        karr, keep = _keys(keys)
        outs = (_vp * n)()
        lens = (_u64 * n)()
        res = (_i32 * n)()
        l = _lib()
        if l.mc_store_batch_get(self._h, karr, n, outs, lens, res) != 0:
            return [None] * n
        handles: List[Optional[BufferHandle]] = []
        for i in range(n):
            if res[i] == 0 and outs[i]:
                handles.append(BufferHandle._wrap(outs[i], lens[i]))
            else:
                if outs[i]:
                    l.mc_store_free(outs[i])
                handles.append(None)
        return handles

    # ---- ranged and multi-buffer transfers ----
    def get_into_ranges(self, buffer_ptrs: Sequence[int], all_keys: Sequence[Sequence[str]],
                        all_dst_offsets: Sequence[Sequence[Sequence[int]]],
                        all_src_offsets: Sequence[Sequence[Sequence[int]]],
                        all_sizes: Sequence[Sequence[Sequence[int]]]) -> List[List[List[int]]]:
        """Reads byte ranges of objects into registered buffers (upstream's buffer-major shape):
        for each (buffer i, key j, fragment k), ``all_sizes[i][j][k]`` bytes from offset
        ``all_src_offsets[i][j][k]`` of ``all_keys[i][j]`` land at
        ``buffer_ptrs[i] + all_dst_offsets[i][j][k]``. Returns results[i][j][k]: bytes read or a
        negative code (a shape mismatch gives INVALID_PARAMS for the entries concerned). Each
        buffer must lie in memory registered with register_buffer; bounds are checked against
        it and against the object's size. Needs a memory replica, as upstream's."""
        nb = len(buffer_ptrs)
        top_ok = len(all_keys) == nb and len(all_dst_offsets) == nb and len(all_src_offsets) == nb and len(all_sizes) == nb
        out: List[List[List[int]]] = []
        l = _lib()
        for i in range(len(all_keys)):
            row: List[List[int]] = []
            keys_i = all_keys[i]
            for j, key in enumerate(keys_i):
                try:
                    dsts, srcs, sizes = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
                except (IndexError, TypeError):
                    row.append([ErrorCode.INVALID_PARAMS])
                    continue
                m = len(sizes)
                if not top_ok or len(dsts) != m or len(srcs) != m:
                    log.error("get_into_ranges: buffer %d key %r: %d dst offsets, %d src offsets, %d sizes",
                              i, key, len(dsts), len(srcs), m)
                    row.append([ErrorCode.INVALID_PARAMS] * max(m, 1))
                    continue
                if m == 0:
                    row.append([])
                    continue
                base = int(buffer_ptrs[i])
                res = (_i64 * m)()
                rc = l.mc_store_get_ranges(self._h, _key(key), m, (_u64 * m)(*map(int, srcs)),
                                           (_u64 * m)(*[base + int(d) for d in dsts]), (_u64 * m)(*map(int, sizes)), res)
                row.append([rc] * m if rc != 0 else list(res))
            out.append(row)
        return out

    # ---- session-based ranged reads (upstream's RangedReadSnapshot, templates and plans) ----
    # Capabilities, as upstream's attributes: plans (and templates) are offered, and
    # allow_staging=True reads objects without a memory copy (G3 / SSD offload files) through a
    # staging buffer.
    supports_planned_range_reads = True
    supports_ranged_read_staging = True

    def prepare_get_into_ranges_snapshot(self, keys: Sequence[str]) -> RangedReadSnapshot:
        """Queries the replicas of every distinct key once (the master grants each a read lease)
        and returns a RangedReadSnapshot for ``get_into_ranges_from_snapshot``,
        ``get_into_ranges_from_template`` and ``get_into_ranges_from_plan``. Missing keys are
        allowed: reads of them fail later (a negative code, or False). While the lease holds,
        reads return the bytes the keys had when the snapshot was taken, even after an upsert;
        a batch that starts when half the lease (``--default_kv_lease_ttl``) has passed queries
        every key again first, and no read runs on a descriptor whose lease is over."""
        if isinstance(keys, (str, bytes)):
            raise TypeError("prepare_get_into_ranges_snapshot(keys): want a list of keys, not one key")
        if not self._h:
            raise RuntimeError("prepare_get_into_ranges_snapshot: the store is not set up: call setup() first")
        arr, enc = _keys(list(keys))
        out = _u64()
        rc = _lib().mc_store_snapshot_prepare(self._h, arr, len(enc), ctypes.byref(out))
        if rc != 0:
            raise RuntimeError(f"prepare_get_into_ranges_snapshot: {_lib_message()}")
        distinct = tuple(dict.fromkeys(k.decode("utf-8", "surrogateescape") for k in enc))
        return RangedReadSnapshot._new(_h=out.value, _store=weakref.ref(self), _keys=distinct)

    def get_into_ranges_from_snapshot(self, snapshot: RangedReadSnapshot, buffer_ptrs: Sequence[int],
                                      all_keys: Sequence[Sequence[str]],
                                      all_dst_offsets: Sequence[Sequence[Sequence[int]]],
                                      all_src_offsets: Sequence[Sequence[Sequence[int]]],
                                      all_sizes: Sequence[Sequence[Sequence[int]]],
                                      allow_staging: bool = False) -> List[List[List[int]]]:
        """``get_into_ranges`` (same arguments after the snapshot, same result: bytes read or a
        negative code per (buffer, key, fragment)) through the snapshot's replica descriptors,
        without asking the master again while its lease holds; one library call per batch. A
        key the snapshot was not prepared with gives INVALID_PARAMS; a snapshot of another store
        raises ValueError. ``allow_staging`` (keyword, an extension: upstream's binding shows six
        arguments) reads objects without a memory copy through a staging buffer, as in
        ``get_into_ranges_from_template``."""
        h = _check_snapshot(snapshot)._handle_for(self)
        nb = len(buffer_ptrs)
        top_ok = len(all_keys) == nb and len(all_dst_offsets) == nb and len(all_src_offsets) == nb and len(all_sizes) == nb
        out: List[List[List[int]]] = []
        keys: List[bytes] = []
        counts = array.array("q")
        srcs, dsts, sizes = array.array("Q"), array.array("Q"), array.array("Q")
        slots = []  # (row, position in the row) of each group sent
        for i in range(len(all_keys)):
            row: List[List[int]] = []
            for j, key in enumerate(all_keys[i]):
                try:
                    d, sr, sz = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
                except (IndexError, TypeError):
                    row.append([ErrorCode.INVALID_PARAMS])
                    continue
                m = len(sz)
                if not top_ok or len(d) != m or len(sr) != m:
                    log.error("get_into_ranges_from_snapshot: buffer %d key %r: %d dst offsets, %d src offsets, %d sizes",
                              i, key, len(d), len(sr), m)
                    row.append([ErrorCode.INVALID_PARAMS] * max(m, 1))
                    continue
                if m == 0:
                    row.append([])
                    continue
                try:
                    base = int(buffer_ptrs[i])
                    g_dst = array.array("Q", [base + int(x) for x in d])
                    g_src, g_size = array.array("Q", sr), array.array("Q", sz)
                    k = _key(key)
                except (OverflowError, TypeError, ValueError) as e:
                    log.error("get_into_ranges_from_snapshot: buffer %d key %r: %s", i, key, e)
                    row.append([ErrorCode.INVALID_PARAMS] * m)
                    continue
                keys.append(k)
                counts.append(m)
                dsts.extend(g_dst)
                srcs.extend(g_src)
                sizes.extend(g_size)
                slots.append((len(out), len(row)))
                row.append([])
            out.append(row)
        if not keys:
            return out
        if not self._h:
            codes = [ErrorCode.INVALID_PARAMS] * len(sizes)
        else:
            res = array.array("q", bytes(8 * len(sizes)))
            karr = (_cs * len(keys))(*keys)
            rc = _lib().mc_store_snapshot_get_ranges(self._h, h, len(keys), karr, _addr(counts), _addr(srcs), _addr(dsts),
                                                     _addr(sizes), int(bool(allow_staging)), _addr(res))
            if rc == ErrorCode.INVALID_PARAMS:
                raise ValueError(_lib_message())
            codes = [rc] * len(sizes) if rc != 0 else res.tolist()
        pos = 0
        for (r, c), m in zip(slots, counts):
            out[r][c] = codes[pos:pos + m]
            pos += m
        return out

    def prepare_get_into_ranges_template(self, destinations: Sequence[int], sources: Sequence[int],
                                         sizes: Sequence[int]) -> RangedReadTemplate:
        """An immutable RangedReadTemplate of ranges (``destinations[i]``, ``sources[i]``,
        ``sizes[i]``), for ``get_into_ranges_from_template`` and ``prepare_get_into_ranges_plan``.
        ValueError "Invalid ranged-read template shape" (empty, lengths differ, more than
        1,000,000 ranges) or "Ranged-read template exceeds bounds" (a size of 0, more than 2**40
        bytes in all, an offset + size past 2**64)."""
        err = "Ranged-read template exceeds bounds"
        d, s, z = _u64s(destinations, err), _u64s(sources, err), _u64s(sizes, err)
        out = _u64()
        rc = _lib().mc_store_range_template_create(_addr(d), len(d), _addr(s), len(s), _addr(z), len(z), ctypes.byref(out))
        if rc != 0:
            raise ValueError(_lib_message())
        return RangedReadTemplate._new(_h=out.value, _n=len(z), _bytes=sum(z))

    def get_into_ranges_from_template(self, snapshot: RangedReadSnapshot, templates: Sequence[RangedReadTemplate],
                                      buffer_ptrs: Sequence[int], buffer_indices: Sequence[int], keys: Sequence[str],
                                      translations: Sequence[int], allow_staging: bool = False) -> List[bool]:
        """Row i reads ``templates[i]`` from object ``keys[i]`` into
        ``buffer_ptrs[buffer_indices[i]]`` with every destination moved by ``translations[i]``
        bytes (buffers registered with register_buffer), through the snapshot. One bool per row:
        True when every range read its whole size. A missing key, a destination past the
        registered buffer holding ``buffer_ptrs[buffer_indices[i]]`` (even where another
        registered buffer follows it) or a source past the object gives False (and, as they are
        known before reading, leaves the row's destination untouched); bytes outside the ranges
        are never written. ValueError "Ranged-read template batch shape differs" (lengths, more than
        100,000 rows or buffers) or "Ranged-read template batch exceeds bounds" (a None
        template, an index past the buffers, a translation overflowing 64 bits, more than
        1,000,000 ranges or 2**40 bytes in all); "another Store" for a snapshot of another
        store."""
        h = _check_snapshot(snapshot)._handle_for(self)
        err = "Ranged-read template batch exceeds bounds"
        t = _handles(templates, RangedReadTemplate, "templates")
        bufs, idx, tr = _u64s(buffer_ptrs, err), _u64s(buffer_indices, err), _u64s(translations, err)
        karr, enc = _keys(list(keys))
        ok = (ctypes.c_uint8 * max(len(enc), 1))()
        if not self._h:
            return [False] * len(enc)
        rc = _lib().mc_store_snapshot_read_templates(self._h, h, _addr(t), len(t), _addr(bufs), len(bufs), _addr(idx), len(idx),
                                                      karr, len(enc), _addr(tr), len(tr), int(bool(allow_staging)), ok)
        if rc == ErrorCode.INVALID_PARAMS:
            raise ValueError(_lib_message())
        if rc != 0:
            return [False] * len(enc)
        return [bool(x) for x in ok[:len(enc)]]

    def prepare_get_into_ranges_plan(self, templates: Sequence[RangedReadTemplate], suffixes: Sequence[str],
                                     regions: Sequence[int]) -> RangedReadPlan:
        """A RangedReadPlan: row i appends ``templates[i]`` to the object named by
        (``regions[i]``, ``suffixes[i]``); a page read with prefix p reads object p + suffix into
        buffer ``region``. Each template's ranges must tile its destination without gaps, and a
        later row of the same object must start at or after the end of the previous one.
        ValueError "Invalid ranged-read plan shape" (empty, more than 100,000 rows, lengths
        differ), "Ranged-read plan exceeds bounds" (a None template, more than 1,000,000 ranges
        or 2**40 bytes, a region of 100,000 or more), "Plan run destination is not contiguous",
        "Plan object destinations are not ordered"."""
        t = _handles(templates, RangedReadTemplate, "templates")
        r = _u64s(regions, "Ranged-read plan exceeds bounds")
        sarr, enc = _keys(list(suffixes))
        out, ranges, objects = _u64(), _u64(), _u64()
        rc = _lib().mc_store_range_plan_create(_addr(t), len(t), sarr, len(enc), _addr(r), len(r), ctypes.byref(out),
                                               ctypes.byref(ranges), ctypes.byref(objects))
        if rc != 0:
            raise ValueError(_lib_message())
        return RangedReadPlan._new(_h=out.value, _n=ranges.value, _objects=objects.value)

    def get_into_ranges_from_plan(self, snapshot: RangedReadSnapshot, plans: Sequence[RangedReadPlan],
                                  buffer_ptrs: Sequence[int], prefixes: Sequence[str],
                                  translations: Sequence[Sequence[int]], allow_staging: bool = False) -> List[bool]:
        """Page i runs ``plans[i]`` through the snapshot: each object (region, suffix) of the
        plan is read from key ``prefixes[i] + suffix`` into ``buffer_ptrs[region]`` moved by
        ``translations[i][region]`` (one translation per buffer). One bool per page: True when
        every range of every object read its whole size. ValueError "Ranged-read plan batch
        shape differs" (more than 100,000 plans or buffers, prefixes or translations not one per
        plan), "Ranged-read plan batch exceeds bounds" (a None plan, a translation row not one
        per buffer, more than 1,000,000 ranges, 2**40 bytes or 100,000 objects in all),
        "Ranged-read plan translation exceeds bounds" (an object region past the buffers, a
        translation overflowing 64 bits); "another Store" for a snapshot of another store."""
        h = _check_snapshot(snapshot)._handle_for(self)
        p = _handles(plans, RangedReadPlan, "plans")
        bufs = _u64s(buffer_ptrs, "Ranged-read plan batch exceeds bounds")
        parr, enc = _keys(list(prefixes))
        if isinstance(translations, (str, bytes)):
            raise TypeError("translations: want a list of lists of integers, got a string")
        counts, flat = array.array("q"), array.array("Q")
        for row in translations:
            a = _u64s(row, "Ranged-read plan translation exceeds bounds")
            counts.append(len(a))
            flat.extend(a)
        ok = (ctypes.c_uint8 * max(len(p), 1))()
        if not self._h:
            return [False] * len(p)
        rc = _lib().mc_store_snapshot_read_plans(self._h, h, _addr(p), len(p), _addr(bufs), len(bufs), parr, len(enc),
                                                  _addr(counts), len(counts), _addr(flat), int(bool(allow_staging)), ok)
        if rc == ErrorCode.INVALID_PARAMS:
            raise ValueError(_lib_message())
        if rc != 0:
            return [False] * len(p)
        return [bool(x) for x in ok[:len(p)]]

    def batch_put_from_multi_buffers(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     config: Optional[ReplicateConfig] = None) -> List[int]:
        """Stores, for each key, the concatenation of its buffers (zero-copy where registered);
        one code per key."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n:
            log.error("batch_put_from_multi_buffers: %d keys, %d buffer lists, %d size lists", n,
                      len(all_buffer_ptrs), len(all_sizes))
            return [ErrorCode.INVALID_PARAMS] * n
        if n == 0:
            return []
        if config is not None and not config._groups_ok(n):
            return [self._refuse("batch_put_from_multi_buffers", config, n)] * n
        counts = []
        addrs: List[int] = []
        sizes: List[int] = []
        bad = set()
        for i in range(n):
            if len(all_buffer_ptrs[i]) != len(all_sizes[i]):
                bad.add(i)
                counts.append(0)
                continue
            counts.append(len(all_sizes[i]))
            addrs.extend(map(int, all_buffer_ptrs[i]))
            sizes.extend(map(int, all_sizes[i]))
        karr, keep = _keys(keys)
        t = max(len(addrs), 1)
        out = (_i32 * n)()
        rc = _lib().mc_store_batch_put_from_buffers(self._h, karr, n, (_i32 * n)(*counts), (_u64 * t)(*addrs),
                                                    (_u64 * t)(*sizes), _cfg(config), out)
        if rc != 0:
            return [rc] * n
        return [ErrorCode.INVALID_PARAMS if i in bad else out[i] for i in range(n)]

    def batch_get_into_multi_buffers(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     prefer_alloc_in_same_node: bool = False) -> List[int]:
        """Reads each key's value into its buffers in order; per key the bytes read or a
        negative code (BUFFER_OVERFLOW when the buffers are too small).
        ``prefer_alloc_in_same_node`` is accepted (upstream uses it to batch transfers from one
        segment; every transfer here already goes to the nearest replica)."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n:
            log.error("batch_get_into_multi_buffers: %d keys, %d buffer lists, %d size lists", n,
                      len(all_buffer_ptrs), len(all_sizes))
            return [ErrorCode.INVALID_PARAMS] * n
        l = _lib()
        out = []
        for key, ptrs, sizes in zip(keys, all_buffer_ptrs, all_sizes):
            m = len(ptrs)
            if len(sizes) != m:
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            t = max(m, 1)
            out.append(l.mc_store_get_into_buffers(self._h, _key(key), m, (_u64 * t)(*map(int, ptrs)),
                                                   (_u64 * t)(*map(int, sizes))))
        return out

    def put_from_with_metadata(self, key: str, buffer_ptr: int, metadata_buffer_ptr: int, size: int,
                               metadata_size: int, config: Optional[ReplicateConfig] = None) -> int:
        """Stores ``metadata_size`` bytes at ``metadata_buffer_ptr`` followed by ``size`` bytes at
        ``buffer_ptr`` as one value (upstream's order: metadata first). As upstream's: a zero
        ``size`` stores nothing and returns 0; ``prefer_alloc_in_same_node`` is refused."""
        if config is not None and config.prefer_alloc_in_same_node:
            log.error("put_from_with_metadata: prefer_alloc_in_same_node is not supported (as upstream's)")
            return ErrorCode.INVALID_PARAMS
        if size == 0:
            log.warning("put_from_with_metadata: empty data for key %r; nothing stored", key)
            return 0
        if config is not None and not config._groups_ok(1):
            return self._refuse("put_from_with_metadata", config)
        bufs = [(int(metadata_buffer_ptr), int(metadata_size), None), (int(buffer_ptr), int(size), None)]
        bufs = [b for b in bufs if b[1] > 0]
        if any(b[0] == 0 for b in bufs):
            log.error("put_from_with_metadata: a NULL buffer")
            return ErrorCode.INVALID_PARAMS
        n = len(bufs)
        return _lib().mc_store_put_parts(self._h, _key(key), (_vp * n)(*[b[0] for b in bufs]),
                                         (_u64 * n)(*[b[1] for b in bufs]), n, _cfg(config))

    # ---- memory ----
    def alloc_from_mem_pool(self, size: int) -> int:
        """Allocates ``size`` bytes of host memory registered with this store (so put_from /
        get_into on it are zero-copy); the address, or 0 on failure. Freed at close()."""
        if not self._h or size <= 0:
            return 0
        if self._mem_pool_limit is not None and self._pool_bytes + size > self._mem_pool_limit:
            log.error("alloc_from_mem_pool(%d): %d of this dummy client's mem_pool_size=%d bytes are in use",
                      size, self._pool_bytes, self._mem_pool_limit)
            return 0
        ptr = _host_alloc(int(size))
        if not ptr:
            return 0
        if self.register_buffer(ptr, size) != 0:
            _host_free(ptr)
            return 0
        self._pool.append(ptr)
        self._pool_bytes += size
        return ptr

    # ---- replica tasks ----
    def create_copy_task(self, key: str, targets: Sequence[str]) -> tuple:
        """Starts copying key's value to the segments ``targets`` (``"host:port"``); returns
        (task id, 0) or (UUID(int=0), code). See docs/store.md for how tasks run here."""
        return _tasks(self).submit(TaskType.REPLICA_COPY, key, list(targets), None)

    def create_move_task(self, key: str, source: str, target: str) -> tuple:
        """Starts moving key's copy on segment ``source`` to segment ``target``; returns
        (task id, 0) or (UUID(int=0), code)."""
        return _tasks(self).submit(TaskType.REPLICA_MOVE, key, [target], source)

    def query_task(self, task_id) -> tuple:
        """(QueryTaskResponse, 0) for a task this store created, or (None, TASK_NOT_FOUND)."""
        return _tasks(self).query(task_id)

    # ---- more segments ----
    def mount_segment(self, path: str, size: int, offset: int = 0, protocol: str = "tcp",
                      location: str = "") -> Dict[str, Any]:
        """Maps ``size`` bytes of the file ``path`` (e.g. under /dev/shm) from ``offset`` (a
        multiple of the page size) and mounts them as another segment of this client:
        ``{"ret": 0 or a negative code, "segment_ids": [...]}``. ``protocol`` must be the store's
        ("tcp"); ``location`` is accepted (a locality hint; host memory here)."""
        if protocol not in ("", "tcp"):
            log.error("mount_segment: protocol %r: this build transfers over tcp only", protocol)
            return {"ret": ErrorCode.INVALID_PARAMS, "segment_ids": []}
        buf = ctypes.create_string_buffer(256)
        rc = _lib().mc_store_mount_segment(self._h, str(path).encode(), int(size), int(offset), buf, 256)
        if rc < 0:
            log.error("mount_segment(%r) failed: %s", path, last_error())
            return {"ret": rc, "segment_ids": []}
        return {"ret": 0, "segment_ids": [buf.value.decode()]}

    def allocate_and_mount_segment(self, size: int, protocol: str = "tcp", location: str = "") -> Dict[str, Any]:
        """Allocates ``size`` bytes (rounded up to pages) in this process and mounts them as
        another segment: ``{"ret", "segment_ids", "allocated_size"}``."""
        if protocol not in ("", "tcp"):
            log.error("allocate_and_mount_segment: protocol %r: this build transfers over tcp only", protocol)
            return {"ret": ErrorCode.INVALID_PARAMS, "segment_ids": [], "allocated_size": 0}
        buf = ctypes.create_string_buffer(256)
        got = _u64()
        rc = _lib().mc_store_allocate_and_mount_segment(self._h, int(size), ctypes.byref(got), buf, 256)
        if rc < 0:
            log.error("allocate_and_mount_segment(%d) failed: %s", size, last_error())
            return {"ret": rc, "segment_ids": [], "allocated_size": 0}
        return {"ret": 0, "segment_ids": [buf.value.decode()], "allocated_size": got.value}

    def unmount_segment(self, segment_ids: Sequence[str], grace_period_seconds: int = 0) -> int:
        """Unmounts segments from mount_segment and unmaps their files; 0 or a negative code.
        With ``grace_period_seconds > 0`` the segments are closed to new objects at once while
        what they hold stays readable, and are unmounted when the period ends (or at close());
        the call returns at once."""
        return self._unmount(segment_ids, grace_period_seconds, False, "unmount_segment")

    def unmount_and_free_segment(self, segment_ids: Sequence[str], grace_period_seconds: int = 0) -> int:
        """Unmounts segments from allocate_and_mount_segment and frees their memory."""
        return self._unmount(segment_ids, grace_period_seconds, True, "unmount_and_free_segment")

    def _unmount(self, ids, grace, free: bool, what: str) -> int:
        if isinstance(grace, bool) or not isinstance(grace, int):
            raise TypeError(f"{what}(grace_period_seconds=...): want an int, got {type(grace).__name__}")
        if grace < 0 or grace >= 1 << 32:
            log.error("%s(grace_period_seconds=%r): want 0 <= seconds < 2**32", what, grace)
            return ErrorCode.INVALID_PARAMS
        n = len(ids)
        if n == 0:
            return 0
        karr, keep = _keys(ids)
        rc = _lib().mc_store_unmount_segments(self._h, karr, n, int(free), grace)
        if rc != 0:
            log.error("%s failed: %s", what, last_error())
        return rc

    # ---- hardware- or deployment-bound ----
    def setup_dummy(self, mem_pool_size: Union[int, str], local_buffer_size: Union[int, str],
                    server_address: str) -> int:
        """Sets up as a dummy client of the real client (``mooncake_client --port``) at
        ``server_address`` ("host:port"): the master, metadata server and protocol come from it,
        and this client owns no segment, so what it puts lands in real clients' memory. 0, or
        INVALID_PARAMS when no real client answers there or it refuses (MC_AUTH_TOKEN).
        ``mem_pool_size`` bounds what ``alloc_from_mem_pool`` hands out; ``local_buffer_size``
        is the staging buffer (0: none, as in setup). This client moves its own bytes
        (docs/store.md, "Dummy clients")."""
        pool = parse_size(mem_pool_size, "mem_pool_size")
        buf = parse_size(local_buffer_size, "local_buffer_size")
        if not isinstance(server_address, str):
            raise TypeError(f"setup_dummy(server_address=...): want 'host:port', got {type(server_address).__name__}")
        rc = self._set_up("setup_dummy", lambda l, h: l.mc_store_setup_dummy(
            h, pool, buf or _NO_BUFFER_STAGING, server_address.encode()), buf)
        if rc == 0:
            self._mem_pool_limit = pool
        return rc

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

    def remove_by_regex(self, regex_pattern: Optional[str] = None, force: bool = False, *,
                        pattern: Optional[str] = None) -> int:
        """Removes keys matching the (RE2) pattern (``regex_pattern``, upstream's name; ``pattern``
        also taken); returns how many, or a negative code. Leased and hard-pinned keys stay
        unless ``force``."""
        if (regex_pattern is None) == (pattern is None):
            raise TypeError("remove_by_regex: give the pattern once (regex_pattern=, or pattern=)")
        p = regex_pattern if pattern is None else pattern
        return _lib().mc_store_remove_by_regex(self._h, p.encode(), int(bool(force)))

    def remove_all(self, force: Optional[bool] = None) -> int:
        """Removes every key of this store's tenant; returns how many. ``force=False`` leaves the
        keys a plain remove would refuse (leased to a reader, hard-pinned), as upstream's
        ``remove_all(force=False)``; ``force=True`` or no argument (upstream's older
        ``remove_all()``) removes them too. Puts in progress are left alone."""
        return _lib().mc_store_remove_all_ex(self._h, int(force is False))


# ---- upstream's module-level names -------------------------------------------------------

# The buffer pool lives in mooncake.buffer_pool (no native library, no torch); upstream's module
# has it here too.
from .buffer_pool import (BufferLease, BufferLeaseView, BufferPool, RegisteredBufferLease,  # noqa: E402
                          RegisteredBufferLeaseView, RegisteredBufferPool)

Descriptor = BufferDescriptor  # upstream's Descriptor is a buffer's (AllocatedBuffer::Descriptor)

# Enum members at module level, as upstream's pybind11 enums export them (export_values). Two
# names are in two enums: PROCESSING and FAILED are TaskStatus's, as the later export wins
# upstream; ReplicaStatus.PROCESSING / .FAILED spell the others.
for _enum in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    for _m in _enum:
        globals()[_m.name] = _m
        __all__.append(_m.name)
del _enum, _m
