"""``mooncake._store_memory``: memory outside the store's calls — ``BufferHandle`` (a value in
library-owned memory, from ``get_buffer``), page-aligned host memory
(``MooncakeHostMemAllocator``, ``get_alloc_func_addr`` / ``get_free_func_addr``) and NUMA
placement of the calling thread (``bind_to_numa_node``). It uses ctypes for memory (arrays over
addresses, libc) and reaches the library only through ``mooncake._store_abi``."""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading
from typing import Dict

from ._store_abi import ErrorCode, _P, _free_value, _host_alloc_addr, _host_free_addr, _vp

log = logging.getLogger("mooncake.store")


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
                                                                        "__del__": _handle_del,
                                                                        "__module__": BufferHandle.__module__})
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
            _free_value(p)
        except Exception:
            pass


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
    return _host_alloc_addr()


def get_free_func_addr() -> int:
    """The address of ``void free(void *p)`` for memory from ``get_alloc_func_addr()``'s
    function (``mc_host_free``)."""
    return _host_free_addr()


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
