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
reads (``prepare_get_into_ranges_snapshot``: RangedReadSnapshot, templates, plans), transfer
sessions (``batch_get_session_start``, ``batch_put_session_start`` and their
``*_multi_buffer_ranges`` transfers), replica
descriptors, ``batch_replica_clear``, copy/move tasks and extra segments. docs/store.md lists every method of
upstream's reference with what it does here.

Tensors: ``put_tensor`` stores a tensor (any dtype and shape, CPU or CUDA — read back on the CPU),
or a list/tuple/dict of tensors, in a self-describing format; ``get_tensor`` rebuilds it. The
tensor calls (TP, parallelism, safetensors, CUDA) live in ``mooncake.store_tensor.TensorMixin``.

Layout: this module is the public face. ``MooncakeDistributedStore`` is put together from mixins
by concern, in the modules below, and every name this module had before the split is still
importable from it (``__module__`` of the public ones is still ``mooncake.store``).

====================  ========================================================================
``_store_abi``        the binding: libmooncake.so's ``mc_store_*`` signatures (by family), C
                      structs, callbacks, error codes, last error (the one place they live)
``_store_types``      ReplicateConfig, SoftPinAction, ObjectDataType
``_store_setup``      parse_size; setup, setup_dummy, close, health_check (SetupMixin)
``_store_data``       put, upsert, get, queries, removal (DataMixin)
``_store_replicas``   replica descriptors; replica and tier calls (ReplicaMixin)
``_store_memory``     BufferHandle, host allocator, NUMA binding
``_store_segments``   registered buffers, memory pool, extra segments (SegmentMixin)
``_store_ranged``     ranged reads: snapshots, templates, plans (RangedReadMixin)
``_store_sessions``   transfer sessions: ranged gets and puts, one master call (SessionMixin)
``_store_tasks``      copy and move tasks, their runner (TaskMixin)
``store_tensor``      tensor calls (TensorMixin)
====================  ========================================================================
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Union  # noqa: F401  (upstream's module had them)

from ._store_abi import (_ALLOC_FN, _BYTES_DATA, _LIB_MSG, _P, ErrorCode, _ItemC,  # noqa: F401
                         _ReplicateConfigC, _buffer, _cfg, _cs, _fresh_bytes, _get_scratch, _i32, _i64, _key, _keys,
                         _lib, _lib_message, _new_bytes, _u64, _vp, last_error)
from ._store_data import DataMixin
from ._store_memory import (_MPOL_PREFERRED, _NODE_DIR, _SET_MEMPOLICY, BufferHandle,  # noqa: F401
                            MooncakeHostMemAllocator, _cpu_list, _handle_del, _handle_types, _host_alloc,
                            _host_free, _libc, bind_to_numa_node, get_alloc_func_addr, get_free_func_addr)
from ._store_ranged import (RangedReadMixin, RangedReadPlan, RangedReadSnapshot, RangedReadTemplate,  # noqa: F401
                            _addr, _check_snapshot, _Frozen, _handles, _u64s)
from ._store_replicas import (BufferDescriptor, DiskDescriptor, LocalDiskDescriptor, MemoryDescriptor,  # noqa: F401
                              ReplicaDescriptor, ReplicaMixin, ReplicaStatus)
from ._store_segments import SegmentMixin
from ._store_sessions import SessionMixin
from ._store_setup import (_NO_BUFFER_STAGING, _SETUP_ALIASES, _SETUP_IGNORED, _SETUP_KEYS,  # noqa: F401
                           _SIZE_RE, DEFAULT_SETUP_GLOBAL_SEGMENT_SIZE, DEFAULT_SETUP_LOCAL_BUFFER_SIZE,
                           SetupMixin, _is_mooncake_config, _parse_bool, _setup_kwargs, parse_size)
from ._store_tasks import (_TASK_NOT_FOUND, QueryTaskResponse, TaskMixin, TaskStatus, TaskType,  # noqa: F401
                           _TaskRunner, _tasks)
from ._store_types import ObjectDataType, ReplicateConfig, SoftPinAction, _check_count, _check_enum  # noqa: F401
from .store_tensor import ParallelAxis, ReadTarget, TensorMixin, TensorParallelism

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "last_error", "parse_size", "ErrorCode",
           "BufferHandle", "ReplicaDescriptor", "ReplicaStatus", "MemoryDescriptor", "DiskDescriptor",
           "BufferDescriptor", "LocalDiskDescriptor", "MooncakeHostMemAllocator", "TaskType", "TaskStatus",
           "QueryTaskResponse", "ParallelAxis", "TensorParallelism", "ReadTarget", "RangedReadSnapshot",
           "ObjectDataType", "Descriptor", "BufferPool", "BufferLease", "BufferLeaseView", "RegisteredBufferPool",
           "RegisteredBufferLease", "RegisteredBufferLeaseView", "bind_to_numa_node", "get_alloc_func_addr",
           "get_free_func_addr"]

log = logging.getLogger("mooncake.store")


# The calls live in the mixins, by concern (see the module docstring); the tensor calls in
# store_tensor.TensorMixin.
class MooncakeDistributedStore(SetupMixin, DataMixin, ReplicaMixin, SegmentMixin, RangedReadMixin, SessionMixin,
                               TaskMixin, TensorMixin):
    """A client of Mooncake Store. Call ``setup`` first, ``close`` at the end."""

    def __init__(self):
        self._h = 0
        self._lock = threading.Lock()
        self._no_buffer = False
        self._pool: Dict[int, int] = {}  # alloc_from_mem_pool's memory: address -> size
        self._pool_unregistered: Set[int] = set()  # of those, the ones unregister_buffer released
        self._pool_bytes = 0
        self._mem_pool_limit: Optional[int] = None  # setup_dummy's mem_pool_size
        self._task_runner = None


# ---- upstream's module-level names -------------------------------------------------------

# The buffer pool lives in mooncake.buffer_pool (no native library, no torch); upstream's module
# has it here too.
from .buffer_pool import (BufferLease, BufferLeaseView, BufferPool, RegisteredBufferLease,  # noqa: E402
                          RegisteredBufferLeaseView, RegisteredBufferPool)

Descriptor = BufferDescriptor  # upstream's Descriptor is a buffer's (AllocatedBuffer::Descriptor)


def _serialize_tensor(tensor):
    """Upstream's helper: (header bytes, data address, data bytes, owner) of the tensor object
    ``put_tensor`` stores for ``tensor`` (header and data back to back)."""
    from ._structured_tensors import tensor_object_parts
    return tensor_object_parts(tensor)


def _deserialize_tensor(data):
    """Upstream's helper: the tensor in a stored tensor object."""
    from ._structured_tensors import decode_tensor_object
    return decode_tensor_object(data)


# Public names defined in the _store_* modules keep this module as theirs (repr, pickling, help()), as
# before they moved.
for _name in [n for n in globals() if not n.startswith("_")]:
    if getattr(globals()[_name], "__module__", "").startswith("mooncake._store_"):
        globals()[_name].__module__ = __name__
del _name

# Enum members at module level, as upstream's pybind11 enums export them (export_values). Two
# names are in two enums: PROCESSING and FAILED are TaskStatus's, as the later export wins
# upstream; ReplicaStatus.PROCESSING / .FAILED spell the others.
for _enum in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    for _m in _enum:
        globals()[_m.name] = _m
        __all__.append(_m.name)
del _enum, _m
