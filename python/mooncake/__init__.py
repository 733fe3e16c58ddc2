"""Mooncake in Go: transfer engine, torch.distributed backend and distributed KV store.

Submodules: ``mooncake.engine`` (TransferEngine), ``mooncake.pg`` (process-group backend and its
elastic API, needs torch), ``mooncake.store`` (MooncakeDistributedStore), ``mooncake.buffer_pool``
(BufferPool, also exported here). They share one Go runtime and one transfer engine per process,
loaded from ``libmooncake.so`` beside this file.
"""

__version__ = "0.1.0"

from mooncake.buffer_pool import BufferPool, RegisteredBufferPool  # noqa: E402,F401  (no torch, no native library)
