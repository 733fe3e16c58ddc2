"""mooncake.store's module-level names beside MooncakeDistributedStore, as upstream's native
module has them: the enums and their exported members, ObjectDataType and
ReplicateConfig.data_type, the host allocator by address, and bind_to_numa_node."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys

import pytest

from store_fixtures import master, store  # noqa: E402,F401  (fixtures)
import mooncake.store as ms  # noqa: E402

# upstream's test of its native module's public names (tests of mooncake-wheel), less the three
# this build does not have (docs/store.md says why)
UPSTREAM_NAMES = """RangedReadSnapshot ObjectDataType SoftPinAction ReplicateConfig ReplicaStatus
MemoryDescriptor DiskDescriptor ReplicaDescriptor Descriptor TaskType TaskStatus QueryTaskResponse
BufferHandle BufferLeaseView BufferLease BufferPool RegisteredBufferPool RegisteredBufferLease
RegisteredBufferLeaseView MooncakeHostMemAllocator MooncakeDistributedStore bind_to_numa_node
get_alloc_func_addr get_free_func_addr UNKNOWN KVCACHE TENSOR WEIGHT SAMPLE ACTIVATION GRADIENT
OPTIMIZER_STATE METADATA GENERAL UNDEFINED INITIALIZED PROCESSING COMPLETE REMOVED FAILED
REPLICA_COPY REPLICA_MOVE PENDING SUCCESS""".split()


def test_upstream_module_names_and_enum_members():
    assert [n for n in UPSTREAM_NAMES if not hasattr(ms, n)] == []
    assert [n for n in UPSTREAM_NAMES if n not in ms.__all__] == []
    assert [(m.name, int(m)) for m in ms.ObjectDataType] == [
        ("UNKNOWN", 0), ("KVCACHE", 1), ("TENSOR", 2), ("WEIGHT", 3), ("SAMPLE", 4), ("ACTIVATION", 5),
        ("GRADIENT", 6), ("OPTIMIZER_STATE", 7), ("METADATA", 8), ("GENERAL", 9)]
    assert ms.KVCACHE is ms.ObjectDataType.KVCACHE and ms.GENERAL is ms.ObjectDataType.GENERAL
    assert ms.COMPLETE is ms.ReplicaStatus.COMPLETE and ms.UNDEFINED is ms.ReplicaStatus.UNDEFINED
    assert ms.REPLICA_MOVE is ms.TaskType.REPLICA_MOVE and ms.SUCCESS is ms.TaskStatus.SUCCESS
    # in two enums: the later export (TaskStatus) holds the module name, as upstream's
    assert ms.PROCESSING is ms.TaskStatus.PROCESSING and ms.FAILED is ms.TaskStatus.FAILED
    assert ms.Descriptor is ms.BufferDescriptor  # upstream's AllocatedBuffer::Descriptor
    d = ms.Descriptor()
    assert (d.size, d.buffer_address, d.transport_endpoint) == (0, 0, "")


def test_replicate_config_data_type(store):
    c = ms.ReplicateConfig()
    assert c.data_type is ms.ObjectDataType.UNKNOWN
    c.data_type = ms.ObjectDataType.KVCACHE
    assert c.data_type is ms.KVCACHE and "data_type=KVCACHE" in repr(c)
    c.data_type = 3
    assert c.data_type is ms.ObjectDataType.WEIGHT
    assert ms.ReplicateConfig(data_type=ms.TENSOR).data_type is ms.TENSOR
    with pytest.raises(ValueError, match="not an ObjectDataType"):
        c.data_type = 10
    with pytest.raises(TypeError):
        c.data_type = "KVCACHE"
    with pytest.raises(TypeError):
        c.data_type = True
    assert c.data_type is ms.ObjectDataType.WEIGHT  # a refused value changes nothing
    assert store.put("dt/k", b"tagged", c) == 0
    assert store.get("dt/k") == b"tagged"


def test_host_allocator_by_address(store):
    alloc_addr, free_addr = ms.get_alloc_func_addr(), ms.get_free_func_addr()
    assert alloc_addr and free_addr and alloc_addr != free_addr
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(alloc_addr)
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(free_addr)
    assert alloc(0) is None
    small, big = alloc(100), alloc(4 << 20)
    assert small % 4096 == 0 and big % (2 << 20) == 0
    try:
        value = bytes(range(256)) * (16 << 10)  # 4 MiB
        ctypes.memmove(big, value, len(value))
        assert store.register_buffer(big, 4 << 20) == 0
        assert store.put_from("alloc/k", big, len(value)) == 0
        ctypes.memset(big, 0, 4 << 20)
        assert store.get_into("alloc/k", big, 4 << 20) == len(value)
        assert ctypes.string_at(big, len(value)) == value
        assert store.unregister_buffer(big) == 0
    finally:
        free(small)
        free(big)
        free(None)


_PROBE = r"""
import ctypes, logging, os, sys
logging.basicConfig(level=logging.WARNING, format="%(message)s")
import mooncake.store as ms
libc = ctypes.CDLL(None, use_errno=True)
def policy():
    mode, mask = ctypes.c_int(-1), (ctypes.c_ulong * 16)()
    assert libc.syscall(ctypes.c_long(239), ctypes.byref(mode), mask, ctypes.c_ulong(16 * 64 + 1), None, ctypes.c_ulong(0)) == 0
    return mode.value, mask[0]
if len(sys.argv) > 2:  # start from one CPU, so that a bind to the node's CPUs shows
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
before = (sorted(os.sched_getaffinity(0)), policy())
ms.bind_to_numa_node(int(sys.argv[1]))
print("BEFORE", before)
print("AFTER", (sorted(os.sched_getaffinity(0)), policy()))
"""


def _nodes():
    base = "/sys/devices/system/node"
    return sorted(int(d[4:]) for d in os.listdir(base) if d.startswith("node") and d[4:].isdigit()) \
        if os.path.isdir(base) else []


@pytest.mark.skipif(platform.machine() != "x86_64" or not _nodes(),
                    reason="reads the thread's policy with x86_64's get_mempolicy; needs sysfs NUMA nodes")
def test_bind_to_numa_node():
    node = _nodes()[0]
    with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
        cpus = sorted(ms._cpu_list(f.read()) & os.sched_getaffinity(0))
    r = subprocess.run([sys.executable, "-c", _PROBE, str(node), "narrow"], capture_output=True, text=True, check=True)
    before = eval(r.stdout.split("BEFORE", 1)[1].split("AFTER")[0])
    after = eval(r.stdout.split("AFTER", 1)[1])
    assert before[1] == (0, 0) and after == (cpus, (1, 1 << node))  # MPOL_PREFERRED, the node's bit
    # a node that does not exist: a warning, nothing changed (default policy, same CPUs)
    r = subprocess.run([sys.executable, "-c", _PROBE, "4095"], capture_output=True, text=True, check=True)
    before = eval(r.stdout.split("BEFORE", 1)[1].split("AFTER")[0])
    after = eval(r.stdout.split("AFTER", 1)[1])
    assert before == after and after[1] == (0, 0)
    assert "Invalid NUMA node: 4095" in r.stderr
    with pytest.raises(TypeError):
        ms.bind_to_numa_node("0")
