"""Mooncake in Go: transfer engine, torch.distributed backend and distributed KV store.

Submodules: ``mooncake.engine`` (TransferEngine), ``mooncake.pg`` (process-group backend and its
elastic API, needs torch), ``mooncake.store`` (MooncakeDistributedStore). They share one Go
runtime and one transfer engine per process, loaded from ``libmooncake.so`` beside this file.
"""

__version__ = "0.1.0"
