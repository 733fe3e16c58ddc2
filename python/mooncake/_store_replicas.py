"""``mooncake._store_replicas``: where an object's copies live — ``ReplicaStatus``, the
replica descriptors (``ReplicaDescriptor`` and the memory / disk / local-disk / buffer
descriptors) and the store's replica and tier calls (``ReplicaMixin``: ``get_replica_desc``,
``batch_replica_clear``, ``get_tier_stats``, ...)."""

from __future__ import annotations

import enum
import json
import logging
from typing import Any, Dict, List, Sequence

from . import _native
from ._store_abi import ErrorCode, _i32, _keys, _key, _lib, _u64, byref, last_error

log = logging.getLogger("mooncake.store")


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


class ReplicaMixin:
    """Replica and storage-tier calls of ``MooncakeDistributedStore``."""

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
        rc = _lib().mc_store_offload_rpc_read_count(self._h, byref(n))
        if rc < 0:
            raise _native.MooncakeError(rc, _native.last_error())
        return n.value
