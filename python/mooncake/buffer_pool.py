"""``mooncake.buffer_pool``: registered scratch buffers for the store's zero-copy calls.

``BufferPool(store)`` hands out leases of host memory that is registered with the store
(``register_buffer``), for ``get_into`` / ``put_from`` / ``get_into_ranges`` and the tensor
``*_into`` / ``*_from`` calls. Memory is kept in size classes (powers of two from
``min_size_class``) and reused: registering happens once per region, not once per call.

A lease has ``ptr`` (the address to pass to the store), ``size`` (the size asked for, 0
allowed), ``buffer`` (a new writable ``memoryview`` of ``size`` bytes on each access) and
``release()``; it is a context manager. Rules, as upstream's: ``release()`` raises while views of
``buffer`` (slices, numpy arrays over it) are alive; a lease that is dropped without ``release()``
goes back to the pool when it is garbage-collected (a view keeps its lease alive); ``close()``
raises while leases are active. ``max_regions`` bounds the number of active leases and
``max_bytes`` their total size-class bytes (0: no bound); when a bound is reached, ``acquire``
waits for a release (``block``, ``timeout``; defaults from ``block_on_exhaustion`` /
``default_timeout``) or raises. Differences from upstream: the pool's memory is its own
(allocated and registered by the pool) rather than carved from the store's setup-time local
buffer, so there is no separate "overflow" path and ``max_bytes`` 0 means no bound (upstream:
twice the local buffer); ``alignment`` (of each region's start) defaults to 4096 bytes rather
than upstream's 8 MiB; ``max_regions=0`` is refused.

Errors are upstream's type, ``RuntimeError`` (messages start with upstream's words), through
classes that are also the natural Python type: ``BufferPoolError`` (a RuntimeError) for a
closed pool, exhaustion and active leases; ``BufferPoolArgumentError`` (also a ValueError) for
bad arguments, a size above the pool's capacity and a released lease; ``BufferPoolTimeout`` (also
a TimeoutError) when a wait times out; ``LeaseViewsAliveError`` (also a BufferError) when views
block ``release()``.

``lease.buffer.obj`` is a ``BufferLeaseView`` (upstream's name for the object a lease's memoryview
views; its ``buffer`` is another memoryview of it). ``RegisteredBufferPool`` /
``RegisteredBufferLease`` / ``RegisteredBufferLeaseView`` are upstream's older names for the same
classes. ``mooncake.store`` exports all of them too. This module imports neither torch nor the
native library.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
import time
import weakref
from typing import Dict, List, Optional

__all__ = ["BufferPool", "BufferLease", "BufferLeaseView", "RegisteredBufferPool", "RegisteredBufferLease",
           "RegisteredBufferLeaseView", "BufferPoolError", "BufferPoolArgumentError", "BufferPoolTimeout",
           "LeaseViewsAliveError"]

# Sizes above this cannot be allocated in this process (ctypes arrays are indexed by ssize_t).
_MAX_SIZE = sys.maxsize // 2


class BufferPoolError(RuntimeError):
    """A pool that cannot do what was asked: closed, exhausted, leases still active."""


class BufferPoolArgumentError(BufferPoolError, ValueError):
    """A bad argument, a size above the pool's capacity, or a lease used after release."""


class BufferPoolTimeout(BufferPoolError, TimeoutError):
    """No buffer was released within the timeout."""


class LeaseViewsAliveError(BufferPoolError, BufferError):
    """``release()`` while views of ``lease.buffer`` are alive."""


class _Region:
    __slots__ = ("mem", "ptr", "capacity", "cached")

    def __init__(self, capacity: int, alignment: int, cached: bool):
        self.mem = (ctypes.c_char * (capacity + alignment))()
        base = ctypes.addressof(self.mem)
        self.ptr = (base + alignment - 1) // alignment * alignment
        self.capacity = capacity
        self.cached = cached


class BufferLeaseView:
    """The leased bytes as an object with the buffer protocol: what ``lease.buffer`` views
    (``lease.buffer.obj``). ``buffer`` is a new memoryview of it; like every view of a lease's
    memory it must be gone before the lease is released."""

    __slots__ = ()

    @property
    def buffer(self) -> memoryview:
        return memoryview(self).cast("B")


@functools.lru_cache(maxsize=64)
def _view_type(n: int) -> type:
    """The BufferLeaseView class of n bytes (a ctypes byte array underneath). Its ``_lease``
    keeps the lease alive while any view of it is."""
    return type("BufferLeaseView", (BufferLeaseView, ctypes.c_ubyte * n), {"__slots__": ("_lease",)})


class BufferLease:
    """One leased, registered buffer (see the module docstring)."""

    def __init__(self, pool: "BufferPool", region: _Region, size: int):
        self._pool, self._region, self._size = pool, region, size
        self._exports: List[weakref.ref] = []  # the BufferLeaseViews handed out
        self._released = False

    @property
    def ptr(self) -> int:
        self._live()
        return self._region.ptr

    @property
    def size(self) -> int:
        return self._size

    @property
    def buffer(self) -> memoryview:
        """A new writable memoryview of ``size`` bytes over the leased memory (it, and anything
        made from it, keeps the lease alive and must be gone before ``release()``)."""
        self._live()
        exporter = _view_type(self._size).from_address(self._region.ptr)
        exporter._lease = self
        self._exports = [r for r in self._exports if r() is not None]
        self._exports.append(weakref.ref(exporter))
        return memoryview(exporter).cast("B")

    def _live(self) -> None:
        if self._released:
            raise BufferPoolArgumentError("buffer lease is closed: this BufferLease was released; acquire a new one")

    def release(self) -> None:
        """Returns the memory to the pool. Raises LeaseViewsAliveError (a RuntimeError and a
        BufferError) while views of ``buffer`` are alive (delete them first); releasing twice
        is a no-op."""
        if self._released:
            return
        # every live view (one we gave out, its slices, arrays over it) keeps its exporter
        # alive through their shared managed buffer
        if any(r() is not None for r in self._exports):
            raise LeaseViewsAliveError("cannot release buffer while exported views exist: views of lease.buffer "
                                       "(or arrays made from them) are still alive; delete them first")
        self._give_back()

    def _give_back(self) -> None:
        self._released = True
        self._exports = []
        self._pool._give_back(self._region, self)

    def __del__(self) -> None:
        # Dropped without release(): no view is alive (a view would keep this lease alive).
        try:
            if not self._released:
                self._give_back()
        except Exception:  # interpreter shutdown, or a store already closed
            pass

    def __enter__(self) -> "BufferLease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else f"ptr=0x{self._region.ptr:x}"
        return f"BufferLease(size={self._size}, {state})"


class BufferPool:
    """Registered buffers leased by size class. ``store`` is a set-up MooncakeDistributedStore
    (anything with ``register_buffer`` / ``unregister_buffer``)."""

    def __init__(self, store, max_bytes: int = 0, min_size_class: int = 64 * 1024,
                 max_size_class: Optional[int] = None, alignment: int = 4096,
                 block_on_exhaustion: bool = True, default_timeout: Optional[float] = None,
                 max_regions: Optional[int] = None, prewarm_size: Optional[int] = None,
                 prewarm_count: int = 0):
        self._closed = True  # until set up: __del__ of a pool that failed here does nothing
        if store is None:
            raise BufferPoolError("BufferPool: MooncakeDistributedStore is not initialized (store is None)")
        if not hasattr(store, "register_buffer") or not hasattr(store, "unregister_buffer"):
            raise TypeError(f"BufferPool: store must be a MooncakeDistributedStore, got {type(store).__name__}")
        for name, v in (("max_bytes", max_bytes), ("min_size_class", min_size_class), ("alignment", alignment)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise BufferPoolArgumentError(f"BufferPool: {name} must be a non-negative int, got {v!r}")
        if min_size_class == 0 or alignment == 0:
            raise BufferPoolArgumentError("BufferPool: min_size_class and alignment must be positive, got "
                                          f"min_size_class={min_size_class}, alignment={alignment}")
        if alignment < 8 or alignment & (alignment - 1):
            raise BufferPoolArgumentError("BufferPool: alignment must be a power of two and at least "
                                          f"sizeof(void*) (8), got {alignment}")
        if max_size_class is not None and max_size_class < min_size_class:
            raise BufferPoolArgumentError(f"BufferPool: max_size_class {max_size_class} < min_size_class {min_size_class}")
        if max_regions is not None and max_regions < 1:
            raise BufferPoolArgumentError(f"BufferPool: max_regions must be >= 1 or None, got {max_regions}")
        if default_timeout is not None and default_timeout < 0:
            raise BufferPoolArgumentError(f"BufferPool: timeout must be non-negative, got {default_timeout}")
        self._store = store
        self.max_bytes = max_bytes
        self.min_size_class = min_size_class
        self.max_size_class = max_size_class
        self.alignment = alignment
        self.block_on_exhaustion = block_on_exhaustion
        self.default_timeout = default_timeout
        self.max_regions = max_regions
        self._cv = threading.Condition()
        self._free: Dict[int, List[_Region]] = {}
        # the regions of the active leases, by id(lease): the pool holds no reference to a lease,
        # so one dropped without release() is collected and gives its region back (__del__)
        self._active: Dict[int, _Region] = {}
        self._active_bytes = 0
        self._regions: List[_Region] = []
        self._closed = False
        if prewarm_size is not None and prewarm_count > 0:
            self.prewarm(prewarm_size, prewarm_count)

    # ---- sizes ----
    def _class_of(self, size: int) -> int:
        c = self.min_size_class
        while c < size:
            c *= 2
        if self.max_size_class is not None and c > self.max_size_class:
            return size  # too big to cache: an exact region, freed on release
        return c

    # ---- leases ----
    def acquire(self, size: int, block: Optional[bool] = None, timeout: Optional[float] = None) -> BufferLease:
        """A lease of at least ``size`` bytes (0 allowed: a lease with an empty ``buffer``). When
        ``max_regions`` / ``max_bytes`` are reached it waits for a release (``block``; default
        ``block_on_exhaustion``) up to ``timeout`` seconds (default ``default_timeout``; None
        waits as long as needed), else raises BufferPoolError (no wait) or BufferPoolTimeout."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise BufferPoolArgumentError(f"BufferPool.acquire: size must be a non-negative int, got {size!r}")
        block = self.block_on_exhaustion if block is None else block
        timeout = self.default_timeout if timeout is None else timeout
        if timeout is not None and timeout < 0:
            raise BufferPoolArgumentError(f"BufferPool.acquire: timeout must be non-negative, got {timeout}")
        if size > _MAX_SIZE:
            raise BufferPoolArgumentError(f"requested buffer size exceeds pool capacity: {size} bytes overflow "
                                          f"what this process can allocate ({_MAX_SIZE})")
        cls = self._class_of(size)
        if self.max_bytes and cls > self.max_bytes:
            raise BufferPoolArgumentError(f"requested buffer size exceeds pool capacity: {size} bytes (size class "
                                          f"{cls}) exceed max_bytes={self.max_bytes}")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while True:
                if self._closed:
                    raise BufferPoolError("buffer pool is closed")
                full_regions = self.max_regions is not None and len(self._active) >= self.max_regions
                full_bytes = bool(self.max_bytes) and self._active_bytes + cls > self.max_bytes
                if not (full_regions or full_bytes):
                    break
                why = (f"{len(self._active)} active leases (max_regions={self.max_regions})" if full_regions
                       else f"{self._active_bytes} bytes leased + {cls} > max_bytes={self.max_bytes}")
                if not block:
                    raise BufferPoolError(f"buffer pool is exhausted: {why}")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise BufferPoolTimeout(f"timed out waiting for buffer: no buffer within {timeout}s: {why}")
                self._cv.wait(left)
            free = self._free.get(cls)
            region = free.pop() if free else None
            if region is None:
                try:
                    region = _Region(cls, self.alignment,
                                     cached=self.max_size_class is None or cls <= self.max_size_class)
                except (MemoryError, OverflowError) as e:
                    raise BufferPoolError(f"BufferPool: cannot allocate {cls} bytes: {e!r}") from None
                rc = self._store.register_buffer(region.ptr, cls)
                if rc != 0:
                    raise BufferPoolError(f"BufferPool: register_buffer({cls} bytes) failed with {rc}")
                self._regions.append(region)
            lease = BufferLease(self, region, size)
            self._active[id(lease)] = region
            self._active_bytes += cls
            return lease

    def buffer(self, size: int, block: Optional[bool] = None, timeout: Optional[float] = None) -> BufferLease:
        """Like acquire; meant for ``with pool.buffer(n) as lease:``."""
        return self.acquire(size, block, timeout)

    def _give_back(self, region: _Region, lease: BufferLease) -> None:
        with self._cv:
            if self._active.pop(id(lease), None) is None:
                return
            self._active_bytes -= region.capacity
            if region.cached and not self._closed:
                self._free.setdefault(region.capacity, []).append(region)
            else:
                self._store.unregister_buffer(region.ptr)
                self._regions.remove(region)
            self._cv.notify_all()

    def prewarm(self, size: int, count: int) -> None:
        """Allocates and registers ``count`` regions for ``size`` ahead of use."""
        leases = [self.acquire(size, block=False) for _ in range(int(count))]
        for lease in leases:
            lease.release()

    @property
    def active_leases(self) -> int:
        with self._cv:
            return len(self._active)

    @property
    def registered_bytes(self) -> int:
        with self._cv:
            return sum(r.capacity for r in self._regions)

    def close(self) -> None:
        """Unregisters and frees every region. Raises BufferPoolError (a RuntimeError) while
        leases are active; closing twice is a no-op."""
        with self._cv:
            if self._closed:
                return
            if self._active:
                raise BufferPoolError(f"cannot close buffer pool with active leases: {len(self._active)} lease(s) "
                                      "still active; release them first")
            for r in self._regions:
                self._store.unregister_buffer(r.ptr)
            self._regions.clear()
            self._free.clear()
            self._closed = True
            self._cv.notify_all()

    def __del__(self) -> None:
        # No lease is alive (each holds its pool): unregister the regions before their memory goes.
        if getattr(self, "_closed", True):
            return
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __enter__(self) -> "BufferPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView
