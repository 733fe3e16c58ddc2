"""``mooncake._store_segments``: the store's memory calls (``SegmentMixin``) — registered
buffers (``register_buffer`` / ``unregister_buffer``), ``alloc_from_mem_pool``, and extra segments
(``mount_segment``, ``allocate_and_mount_segment``, ``unmount_segment``,
``unmount_and_free_segment``) and the local disk (``unmount_local_disk_segment``)."""

from __future__ import annotations

import logging
from typing import Any, Dict, Sequence

from ._store_abi import ErrorCode, _keys, _lib, _u64, byref, last_error, string_buffer
from ._store_memory import _host_alloc, _host_free

log = logging.getLogger("mooncake.store")


class SegmentMixin:
    """Buffer, memory-pool and segment calls of ``MooncakeDistributedStore``."""

    # ---- registered buffers ----
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Registers ``size`` bytes at ``buffer_ptr`` for zero-copy calls; 0 or a negative
        code (an overlap with a registered buffer is an error). Memory from
        ``alloc_from_mem_pool`` is registered already: registering exactly such an allocation
        is accepted (0), as upstream's, and registers it again after ``unregister_buffer``."""
        ptr, n = int(buffer_ptr), int(size)
        if self._pool.get(ptr) == n:
            if ptr not in self._pool_unregistered:
                return 0
            rc = _lib().mc_store_register_buffer(self._h, ptr, n)
            if rc == 0:
                self._pool_unregistered.discard(ptr)
            return rc
        return _lib().mc_store_register_buffer(self._h, ptr, n)

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Unregisters a buffer from ``register_buffer`` (or ``alloc_from_mem_pool``: that
        memory stays allocated until close(), and ``register_buffer`` registers it again)."""
        ptr = int(buffer_ptr)
        rc = _lib().mc_store_unregister_buffer(self._h, ptr)
        if rc == 0 and ptr in self._pool:
            self._pool_unregistered.add(ptr)
        return rc

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
        self._pool[ptr] = int(size)
        self._pool_bytes += size
        return ptr

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
        buf = string_buffer(256)
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
        buf = string_buffer(256)
        got = _u64()
        rc = _lib().mc_store_allocate_and_mount_segment(self._h, int(size), byref(got), buf, 256)
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

    def unmount_local_disk_segment(self, grace_period_seconds: int = 0) -> int:
        """Takes this client's local disk (SSD offload, ``setup(enable_ssd_offload=True)``) out of
        the store while its memory segment stays: no more objects move there, moves in progress
        are cancelled and the copies on the disk are dropped (an object whose only copy was there
        is gone; eviction then drops objects as without SSD offload). Then waits
        ``grace_period_seconds`` before returning, as upstream's. 0; 0 with nothing done when SSD
        offload is off; -1 on a dummy client (its real client owns the disk)."""
        g = grace_period_seconds
        if isinstance(g, bool) or not isinstance(g, int):
            raise TypeError(f"unmount_local_disk_segment(grace_period_seconds=...): want an int, got {type(g).__name__}")
        if g < 0 or g >= 1 << 32:
            log.error("unmount_local_disk_segment(grace_period_seconds=%r): want 0 <= seconds < 2**32", g)
            return ErrorCode.INVALID_PARAMS
        if not self._h:
            log.error("unmount_local_disk_segment: the store is not set up")
            return ErrorCode.INVALID_PARAMS
        rc = _lib().mc_store_unmount_local_disk_segment(self._h, g)
        if rc != 0:
            log.error("unmount_local_disk_segment failed: %s", last_error())
        return rc

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
