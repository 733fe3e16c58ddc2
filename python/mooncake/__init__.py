"""Mooncake in Go: transfer engine, torch.distributed backend and distributed KV store.

Submodules: ``mooncake.engine`` (TransferEngine), ``mooncake.pg`` (process-group backend and its
elastic API, needs torch), ``mooncake.store`` (MooncakeDistributedStore), ``mooncake.buffer_pool``
(BufferPool, also exported here). They share one Go runtime and one transfer engine per process,
loaded from ``libmooncake.so`` beside this file.
"""

__version__ = "0.1.0"

from mooncake.buffer_pool import BufferPool, RegisteredBufferPool  # noqa: E402,F401  (no torch, no native library)

def allocate_gpu_memory(size: int, device: int = 0) -> int:
    """``size`` bytes of device memory on GPU ``device`` (cudaMalloc / hipMalloc through the
    CUDA or HIP runtime, loaded on first use): its address. RuntimeError, naming what is
    missing, where this host has no GPU runtime or no GPU. See ``mooncake._gpu``."""
    from ._gpu import allocate_gpu_memory as _alloc

    return _alloc(size, device)


def free_gpu_memory(ptr: int) -> None:
    """Frees memory returned by allocate_gpu_memory."""
    from ._gpu import free_gpu_memory as _free

    _free(ptr)
